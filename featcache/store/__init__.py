"""The feature store: its format (`format`), where stores are (`find`), and whether one holds up
(`verify`).

Import-light (zarr, numpy, stdlib): stage 2 and `tosca cache` read stores through this package
without loading the backbone side. Its names load with their module on first use, so a module
below the store (`left_out`) or a command that never opens one does not load zarr.
"""

from __future__ import annotations

from tosca_foundation.lazy import lazy_names

__getattr__, __all__ = lazy_names(
    __name__,
    {
        "find": ("find_stores", "resolve_store"),
        "format": (
            "DTYPES",
            "SCHEMA_VERSION",
            "SPLITS",
            "FeatureStore",
            "SplitLayout",
            "StoreShape",
            "check_name",
            "chunk_checksum",
            "ids_sha256",
            "is_tosca_store",
            "looks_like_store_remains",
            "remove_store_tree",
            "stored_chunk_size",
        ),
        "verify": (
            "ChunkFault",
            "StoreDamaged",
            "check_not_replaced",
            "check_readable",
            "checked_chunks",
            "chunk_faults",
            "fix_store",
            "open_unchanged",
            "read_split",
            "verify_notes",
            "verify_store",
            "verify_streaming",
        ),
    },
)
