"""The datasets whose images come from domains, in their released layouts, each turned into a
`DatasetSource` whose image ids name their domain (`tosca_foundation.dataset_domains` reads it):

- `core50`: CORe50's 128x128 release, `[core50_128x128/]s<session>/o<object>/*.png`; 50 object
  classes; train sessions 1, 2, 4, 5, 6, 8, 9, 11 and test sessions 3, 7, 10 (the split of its
  authors' NC/NI protocols that RanPAC and S-Prompts use);
- `domainnet`: `<domain>/<class>/*.jpg` with the official `<domain>_train.txt` and
  `<domain>_test.txt` lists (`path label` per line) beside the domain folders; 345 classes;
- `cddb_hard`: CDDB's hard track, `<task>/train/.../{0_real,1_fake}/*` and `<task>/val/...` (its
  test split), tasks gaugan, biggan, wild, whichfaceisreal, san; 2 classes (real, fake);
- `cifar100_superclasses`: the CIFAR-100 folders (as `cifar100` reads them) labelled by their 20
  superclasses, each image's id keeping its fine class folder (its domain).

Nothing here downloads: each reads a folder or an archive (`materialise`); tests build tiny
made-up folders of each layout.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from featcache.sources.datasets import DatasetSource, SplitSamples, folder_dataset, materialise
from featcache.sources.listing import FolderListing
from tosca_foundation.dataset_domains import (
    CIFAR100_SUPERCLASSES,
    CORE50_TEST_SESSIONS,
    CORE50_TRAIN_SESSIONS,
    DOMAIN_RULES,
    SUPERCLASS_OF,
)
from tosca_foundation.errors import UserError


def _samples(files: list[tuple[str, int]], root: Path) -> SplitSamples:
    ids = [f for f, _ in files]
    return SplitSamples(ids=ids, labels=np.asarray([label for _, label in files], dtype=np.int64), root=root)


def _nonempty(name: str, root: Path, splits: dict[str, SplitSamples]) -> None:
    for split, samples in splits.items():
        if len(samples) == 0:
            raise UserError(f"no {name} images found in the {split} split under {root}")


def core50(data_root: Path | None, cache_dir: Path) -> DatasetSource:
    """CORe50 by session: objects o1..o50 are the classes, sessions the domains."""
    folder, source, sha, left_out = materialise(data_root, cache_dir, "core50")
    root = folder / "core50_128x128" if (folder / "core50_128x128").is_dir() else folder
    if not (root / "s1").is_dir():
        raise UserError(
            f"{root} is not CORe50's layout: expected session folders s1 ... s11 holding o1 ... o50"
        )
    class_names = [f"o{k}" for k in range(1, 51)]
    listing = FolderListing(left_out, [root])
    splits = {}
    for split, sessions in (("train", CORE50_TRAIN_SESSIONS), ("test", CORE50_TEST_SESSIONS)):
        files = []
        for session in sessions:
            for label, name in enumerate(class_names):
                here = root / f"s{session}" / name
                if here.is_dir():
                    files += [(str(p.relative_to(root)), label) for p in listing.files(here, split, name)]
        splits[split] = _samples(files, root)
    _nonempty("core50", root, splits)
    rule = "sessions 1, 2, 4, 5, 6, 8, 9, 11 train; 3, 7, 10 test"
    return DatasetSource("core50", class_names, splits, source, sha, rule, left_out=left_out)


def domainnet(data_root: Path | None, cache_dir: Path) -> DatasetSource:
    """DomainNet by its official per-domain train/test lists."""
    folder, source, sha, left_out = materialise(data_root, cache_dir, "domainnet")
    domains = DOMAIN_RULES["domainnet"].domains
    lists = {(d, s): folder / f"{d}_{s}.txt" for d in domains for s in ("train", "test")}
    present = [d for d in domains if lists[(d, "train")].is_file()]
    if not present:
        raise UserError(
            f"{folder} holds no DomainNet lists (<domain>_train.txt, <domain>_test.txt for {', '.join(domains)})"
        )
    names: dict[int, str] = {}
    splits = {}
    for split in ("train", "test"):
        files = []
        for domain in present:
            path = lists[(domain, split)]
            if not path.is_file():
                raise UserError(f"DomainNet list missing: {path}")
            for n, line in enumerate(path.read_text().splitlines(), start=1):
                if not line.strip():
                    continue
                parts = line.split()
                if len(parts) != 2 or not parts[1].isdigit():
                    raise UserError(f"{path} line {n}: expected 'path label', got {line[:80]!r}")
                image, label = parts[0], int(parts[1])
                names.setdefault(label, image.split("/")[1] if image.count("/") >= 2 else str(label))
                if not (folder / image).is_file():
                    raise UserError(f"{path} line {n}: image not found: {folder / image}")
                files.append((image, label))
        splits[split] = _samples(files, folder)
    class_names = [names.get(k, str(k)) for k in range(max(names) + 1)]
    rule = "the official <domain>_train.txt / <domain>_test.txt lists"
    return DatasetSource("domainnet", class_names, splits, source, sha, rule, left_out=left_out)


def cddb_hard(data_root: Path | None, cache_dir: Path) -> DatasetSource:
    """CDDB-Hard: real (0_real) and fake (1_fake) images of five generators' tasks."""
    folder, source, sha, left_out = materialise(data_root, cache_dir, "cddb_hard")
    root = folder / "CDDB" if (folder / "CDDB").is_dir() else folder
    tasks = DOMAIN_RULES["cddb_hard"].domains
    missing = [t for t in tasks if not (root / t).is_dir()]
    if missing:
        raise UserError(
            f"{root} is not CDDB-Hard's layout: no task folder {missing[0]} (tasks: {', '.join(tasks)})"
        )
    listing = FolderListing(left_out, [root])
    splits = {}
    for split, sub in (("train", "train"), ("test", "val")):
        files = []
        for task in tasks:
            for label, name in enumerate(("0_real", "1_fake")):
                for here in sorted((root / task / sub).rglob(name)):
                    if here.is_dir():
                        files += [(str(p.relative_to(root)), label) for p in listing.files(here, split, name)]
        splits[split] = _samples(files, root)
    _nonempty("cddb_hard", root, splits)
    rule = "each task's train/ and val/ (CDDB's test split)"
    return DatasetSource("cddb_hard", ["real", "fake"], splits, source, sha, rule, left_out=left_out)


def cifar100_superclasses(data_root: Path | None, cache_dir: Path) -> DatasetSource:
    """The CIFAR-100 folders labelled by superclass (the fine class stays in each image's id)."""
    fine = folder_dataset("cifar100_superclasses", data_root, cache_dir, expected_classes=100)
    unknown = [n for n in fine.class_names if n not in SUPERCLASS_OF]
    if unknown:
        raise UserError(
            f"{unknown[0]!r} is no CIFAR-100 fine class name (cifar100_superclasses reads CIFAR-100's folders)"
        )
    coarse = list(CIFAR100_SUPERCLASSES)
    remap = np.array([coarse.index(SUPERCLASS_OF[n]) for n in fine.class_names], dtype=np.int64)
    for samples in fine.splits.values():
        samples.labels = remap[samples.labels]
    fine.class_names = coarse
    fine.split_rule += "; labels: the 20 superclasses"
    return fine
