"""The datasets' sources: each turns a data root into labelled sample lists per split. Each is
registered (its name, class count, default class split and test share) in
`tosca_foundation.dataset_names`, which imports its function from here when first used.

A dataset is only a list of (stable id, label, how to open the image) per split, plus its
class names, the rule that made the split, where it came from (the resolved data root and a
fingerprint of the files it uses) and what the folder rule left out (`featcache.sources.listing`).
Nothing here decodes images eagerly.
"""

from __future__ import annotations

import hashlib
import os
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from featcache.sources.archives import is_archive, unpack_once
from featcache.sources.listing import IMAGE_SUFFIXES, FolderListing, skipped_name, subfolders
from featcache.sources.pixels import check_pixels, open_file, to_rgb8
from featcache.store.left_out import LeftOut
from tosca_foundation.dataset_names import DATASETS
from tosca_foundation.errors import UserError
from tosca_foundation.text import printable

SPLITS = ("train", "test")


@dataclass
class SplitSamples:
    """One split: ids (relative paths or indices), integer labels, and pixels on demand."""

    ids: list[str]
    labels: np.ndarray
    root: Path | None = None
    arrays: np.ndarray | None = None  # (N, H, W, 3) uint8, for datasets shipped as arrays

    def __len__(self) -> int:
        return len(self.ids)

    def describe(self, i: int) -> str:
        return str(self.root / self.ids[i]) if self.root is not None else f"{self.ids[i]} (in-memory array)"

    def open_image(self, i: int, short_side: int | None = None) -> Image.Image:
        """Sample i as the 8-bit RGB image a viewer shows (`featcache.sources.pixels`), decoded by
        Pillow; its size checked from the header first (`check_pixels`, with the short side it will
        be resized to)."""
        if self.arrays is not None:
            return Image.fromarray(self.arrays[i])
        assert self.root is not None
        with open_file(self.root / self.ids[i]) as fh, Image.open(fh) as img:
            check_pixels(*img.size, short_side)
            return to_rgb8(img)

    def fingerprint(self, start: int, stop: int) -> str:
        """sha256 of where samples start..stop come from: each file's id, size and modification
        time (one stat each), or the rows' bytes for a dataset shipped as arrays. A file replaced,
        even under the same name, changes it."""
        digest = hashlib.sha256()
        if self.arrays is not None:
            digest.update(np.ascontiguousarray(self.arrays[start:stop]).tobytes())
            return digest.hexdigest()
        assert self.root is not None
        for sample_id in self.ids[start:stop]:
            try:
                stat = os.stat(self.root / sample_id)
            except OSError as exc:
                raise UserError(
                    f"cannot read image {self.root / sample_id} ({exc.strerror}); was it moved?"
                ) from None
            digest.update(f"{sample_id}\x1f{stat.st_size}\x1f{stat.st_mtime_ns}\n".encode())
        return digest.hexdigest()

    def subset(self, index: np.ndarray) -> SplitSamples:
        return SplitSamples(
            ids=[self.ids[i] for i in index],
            labels=self.labels[index],
            root=self.root,
            arrays=None if self.arrays is None else self.arrays[index],
        )


@dataclass
class DatasetSource:
    """A resolved dataset: what the store records about it and the samples of each split."""

    name: str
    class_names: list[str]
    splits: dict[str, SplitSamples]
    source: str
    source_sha256: str | None
    split_rule: str
    limit_per_class: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # split -> the folder holding that split's class folders (for messages; not recorded)
    folders: dict[str, Path] = field(default_factory=dict)
    left_out: LeftOut = field(default_factory=LeftOut)  # what the folder rule did not use

    def chunk_sources(self, chunk_size: int) -> dict[str, list[str]]:
        """Per split, the fingerprint of each chunk's files (`SplitSamples.fingerprint`): a store
        records it with each chunk, so a resumed extraction can tell which files changed."""
        sources = {}
        for split in SPLITS:
            samples = self.splits[split]
            sources[split] = [
                samples.fingerprint(start, min(start + chunk_size, len(samples)))
                for start in range(0, len(samples), chunk_size)
            ]
        return sources

    @staticmethod
    def files_sha256(sources: dict[str, list[str]]) -> str:
        """One fingerprint of every file the splits use, from the chunks' (identity.dataset)."""
        return hashlib.sha256(
            "\n".join(f"{s}:{fp}" for s in SPLITS for fp in sources[s]).encode()
        ).hexdigest()

    def attrs(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "data_root": self.source,
            "source_sha256": self.source_sha256,
            "class_names": list(self.class_names),
            "num_classes": len(self.class_names),
            "split_rule": self.split_rule,
            "limit_per_class": self.limit_per_class,
            "samples": {split: len(samples) for split, samples in self.splits.items()},
            **self.extra,
        }


# ---------------------------------------------------------------- folder helpers


def list_class_tree(
    split_dir: Path, class_names: list[str], root: Path, listing: FolderListing
) -> SplitSamples:
    """`split_dir/<class>/...` -> samples with ids relative to `root`, class by class."""
    ids: list[str] = []
    labels: list[int] = []
    for label, name in enumerate(class_names):
        folder = split_dir / name
        if not folder.is_dir():
            continue
        files = listing.files(folder, split_dir.name, name)
        ids += [str(p.relative_to(root)) for p in files]
        labels += [label] * len(files)
    return SplitSamples(ids=ids, labels=np.asarray(labels, dtype=np.int64), root=root)


def materialise(
    data_root: Path | None, cache_dir: Path, dataset: str
) -> tuple[Path, str, str | None, LeftOut]:
    """(folder to read, resolved data root, archive sha256 or None, what unpacking left out) for a
    folder or an archive."""
    if data_root is None:
        raise UserError(f"dataset {dataset!r} needs --data-root (a folder or an archive of it)")
    data_root = Path(data_root).expanduser()
    if not data_root.exists():
        raise UserError(f"data root not found: {data_root}")
    if is_archive(data_root):
        folder, sha, left_out = unpack_once(data_root, cache_dir)
        return folder, str(data_root.resolve()), sha, left_out
    if data_root.is_file():
        raise UserError(
            f"data root {data_root} is a file but not a known archive (.zip, .tar, .tar.gz, .tgz)"
        )
    if not data_root.is_dir():
        raise UserError(
            f"data root {data_root} is neither a folder nor an archive (.zip, .tar, .tar.gz, .tgz)"
        )
    return data_root, str(data_root.resolve()), None, LeftOut()


def find_split_tree(folder: Path, depth: int = 3) -> tuple[Path, str]:
    """The folder holding `train/` and `test/` (or `val/`) at most `depth` levels down, the
    shallowest; two at the same depth are refused (which one is meant cannot be told)."""
    level_folders = [folder]
    for _ in range(depth + 1):
        found = [(here, name) for here in level_folders if (name := _test_name(here))]
        if len(found) > 1:
            raise UserError(
                f"{folder} holds more than one train/ + test/ tree ({found[0][0]} and {found[1][0]}): "
                "pass the one to use as --data-root"
            )
        if found:
            return found[0]
        below: dict[Path, Path] = {}  # resolved -> as reached: a tree linked twice is one tree
        for here in level_folders:
            for p in sorted(here.iterdir()):
                if p.is_dir() and skipped_name(p.name) is None:  # not hidden, not macOS metadata
                    below.setdefault(p.resolve(), p)
        level_folders = list(below.values())
    raise UserError(f"no train/ with test/ or val/ folders found under {folder}")


def _test_name(here: Path) -> str | None:
    """'test' or 'val' where `here` holds train/ and one of them."""
    if (here / "train").is_dir():
        for test_name in ("test", "val"):
            if (here / test_name).is_dir():
                return test_name
    return None


def _refuse_look_alikes(root: Path, names: list[str]) -> None:
    """Two class names that differ only in Unicode normalisation (é as one character or as e plus
    an accent: macOS and Linux write them differently) look the same everywhere tosca shows them,
    so two such classes, or a test class that matches its train class only up to that, are refused."""
    seen: dict[str, str] = {}
    for name in dict.fromkeys(names):
        other = seen.setdefault(unicodedata.normalize("NFC", name), name)
        if other != name:
            raise UserError(
                f"{root}: class folders {other!a} and {name!a} differ only in Unicode "
                "normalisation (they look the same); rename them to one spelling"
            )


def folder_dataset(
    name: str,
    data_root: Path | None,
    cache_dir: Path,
    expected_classes: int | None = None,
) -> DatasetSource:
    """Any `train/<class>/` + `test/<class>/` (or `val/`) image-folder tree, or an archive of one."""
    folder, source, sha, left_out = materialise(data_root, cache_dir, name)
    root, test_name = find_split_tree(folder)
    class_names = [p.name for p in subfolders(root / "train", left_out)]
    if not class_names:
        raise UserError(f"{root / 'train'} holds no class folders")
    if expected_classes is not None and len(class_names) != expected_classes:
        raise UserError(
            f"{name} expects {expected_classes} class folders in {root / 'train'}, found {len(class_names)}"
        )
    test_classes = [p.name for p in subfolders(root / test_name, left_out)]
    _refuse_look_alikes(root, class_names + test_classes)
    unknown = sorted(set(test_classes) - set(class_names))
    if unknown:
        shown = ", ".join(printable(name) for name in unknown[:5]) + (", ..." if len(unknown) > 5 else "")
        raise UserError(f"{root / test_name} has classes missing from train/: {shown}")
    # a link may not lead into the data folder from elsewhere in it (`featcache.sources.listing`)
    fence = [root, *(root / split / c for split in ("train", test_name) for c in class_names)]
    listing = FolderListing(left_out, [f for f in fence if f.is_dir()])
    splits = {"train": list_class_tree(root / "train", class_names, root, listing)}
    splits["test"] = list_class_tree(root / test_name, class_names, root, listing)
    for split, samples in splits.items():
        if len(samples) == 0:
            raise UserError(f"no images found in the {split} split under {root}")
    rule = f"given by the folders: train/ and {test_name}/"
    folders = {"train": root / "train", "test": root / test_name}
    return DatasetSource(name, class_names, splits, source, sha, rule, folders=folders, left_out=left_out)


# ---------------------------------------------------------------- registered datasets


EUROSAT_CLASSES = [
    "AnnualCrop",
    "Forest",
    "HerbaceousVegetation",
    "Highway",
    "Industrial",
    "Pasture",
    "PermanentCrop",
    "Residential",
    "River",
    "SeaLake",
]
EUROSAT_SPLIT_SEED = 0


def _find_eurosat(folder: Path) -> Path:
    for candidate in [folder, *sorted(folder.rglob("2750"))]:
        if candidate.is_dir() and {p.name for p in subfolders(candidate)} >= set(EUROSAT_CLASSES):
            return candidate
    raise UserError(f"no EuroSAT class folders (2750/<Class>/) found under {folder}")


def _download_torchvision(dataset: str, cache_dir: Path) -> Path:
    import torchvision

    root = cache_dir / "_downloads"
    root.mkdir(parents=True, exist_ok=True)
    makers = {
        "eurosat": lambda: torchvision.datasets.EuroSAT(str(root), download=True),
        "cifar10": lambda: torchvision.datasets.CIFAR10(str(root), download=True),
        "cifar100": lambda: torchvision.datasets.CIFAR100(str(root), download=True),
    }
    try:
        makers[dataset]()  # CIFAR's test split comes in the same archive
    except Exception as exc:
        raise UserError(
            f"cannot download {dataset} ({str(exc).splitlines()[0][:120]}); pass --data-root with a local copy"
        ) from exc
    return root


def eurosat(data_root: Path | None, cache_dir: Path) -> DatasetSource:
    """EuroSAT's class folders, split here: of each class, its registered `test_share` is test."""
    share = DATASETS["eurosat"].test_share
    if data_root is None:
        folder = _download_torchvision("eurosat", cache_dir)
        source, sha, left_out = f"torchvision download in {folder.resolve()}", None, LeftOut()
    else:
        folder, source, sha, left_out = materialise(data_root, cache_dir, "eurosat")
    base = _find_eurosat(folder)
    class_names = list(EUROSAT_CLASSES)
    rng = np.random.RandomState(EUROSAT_SPLIT_SEED)
    parts: dict[str, tuple[list[str], list[int]]] = {"train": ([], []), "test": ([], [])}
    listing = FolderListing(left_out, [base, *(base / name for name in class_names)])
    for label, name in enumerate(class_names):
        files = [str(p.relative_to(base / name)) for p in listing.files(base / name, "", name)]
        order = rng.permutation(len(files))
        n_test = round(share * len(files))
        for split, index in (("test", order[:n_test]), ("train", order[n_test:])):
            parts[split][0].extend(f"{name}/{files[i]}" for i in index)
            parts[split][1].extend([label] * len(index))
    splits = {
        s: SplitSamples(ids, np.asarray(lab, dtype=np.int64), root=base) for s, (ids, lab) in parts.items()
    }
    rule = (
        f"stratified {1 - share:.0%}/{share:.0%}: per class in class-name order, "
        f"file names sorted, permuted by one numpy RandomState({EUROSAT_SPLIT_SEED}); the first "
        f"round({share}*n) of each class are test; samples kept in that permuted order"
    )
    return DatasetSource(
        "eurosat",
        class_names,
        splits,
        source,
        sha,
        rule,
        folders={"train": base, "test": base},
        left_out=left_out,
    )


def _torchvision_cifar(name: str, folder: Path) -> DatasetSource:
    import torchvision

    cls = torchvision.datasets.CIFAR10 if name == "cifar10" else torchvision.datasets.CIFAR100
    splits = {}
    for split, train in (("train", True), ("test", False)):
        ds = cls(str(folder), train=train, download=False)
        labels = np.asarray(ds.targets, dtype=np.int64)
        ids = [f"{split}/{i:05d}" for i in range(len(labels))]
        splits[split] = SplitSamples(ids=ids, labels=labels, arrays=np.asarray(ds.data))
    return DatasetSource(
        name, list(ds.classes), splits, str(folder.resolve()), None, "official train/test batches"
    )


def _cifar(name: str, data_root: Path | None, cache_dir: Path, num_classes: int) -> DatasetSource:
    marker = "cifar-10-batches-py" if name == "cifar10" else "cifar-100-python"
    if data_root is None:
        return _torchvision_cifar(name, _download_torchvision(name, cache_dir))
    if Path(data_root).is_dir() and (Path(data_root) / marker).is_dir():
        return _torchvision_cifar(name, Path(data_root))
    return folder_dataset(name, data_root, cache_dir, expected_classes=num_classes)


def cifar10(data_root: Path | None, cache_dir: Path) -> DatasetSource:
    return _cifar("cifar10", data_root, cache_dir, 10)


def cifar100(data_root: Path | None, cache_dir: Path) -> DatasetSource:
    return _cifar("cifar100", data_root, cache_dir, 100)


def imagefolder(data_root: Path | None, cache_dir: Path) -> DatasetSource:
    return folder_dataset("imagefolder", data_root, cache_dir)


def _paper_folders(name: str) -> Callable[[Path | None, Path], DatasetSource]:
    """One of the paper's benchmarks in train/ + test/ class folders, of its registered class count."""

    def resolve(data_root: Path | None, cache_dir: Path) -> DatasetSource:
        return folder_dataset(name, data_root, cache_dir, expected_classes=DATASETS[name].num_classes)

    return resolve


cub200 = _paper_folders("cub200")
imagenet_r = _paper_folders("imagenet_r")
imagenet_a = _paper_folders("imagenet_a")
omnibenchmark = _paper_folders("omnibenchmark")
vtab = _paper_folders("vtab")


# ---------------------------------------------------------------- entry point


def limit_per_class(samples: SplitSamples, limit: int) -> SplitSamples:
    """The first `limit` samples of each class, in stored order (deterministic)."""
    keep: list[int] = []
    seen: dict[int, int] = {}
    for i, label in enumerate(samples.labels.tolist()):
        if seen.get(label, 0) < limit:
            keep.append(i)
            seen[label] = seen.get(label, 0) + 1
    return samples.subset(np.asarray(keep, dtype=np.int64))


def check_classes(source: DatasetSource) -> None:
    """Every class needs images in both splits: one without training images gets a prototype that is a
    mean of nothing (NaN, which poisons every prediction), one without test images is never measured.
    Refuses with one line naming the folder."""
    counts = {
        split: np.bincount(samples.labels, minlength=len(source.class_names))
        for split, samples in source.splits.items()
    }

    def where(split: str, name: str) -> str:
        folder = source.folders.get(split)
        if folder is None:
            return f"the {split} split"
        shared = len(set(source.folders.values())) == 1  # one folder per class, split here (EuroSAT)
        return f"the {split} part of {folder / name}" if shared else str(folder / name)

    for label, name in enumerate(source.class_names):
        have = {split: int(c[label]) for split, c in counts.items()}
        empty = [split for split in SPLITS if have.get(split, 0) == 0]
        if not empty:
            continue
        if len(empty) == len(SPLITS):
            raise UserError(
                f"class folder {where('train', name)} holds no images ({', '.join(IMAGE_SUFFIXES)}): "
                "add images, or remove the class from train/ and test/"
            )
        missing, present = empty[0], next(s for s in SPLITS if s not in empty)
        raise UserError(
            f"class {name!r} has {have[present]} image(s) in {where(present, name)} but none in "
            f"{where(missing, name)}: every class needs images in both splits; add some, or remove the "
            "class from both"
        )


def load_dataset(
    name: str, data_root: Path | None, cache_dir: Path, limit: int | None = None
) -> DatasetSource:
    name = DATASETS.pick(name)
    if limit is not None and limit < 1:
        raise UserError(f"--limit-per-class must be at least 1, got {limit}")
    source = DATASETS[name].resolve(Path(data_root) if data_root is not None else None, Path(cache_dir))
    if limit is not None:
        source.splits = {split: limit_per_class(s, limit) for split, s in source.splits.items()}
        source.limit_per_class = limit
    check_classes(source)
    return source
