"""Stage 1: run a frozen backbone once per image and keep its final features in a zarr store.

The Python API (featcache.api) is re-exported here: `open_store`, `extract`, `embed`,
`register_backbone`, `register_dataset`, `BackboneSpec`, `FeatureStore`. Loaded on first use, so
`import featcache` stays light: stage 2 reads stores through `featcache.store` without loading
torch vision code.
"""

from __future__ import annotations

from typing import Any

from featcache.foundation.version import __version__ as __version__

API = (
    "BackboneSpec",
    "DatasetSource",
    "FeatureStore",
    "embed",
    "extract",
    "open_store",
    "register_backbone",
    "register_dataset",
)


def __getattr__(name: str) -> Any:
    if name in API:
        from featcache import api

        return getattr(api, name)
    raise AttributeError(f"module 'featcache' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *API])
