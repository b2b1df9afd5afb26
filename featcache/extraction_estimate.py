"""What an extraction will cost, before it runs (a suite's dry run asks for each store not yet
extracted): the backbone loaded as the extraction would load it (offline: weights that cannot be
loaded without a download are said, in one line), a few images of the real source decoded,
transformed and forwarded and timed, and that time per image multiplied by the images the
extraction would compute. Nothing is written: an archive is read as a stream (its first images
only, and one pass to count its members), never unpacked.
"""

from __future__ import annotations

import functools
import os
import tarfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from featcache.backbones import load_backbone, resolve_backbone
from featcache.images.transforms import make_preprocessing
from featcache.pipeline.mapper import FeatureMapper
from featcache.sources.pixels import open_checked
from featcache.store import FeatureStore, is_tosca_store
from tosca_foundation.dataset_names import DATASETS
from tosca_foundation.errors import UserError
from tosca_foundation.time_estimates import clock_text

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp")
SAMPLE = 16  # images timed
PASSES = 3  # timed forward passes of them
GUESSED_TEST_SHARE = 0.2  # a plug-in that makes its own test split without declaring its share


@dataclass
class ExtractionGuess:
    """Seconds to extract (None: could not be estimated), the images it computes, the classes and
    feature dimension (None when unknown), how it was estimated, and what is missing (one line each)."""

    seconds: float | None
    train_images: int | None = None
    test_images: int | None = None
    classes: int | None = None
    dim: int | None = None
    how: str = ""
    missing: list[str] = field(default_factory=list)


def _members(root: Path) -> tuple[list[str], list[bytes], float]:
    """Every image name of an archive or folder, the bytes of its first SAMPLE, and the seconds a
    pass over it took (an archive is read, not unpacked)."""
    start, names, first = time.perf_counter(), [], []
    if root.is_dir():
        for path in sorted(root.rglob("*")):
            if path.suffix.lower() in IMAGE_SUFFIXES and not path.name.startswith("."):
                names.append(str(path.relative_to(root)))
                if len(first) < SAMPLE:
                    first.append(path.read_bytes())
    elif zipfile.is_zipfile(root):
        with zipfile.ZipFile(root) as archive:
            for info in archive.infolist():
                if info.filename.lower().endswith(IMAGE_SUFFIXES):
                    names.append(info.filename)
                    if len(first) < SAMPLE:
                        first.append(archive.read(info))
    else:
        with tarfile.open(root, "r|*") as archive:
            for member in archive:
                if member.isfile() and member.name.lower().endswith(IMAGE_SUFFIXES):
                    names.append(member.name)
                    if len(first) < SAMPLE:
                        handle = archive.extractfile(member)
                        first.append(handle.read() if handle else b"")
    return names, first, time.perf_counter() - start


def _classes_and_counts(names: list[str], limit: int | None, dataset: str) -> tuple[int, int, int]:
    """(classes, train images, test images): a `train/`+`test/` tree by its folders, else every
    image of a class folder, split by the share its registration declares (`test_share`)."""
    by_split: dict[str, dict[str, int]] = {}
    for name in names:
        parts = Path(name).parts
        split = next((p for p in parts if p in ("train", "test")), "all")
        label = parts[-2] if len(parts) > 1 else ""
        by_split.setdefault(split, {}).setdefault(label, 0)
        by_split[split][label] += 1

    def count(split: str) -> int:
        return sum(min(n, limit) if limit else n for n in by_split.get(split, {}).values())

    if "train" in by_split:
        return len(by_split["train"]), count("train"), count("test")
    classes = by_split.get("all", {})
    declared = DATASETS[dataset].test_share if dataset in DATASETS else None
    share = GUESSED_TEST_SHARE if declared is None else declared
    per_class = [n for n in classes.values()]
    train = sum(min(int(n * (1 - share)), limit) if limit else int(n * (1 - share)) for n in per_class)
    test = sum(min(n - int(n * (1 - share)), limit) if limit else n - int(n * (1 - share)) for n in per_class)
    return len(classes), train, test


def _seconds(mapper: FeatureMapper, batch: torch.Tensor) -> float:
    start = time.perf_counter()
    mapper(batch)
    return time.perf_counter() - start


@functools.lru_cache(maxsize=4)
def _offline_backbone(model: str) -> tuple[Any, str]:
    """The backbone as the extraction would load it, with nothing downloaded (a dry run writes
    nothing): (the loaded backbone, "") or (None, the one line saying why not)."""
    saved = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        return load_backbone(resolve_backbone(model), None, False), ""
    except UserError as exc:
        why = str(exc).split(";")[0].replace(", HF_HUB_OFFLINE is set, so timm cannot download them", "")
        return (
            None,
            f"weights of {model} cannot be loaded offline ({why}; the run would download them, or pass --weights)",
        )
    finally:
        if saved is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = saved


def estimate_extraction(
    model: str,
    dataset: str,
    data_root: Path | None,
    limit_per_class: int | None,
    device: torch.device,
    workers: int = 0,
) -> ExtractionGuess:
    """How long `tosca extract` of this store would take here (see the module docstring)."""
    guess = ExtractionGuess(None)
    if dataset not in DATASETS:
        guess.missing.append(f"dataset {dataset!r} is not registered")
        return guess
    if data_root is None or not Path(data_root).exists():
        where = "none given" if data_root is None else str(data_root)
        guess.missing.append(f"data for {dataset}: {where} does not exist")
    spec = resolve_backbone(model)
    backbone, why = _offline_backbone(model)
    if why:
        guess.missing.append(why)
    if guess.missing or backbone is None:
        return guess
    assert data_root is not None
    try:
        names, first, pass_seconds = _members(Path(data_root))
    except (OSError, tarfile.TarError, zipfile.BadZipFile) as exc:
        guess.missing.append(f"data for {dataset}: {data_root} cannot be read ({type(exc).__name__})")
        return guess
    classes, train, test = _classes_and_counts(names, limit_per_class, dataset)
    if not first or not classes:
        guess.missing.append(f"data for {dataset}: no images found in {data_root}")
        return guess
    prep = make_preprocessing(spec.default_policy, backbone.data_config, "pil")
    mapper = FeatureMapper(backbone.model, device, "fp32", len(first))
    threads = torch.get_num_threads()
    try:
        images = [prep.clean(open_checked(data, prep.resize_size)) for data in first]
        mapper(torch.stack(images))  # warm-up: the first forward of a shape pays for its set-up
        start = time.perf_counter()
        images = [prep.clean(open_checked(data, prep.resize_size)) for data in first]
        decoded = time.perf_counter()
        batch = torch.stack(images)
        # the fastest of a few passes: a CPU's first passes still pay for set-up (2.4x the rate of
        # a whole extraction on a quiet 2-core machine with one timed pass), and noise only slows
        forward = min(_seconds(mapper, batch) for _ in range(PASSES))
        # the extraction decodes in its loader workers while the backbone runs: the slower of the two
        per_image = max(forward, (decoded - start) / max(1, workers)) / len(first)
    except Exception as exc:  # a user's file: say so, do not guess
        guess.missing.append(f"data for {dataset}: its first images cannot be read ({type(exc).__name__})")
        return guess
    finally:
        torch.set_num_threads(threads)
    # unpacking writes every file (EuroSAT: 27,000): about 8 reading passes, measured here
    unpack = 8 * pass_seconds if not Path(data_root).is_dir() else 0.0
    guess.seconds = (train + test) * per_image + unpack
    guess.train_images, guess.test_images, guess.classes, guess.dim = (
        train,
        test,
        classes,
        backbone.feature_dim,
    )
    guess.how = (
        f"{model} timed on {len(first)} images of {Path(data_root).name} ({workers} decoding worker(s)): {1000 * per_image:.0f} ms/img "
        f"x {train + test:,} images" + (f" + {unpack:.0f} s unpacking" if unpack else "")
    )
    return guess


def extraction_ahead(
    model: str,
    dataset: str,
    data_root: Path,
    store_path: Path,
    limit_per_class: int | None,
    device: torch.device,
    workers: int = 0,
) -> str:
    """One line, said before an extraction starts (the demo's first): a complete store at
    `store_path` (nothing to extract: the extraction then checks it and reuses it), else what the
    extraction will take on this machine as loaded now (`estimate_extraction`: a sample of the real
    images timed), else why it cannot be estimated."""
    if _complete(store_path):
        return f"extraction: none, {store_path} is extracted already (every chunk done); it is checked and reused"
    guess = estimate_extraction(model, dataset, data_root, limit_per_class, device, workers)
    if guess.seconds is None:
        return f"extraction: no estimate ({'; '.join(guess.missing)})"
    return (
        f"extraction: about {clock_text(guess.seconds)} (min:s) on this machine as loaded now, "
        f"{os.cpu_count()} core(s), {device.type} ({guess.how})"
    )


def _complete(path: Path) -> bool:
    """A store is at `path` with every chunk of every split done (opened to read, nothing checked)."""
    if not is_tosca_store(path):
        return False
    try:
        return FeatureStore.open(path).is_complete()
    except (UserError, OSError, ValueError, KeyError):
        return False
