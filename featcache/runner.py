"""`tosca extract` from its first line to its last: the outline said before torch loads
(`featcache.outline`), then the plan and the run (`featcache.extraction`), all under the store's
lock, the dataset listed once.

Import-light, like the outline: the extraction's modules load after the first line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from featcache.extract_request import ExtractRequest
from featcache.outline import ExtractOutline, outline_extraction, store_path_of
from featcache.sources.archives import waiting_notice
from featcache.store.object_lock import store_lock

if TYPE_CHECKING:
    from featcache.extraction import ExtractPlan, ExtractSummary
    from featcache.pipeline.chunks import Progress


def extract(
    request: ExtractRequest,
    on_planned: Callable[[ExtractPlan], None] | None = None,
    progress: Progress | None = None,
    on_wait: Callable[[str], None] | None = None,
    on_outlined: Callable[[ExtractOutline], None] | None = None,
) -> ExtractSummary:
    """`tosca extract`: outline (the flags checked, the dataset listed; `on_wait` hears when another
    process is unpacking the same archive) and tell `on_outlined` before torch loads; plan (the
    backbone loaded) and tell `on_planned`; then compute the pending chunks (`progress(split,
    images done now, images of the split)`).

    First come, first served: the store's lock is taken before anything is listed, unpacked or
    loaded, and held to the end, so a second extraction of the same store started while this one
    unpacks its archive is the one refused (in one line naming this one); the folders made for
    the lock are removed again when this one is refused."""
    path = store_path_of(request)
    with waiting_notice(on_wait or (lambda holder: None)), store_lock(path):
        outline = outline_extraction(request, path)
        if on_outlined:
            on_outlined(outline)
        from featcache.extraction import plan_extraction, run_locked

        plan = plan_extraction(request, locked=True, outline=outline)
        if on_planned:
            on_planned(plan)
        return run_locked(plan, progress)
