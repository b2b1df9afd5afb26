"""The feature store: its format (`format`), and whether it holds up (`verify`).

Import-light (zarr, numpy, stdlib): stage 2 and `tosca cache` read stores through this package
without loading the backbone side.
"""

from featcache.store.find import find_stores, resolve_store
from featcache.store.format import (
    DTYPES,
    SCHEMA_VERSION,
    SPLITS,
    FeatureStore,
    SplitLayout,
    StoreShape,
    check_name,
    chunk_checksum,
    ids_sha256,
    is_tosca_store,
    looks_like_store_remains,
    remove_store_tree,
    stored_chunk_size,
)
from featcache.store.verify import (
    ChunkFault,
    StoreDamaged,
    check_not_replaced,
    check_readable,
    chunk_faults,
    fix_store,
    open_unchanged,
    read_split,
    verify_notes,
    verify_store,
    verify_streaming,
)

__all__ = [
    "DTYPES",
    "SCHEMA_VERSION",
    "SPLITS",
    "ChunkFault",
    "FeatureStore",
    "SplitLayout",
    "StoreDamaged",
    "StoreShape",
    "check_name",
    "check_not_replaced",
    "check_readable",
    "chunk_checksum",
    "chunk_faults",
    "find_stores",
    "fix_store",
    "ids_sha256",
    "is_tosca_store",
    "looks_like_store_remains",
    "open_unchanged",
    "read_split",
    "remove_store_tree",
    "resolve_store",
    "stored_chunk_size",
    "verify_notes",
    "verify_store",
    "verify_streaming",
]
