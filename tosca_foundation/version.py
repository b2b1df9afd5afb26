"""The version tosca records in every store and manifest (pyproject.toml holds the same)."""

__version__ = "0.1.0"


def version_line() -> str:
    """`tosca --version`: tosca's version and the libraries whose versions change its numbers."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    parts = [f"tosca {__version__}", f"python {platform.python_version()}"]
    for package in ("torch", "timm", "numpy"):
        try:
            parts.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            parts.append(f"{package} (not installed)")
    return ", ".join(parts)
