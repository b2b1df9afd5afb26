"""Stage 1: run a frozen backbone once per image and keep its final features in a zarr store.

The Python API is re-exported here: the names of `featcache.stage1_api.__all__` (`open_store`,
`extract`, `embed`, ..., and the error classes `UserError`, `UserValueError`, `UserTypeError`;
`featcache.API` lists them). Loaded on first use, so `import featcache`
stays light: stage 2 reads stores through `featcache.store` without loading torch vision code.
"""

from __future__ import annotations

from tosca_foundation.lazy import lazy_face
from tosca_foundation.version import __version__ as __version__

__getattr__, __dir__ = lazy_face(__name__, "stage1_api")
