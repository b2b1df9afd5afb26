"""Stage 1: run a frozen backbone once per image and keep its final features in a zarr store.

Import-light on purpose: stage 2 reads stores through `featcache.store` without loading torch
vision code, so nothing here imports the backbone side eagerly.
"""

__version__ = "0.1.0"
