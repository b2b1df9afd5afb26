"""Is a store fit for use? What `tosca cache verify` checks, what stage 2 checks before it reads,
and what `cache verify --fix` repairs.

Stage 2 reads a split only through `read_split`: every chunk's file must be there, every chunk's
values must match the sha256 recorded when it was written, and the attrs must fit the arrays.
Anything else stops the command with one line naming the first fault and pointing to
`tosca cache verify STORE --fix`, before a number is computed: a flipped bit, a deleted or
truncated chunk file (zarr would read zeros) or attrs edited after the store was made would
otherwise train a run on damaged data and report its accuracy with exit code 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from featcache.store.format import SPLITS, FeatureStore, chunk_checksum, ids_sha256, store_attributes
from featcache.store.object_lock import store_lock
from featcache.store.object_store import (
    ObjectStoreError,
    is_remote,
    store_location,
)
from tosca_foundation.errors import UserError
from tosca_foundation.fingerprints import fingerprint
from tosca_foundation.text import printable


@dataclass(frozen=True)
class ChunkFault:
    """A done chunk whose stored values do not hold up."""

    split: str
    chunk: int
    reason: str

    def __str__(self) -> str:
        return f"{self.split} chunk {self.chunk}: {self.reason}"


class StoreDamaged(UserError):
    """A store whose values or attrs do not hold up: stage 2 refuses to compute on it."""


def _arrays(store: FeatureStore, split: str) -> list[str]:
    return ["features", "views"] if split == "train" and store.views else ["features"]


def missing_chunk_files(store: FeatureStore, split: str, chunks: list[int]) -> list[ChunkFault]:
    """Done chunks with a chunk file missing on disk (zarr would silently read its fill value),
    save those whose recorded checksum is that of the fill value: zarr writes no file for a chunk
    that is all 0.0 (`write_empty_chunks` off), and such a chunk is whole, not damaged."""
    faults = []
    for chunk in chunks:
        for array in _arrays(store, split):
            keys = [(chunk, 0)] if array == "features" else [(k, chunk, 0) for k in range(store.views)]
            gone = [key for key in keys if not store.chunk_present(split, array, key)]
            if gone and not _skipped_fill(store, split, chunk):
                where = store.chunk_name(split, array, gone[0])
                faults.append(ChunkFault(split, chunk, f"its file {where} is missing"))
                break
    return faults


NON_FINITE = "NaN or inf in a chunk marked done"


def value_fault(blocks: list[np.ndarray], recorded: str) -> str:
    """What is wrong with one done chunk's values ("" when nothing): NaN or inf (a store written
    with the finite check off still has valid checksums), no checksum, or one that does not match.
    The one check of a chunk's values: `cache verify` and every stage-2 read (fit, baselines,
    routers, sweeps, suites) call it, so no reader computes on what another refuses."""
    if not all(np.isfinite(block).all() for block in blocks):
        return NON_FINITE
    if not recorded:
        return "marked done but no checksum recorded"
    if recorded != chunk_checksum(*blocks):
        return MISMATCH
    return ""


def _skipped_fill(store: FeatureStore, split: str, chunk: int) -> bool:
    """Whether a done chunk with a file missing reads (fill values where files are missing) as the
    values its recorded checksum vouches for: a chunk all of 0.0 that zarr did not write."""
    recorded = str(store.checksums(split)[chunk])
    sl = store.layout(split).chunk_slice(chunk)
    try:
        blocks = [np.asarray(store.node(f"{split}/{name}")[..., sl, :]) for name in _arrays(store, split)]
    except ObjectStoreError:
        raise  # object storage unreachable: never a finding about the chunk
    except Exception:  # a file beside it that cannot be decoded: the missing one is the finding
        return False
    return bool(recorded) and recorded == chunk_checksum(*blocks)


def chunk_faults(
    store: FeatureStore,
    splits: tuple[str, ...] = SPLITS,
    on_chunk: Callable[[str, int, int], None] | None = None,
) -> list[ChunkFault]:
    """Every done chunk whose file is missing, cannot be read, holds NaN or inf, or does not match
    its recorded checksum.
    `on_chunk(split, 1, chunks of the split)` after each chunk read (a large store's check speaks)."""
    faults: list[ChunkFault] = []
    for split in splits:
        layout = store.layout(split)
        sums = store.checksums(split)
        done = np.flatnonzero(store.done(split)).tolist()
        missing = missing_chunk_files(store, split, done)
        faults += missing
        arrays = [store.node(f"{split}/{name}") for name in _arrays(store, split)]
        for chunk in sorted(set(done) - {f.chunk for f in missing}):
            if on_chunk is not None:
                on_chunk(split, 1, len(done) - len(missing))
            sl = layout.chunk_slice(chunk)
            try:
                blocks = [np.asarray(array[..., sl, :]) for array in arrays]
            except ObjectStoreError:
                raise
            except Exception as exc:  # any decode failure of a damaged chunk file is the finding
                faults.append(ChunkFault(split, chunk, f"cannot be read ({type(exc).__name__})"))
                continue
            reason = value_fault(blocks, str(sums[chunk]))
            if reason:
                faults.append(ChunkFault(split, chunk, reason))
    return faults


def attrs_problems(store: FeatureStore) -> list[str]:
    """Every way the attrs and the arrays disagree (an edited or damaged store)."""
    problems: list[str] = []
    ident = store.identity
    if store.fingerprint != fingerprint(ident):
        problems.append("fingerprint does not match the identity attrs (edited after the store was made)")
    dim = ident.get("backbone", {}).get("feature_dim")
    if dim is not None and dim != store.dim:
        problems.append(f"feature dim {store.dim} != backbone feature_dim {dim}")
    if ident.get("views", 0) != store.views:
        problems.append(f"views array has {store.views} views, attrs say {ident.get('views')}")
    dataset = ident.get("dataset", {}) if isinstance(ident.get("dataset"), dict) else {}
    for split in SPLITS:
        layout = store.layout(split)
        expected_n = (dataset.get("samples") or {}).get(split)
        if expected_n is not None and expected_n != layout.n:
            problems.append(f"{split}: {layout.n} rows, attrs say {expected_n}")
        for name in ("labels", "ids", "done", "checksums"):
            rows = store.node(f"{split}/{name}").shape[0]
            expected = layout.n if name in ("labels", "ids") else layout.n_chunks
            if rows != expected:
                problems.append(f"{split}/{name} has {rows} entries, expected {expected}")
        if problems and problems[-1].startswith(f"{split}/"):
            continue  # the arrays below cannot be read consistently
        n_classes = dataset.get("num_classes")
        labels = store.labels(split)
        if n_classes is not None and labels.size and (labels.min() < 0 or labels.max() >= n_classes):
            problems.append(f"{split}: labels outside 0..{n_classes - 1}")
        recorded_ids = (dataset.get("ids_sha256") or {}).get(split)
        if recorded_ids is not None and recorded_ids != ids_sha256(store.ids(split), labels):
            problems.append(f"{split}: ids or labels differ from the ones recorded in the identity")
    return problems


def verify_store(store: FeatureStore, on_chunk: Callable[[str, int, int], None] | None = None) -> list[str]:
    """Every reason the store is not fit for use; an empty list means it is."""
    problems = attrs_problems(store)
    for split in SPLITS:
        missing = np.flatnonzero(~store.done(split))
        if missing.size:
            problems.append(
                f"{split}: {missing.size}/{store.layout(split).n_chunks} chunks not done "
                f"(first: {missing[:5].tolist()})"
            )
    problems += [str(fault) for fault in chunk_faults(store, on_chunk=on_chunk)]
    return problems


def verify_notes(store: FeatureStore) -> list[str]:
    """What verify wants the user to know without failing the store for it."""
    skipped = store.attrs.get("skipped_images") or []
    if skipped:
        return [f"{len(skipped)} unreadable image(s) were left out on purpose (see `tosca cache info`)"]
    return []


def fix_store(path: str | Path) -> list[ChunkFault]:
    """`cache verify --fix`, under the store's lock: unflag every chunk that does not hold up (so the
    same `tosca extract` recomputes exactly those). Returns what was unflagged."""
    with store_lock(path):
        store = FeatureStore.open(path, mode="r+")
        faults = chunk_faults(store)
        for split in SPLITS:
            store.mark_undone(split, [f.chunk for f in faults if f.split == split])
        return faults


# ---------------------------------------------------------------------------------- stage 2's reads


def _refuse(store: FeatureStore, what: str, count: int = 1, chunks: bool = True) -> StoreDamaged:
    """One line naming the first problem and what repairs it: damaged chunks are unflagged by
    `cache verify --fix` and recomputed; attrs, ids or labels that no longer fit can only be rebuilt."""
    more = f" (and {count - 1} more)" if count > 1 else ""
    if not chunks:
        return StoreDamaged(
            f"store {store.path} cannot be used: {what}{more}; `tosca cache verify {store.path} --fix` "
            "cannot repair that: rebuild the store with the same `tosca extract` and --overwrite"
        )
    return StoreDamaged(
        f"store {store.path} cannot be used: {what}{more}; run `tosca cache verify {store.path} --fix`, "
        "then the same `tosca extract` to recompute what it unflags"
    )


def check_readable(store: FeatureStore, values: bool = False) -> None:
    """Before stage 2 reads a store: complete, with checksums, attrs fitting the arrays (checked once
    per opened store); with `values`, every chunk against its checksum too (one streaming pass,
    memory of one chunk)."""
    if not store.attrs_checked:
        problems = attrs_problems(store)
        if problems:
            raise _refuse(store, problems[0], len(problems), chunks=False)
        store.require_complete()
        store.attrs_checked = True
    if values:
        for split in SPLITS:
            verify_streaming(store, split)


MISMATCH = "values do not match the checksum recorded when it was written"


def read_split(store: FeatureStore, split: str) -> tuple[np.ndarray, np.ndarray | None]:
    """(features [N, D], views [V, N, D] or None) of a split as stored, each chunk's values checked
    (`value_fault`: finite, matching its recorded checksum); call `check_readable` first."""
    chunks = list(range(store.layout(split).n_chunks))
    missing = missing_chunk_files(store, split, chunks)
    if missing:
        raise _refuse(store, str(missing[0]), len(missing))
    try:
        features = np.asarray(store.node(f"{split}/features")[:])
        views = np.asarray(store.node("train/views")[:]) if "views" in _arrays(store, split) else None
    except ObjectStoreError:
        raise
    except Exception:  # a chunk that cannot be decoded: find which, and say so
        faults = chunk_faults(store, (split,)) or [ChunkFault(split, -1, "cannot be read")]
        raise _refuse(store, str(faults[0]), len(faults)) from None
    sums = store.checksums(split)
    layout = store.layout(split)
    faults = []
    for chunk in chunks:
        sl = layout.chunk_slice(chunk)
        blocks = [features[sl]] + ([] if views is None else [views[:, sl]])
        reason = value_fault(blocks, str(sums[chunk]))
        if reason:
            faults.append(ChunkFault(split, chunk, reason))
    if faults:
        raise _refuse(store, str(faults[0]), len(faults))
    if (
        len(features) > 1
        and np.array_equal(features[-1], features[0])
        and bool((features == features[:1]).all())
    ):
        raise one_vector(store, split, len(features))
    return features, views


def one_vector(store: FeatureStore, split: str, rows: int) -> UserError:
    """Every row of a split is the same vector: nothing in it tells a class from another, so any
    figure read off it is argmax's choice among equals or among rounding noise (RanPAC and DS-AL
    printed 16.67 on such a store, the others 0.00 tied). Refused where the split is read."""
    return UserError(
        f"store {printable(store.path)}: every one of the {rows:,} {split} rows is the same vector, so "
        "nothing tells its classes apart and no figure would mean anything; check the backbone that "
        "extracted it (`tosca cache info`) or the arrays it was imported from"
    )


def checked_chunks(store: FeatureStore, split: str) -> Iterator[tuple[slice, np.ndarray, np.ndarray | None]]:
    """`read_split`'s checks one chunk at a time: (rows, features [n, D], views [V, n, D] or None) of
    each chunk in order, as stored, after its values held (`value_fault`) (memory of one chunk: what a store
    too large to hold whole, or loaded into arrays of another dtype, is read through)."""
    layout = store.layout(split)
    chunks = list(range(layout.n_chunks))
    missing = missing_chunk_files(store, split, chunks)
    if missing:
        raise _refuse(store, str(missing[0]), len(missing))
    sums = store.checksums(split)
    arrays = [store.node(f"{split}/{name}") for name in _arrays(store, split)]
    first, same = None, True  # is every row the first one (`one_vector`)?
    for chunk in chunks:
        sl = layout.chunk_slice(chunk)
        try:
            blocks = [np.asarray(array[..., sl, :]) for array in arrays]
        except ObjectStoreError:
            raise
        except Exception as exc:
            fault = ChunkFault(split, chunk, f"cannot be read ({type(exc).__name__})")
            raise _refuse(store, str(fault)) from None
        reason = value_fault(blocks, str(sums[chunk]))
        if reason:
            raise _refuse(store, str(ChunkFault(split, chunk, reason)))
        first = blocks[0][:1] if first is None else first
        same = same and bool((blocks[0] == first).all())
        yield sl, blocks[0], blocks[1] if len(blocks) > 1 else None
    if same and layout.n > 1:  # said after the last chunk: before any figure is drawn from them
        raise one_vector(store, split, layout.n)


def verify_streaming(store: FeatureStore, split: str) -> None:
    """`read_split`'s checks one chunk at a time (for stores too large to hold in memory)."""
    for _ in checked_chunks(store, split):
        pass


def check_not_replaced(path: Path | str, recorded: str, while_: str) -> None:
    """The store at `path` is still the one whose fingerprint was `recorded` when it was opened:
    an `extract --overwrite` by another process replaces it as a whole, and arrays read before and
    after come from two stores. Called after the last read; a result computed across it is refused."""
    attributes = store_attributes(path)  # bounded: what is there now may be anything
    now = attributes.get("fingerprint") if attributes is not None else None
    if now != recorded:
        raise UserError(
            f"the store at {path} was replaced or changed while {while_} read it (an `extract "
            "--overwrite` by another process?); its numbers would mix two stores: run it again"
        )


def open_unchanged(path: Path | str, recorded: str, since: str, then: str) -> FeatureStore:
    """The store at `path`, checked as `check_readable` does, refused in one line when it is no
    longer the store whose fingerprint was `recorded` (re-extracted or edited `since` then; `then`
    says what to do). A damaged store is named as damaged, not as changed."""
    location = store_location(path)
    if not is_remote(location) and not Path(location).exists():  # on object storage: `open` says
        raise UserError(f"the store {since} on ({path}) is gone: moved or deleted since")
    store = FeatureStore.open(location)
    check_readable(store)
    if store.fingerprint != recorded:
        raise UserError(f"the store at {path} changed since {since} (fingerprint differs); {then}")
    return store
