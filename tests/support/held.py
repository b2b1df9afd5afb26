"""Work that runs until the test releases it, on a Dask cluster whose workers are threads of the
test's own process (`LocalCluster(processes=False)`): the release needs no message through the
scheduler, which a test may have cut off. Imported by name (here, not in a test module), so that
Dask pickles the function by reference."""

from __future__ import annotations

import threading

RELEASE = threading.Event()


def held() -> None:
    """Block the worker thread until `RELEASE` is set."""
    RELEASE.wait()
