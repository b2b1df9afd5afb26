"""The version tosca records in every store and manifest (pyproject.toml holds the same)."""

__version__ = "0.1.0"
