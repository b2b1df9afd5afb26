"""Find the store a `fit` means: --store, or --model/--dataset, or the single complete store in the cache."""

from __future__ import annotations

from pathlib import Path

from featcache.errors import UserError
from featcache.store import FeatureStore, find_stores


def resolve_store(
    store: Path | None, model: str | None, dataset: str | None, cache_dir: Path
) -> FeatureStore:
    if store is not None:
        return FeatureStore.open(store)
    candidates = []
    for path in find_stores(cache_dir):
        ident = FeatureStore.open(path).identity
        if model and ident["backbone"]["alias"] != model:
            continue
        if dataset and ident["dataset"]["name"] != dataset:
            continue
        candidates.append(path)
    wanted = " ".join(f"--{k} {v}" for k, v in (("model", model), ("dataset", dataset)) if v) or "any store"
    if not candidates:
        raise UserError(
            f"no store under {cache_dir} matches {wanted}; run `tosca extract` first or pass --store"
        )
    if len(candidates) > 1:
        listed = ", ".join(str(c) for c in candidates[:6])
        raise UserError(
            f"{len(candidates)} stores under {cache_dir} match {wanted}: {listed}; pass --store PATH"
        )
    return FeatureStore.open(candidates[0])
