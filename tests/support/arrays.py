"""Made-up features as another tool would hand them to `tosca import`: the same columns written in
each format it reads (.npz, .npy files, safetensors, Parquet, Arrow, HDF5, a `datasets` folder written as
`save_to_disk` writes one), so a test can check that every format makes the same store."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

KINDS = ("npz", "npy", "safetensors", "parquet", "arrow", "hdf5", "datasets")


def made_up_columns(
    classes: int = 6, per_class: int = 8, dim: int = 16, views: int = 0, seed: int = 0, test_share: int = 4
) -> dict[str, np.ndarray]:
    """Gaussian class clusters, rows shuffled; every `test_share`-th row of a class is a test row."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(classes), per_class)
    centres = rng.normal(size=(classes, dim))
    features = (centres[labels] + 0.5 * rng.normal(size=(len(labels), dim))).astype(np.float32)
    split = np.where(np.tile(np.arange(per_class), classes) % test_share == 0, "test", "train")
    order = rng.permutation(len(labels))
    columns = {"features": features[order], "labels": labels[order], "split": split[order]}
    if views:
        columns["views"] = (
            features[order][:, None] + 0.1 * rng.normal(size=(len(labels), views, dim))
        ).astype(np.float32)
    return columns


def class_names(classes: int) -> list[str]:
    return [f"intent {c}" for c in range(classes)]


def write_as(kind: str, columns: dict[str, np.ndarray], names: list[str], folder: Path) -> list[Path]:
    """The columns and class names in one format; the paths to pass to `tosca import`."""
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "npz":
        np.savez(folder / "arrays.npz", **columns, class_names=np.asarray(names))
        return [folder / "arrays.npz"]
    if kind == "npy":
        for name, values in columns.items():
            np.save(folder / f"{name}.npy", values)
        (folder / "classes.txt").write_text("\n".join(names) + "\n")
        return [folder / f"{name}.npy" for name in columns]
    if kind == "safetensors":
        from safetensors.numpy import save_file

        tensors = {k: np.ascontiguousarray(v) for k, v in columns.items() if k != "split"}
        tensors["split"] = (columns["split"] == "test").astype(np.uint8)  # no strings in safetensors
        save_file(tensors, str(folder / "arrays.safetensors"), {"tosca": json.dumps({"class_names": names})})
        return [folder / "arrays.safetensors"]
    if kind == "hdf5":
        import h5py

        with h5py.File(folder / "arrays.h5", "w") as handle:
            handle.attrs["tosca"] = json.dumps({"class_names": names})
            for name, values in columns.items():
                handle[name] = values.astype(object) if values.dtype.kind == "U" else values
        return [folder / "arrays.h5"]
    table = _table(columns, names)
    if kind == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, folder / "arrays.parquet")
        return [folder / "arrays.parquet"]
    if kind == "arrow":
        import pyarrow.feather as feather

        feather.write_feather(table, folder / "arrays.arrow")
        return [folder / "arrays.arrow"]
    assert kind == "datasets"
    return [_datasets_folder(table.replace_schema_metadata(None), names, folder / "saved")]


def _table(columns: dict[str, np.ndarray], names: list[str]) -> object:
    import pyarrow as pa

    data = {name: pa.array(values.tolist()) for name, values in columns.items()}  # [N, D]: lists of D
    return pa.table(data, metadata={"tosca": json.dumps({"class_names": names})})


def _datasets_folder(table: object, names: list[str], folder: Path) -> Path:
    """What `Dataset.save_to_disk` writes: the Arrow stream, state.json, dataset_info.json (the label
    column a ClassLabel of the class names)."""
    import pyarrow as pa

    folder.mkdir(parents=True)
    arrow = str(folder / "data-00000-of-00001.arrow")
    with pa.OSFile(arrow, "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:  # type: ignore[attr-defined]
        writer.write_table(table)
    (folder / "state.json").write_text(
        json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]})
    )
    info = {"features": {"labels": {"names": names, "_type": "ClassLabel"}}}
    (folder / "dataset_info.json").write_text(json.dumps(info))
    return folder


def hostile_arrays(folder: Path) -> dict[str, Path]:
    """Sources `tosca import` must refuse in one line (the bad-input table's placeholders)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(12, 4)).astype(np.float32)
    y = np.repeat(np.arange(3), 4)
    split = np.tile(["train", "train", "train", "test"], 3)
    names = np.asarray(["a", "b", "c"])

    def npz(name: str, **arrays: object) -> Path:
        given = {"features": x, "labels": y, "split": split, "class_names": names, **arrays}
        np.savez(folder / f"{name}.npz", **{k: v for k, v in given.items() if v is not None})
        return folder / f"{name}.npz"

    nan = x.copy()
    nan[5, 2] = np.nan
    inf = x.copy()
    inf[0, 0] = np.inf
    no_test = split.copy()
    no_test[y == 2] = "train"
    places = {
        "arr_ok": npz("ok"),
        "arr_lengths": npz("lengths", labels=y[:-1]),
        "arr_outside": npz("outside", labels=np.where(y == 2, 7, y)),
        "arr_nan": npz("nan", features=nan),
        "arr_inf": npz("inf", features=inf),
        "arr_one_vector": npz("onevector", features=np.tile(x[:1], (len(x), 1))),
        "arr_int": npz("int", features=(x * 10).astype(np.int64)),
        "arr_1d": npz("flat", features=x[:, 0]),
        "arr_no_test": npz("notest", split=no_test),
        "arr_dup": npz("dup", class_names=np.asarray(["a", "b", "a"])),
        "arr_bad_split": npz("badsplit", split=np.tile(["train", "val", "train", "test"], 3)),
        "arr_no_split": npz("nosplit", split=None),
        "arr_str_labels": npz("strlabels", labels=np.asarray(names)[y]),
        "arr_object": folder / "object.npz",
        "arr_fake": folder / "fake.npz",
        "arr_fake_parquet": folder / "fake.parquet",
        "arr_suffix": folder / "arrays.csv",
        "arr_pipe": folder / "pipe.npz",
        "arr_folder": folder / "folder.npz",
        "arr_parquet": folder / "nolabels.parquet",
    }
    np.savez(places["arr_object"], features=np.asarray([x[0], "text"], dtype=object), labels=y)
    places["arr_fake"].write_text("not a zip\n")
    places["arr_fake_parquet"].write_bytes(b"PAR1 but not really")
    places["arr_suffix"].write_text("1,2,3\n")
    os.mkfifo(places["arr_pipe"])
    places["arr_folder"].mkdir()
    pq.write_table(
        pa.table({"features": pa.array(x.tolist()), "split": pa.array(split.tolist())}), places["arr_parquet"]
    )
    places.update(_hostile_hdf5(folder, x, y, split))
    return places


def _hostile_hdf5(folder: Path, x: np.ndarray, y: np.ndarray, split: np.ndarray) -> dict[str, Path]:
    """HDF5 files that reach outside themselves (an external link to a fifo, a soft link, a
    virtual dataset over another file), one cut short, one that is text."""
    import h5py

    def h5(name: str) -> tuple[Path, object]:
        handle = h5py.File(folder / f"{name}.h5", "w")
        handle["labels"], handle["split"] = y, split.astype(object)
        return folder / f"{name}.h5", handle

    places = {}
    path, handle = h5("external")
    handle["features"] = h5py.ExternalLink(str(folder / "pipe.npz"), "/x")
    handle.close()
    places["arr_h5_external"] = path
    path, handle = h5("soft")
    handle["real"] = x
    handle["features"] = h5py.SoftLink("/real")
    handle.close()
    places["arr_h5_soft"] = path
    with h5py.File(folder / "source.h5", "w") as other:
        other["x"] = x
    path, handle = h5("virtual")
    layout = h5py.VirtualLayout(shape=x.shape, dtype=x.dtype)
    layout[:] = h5py.VirtualSource(str(folder / "source.h5"), "x", shape=x.shape)
    handle.create_virtual_dataset("features", layout)
    handle.close()
    places["arr_h5_virtual"] = path
    path, handle = h5("huge")  # 3.6 TiB declared, never written: a file of kilobytes
    handle.create_dataset("features", shape=(10**7, 10**5), dtype="f4", chunks=(1000, 1000))
    handle["g/x"] = x
    handle["g/loop"] = handle["g"]  # a group inside itself: visited once
    handle.close()
    places["arr_h5_huge"] = path
    path, handle = h5("whole")
    handle["features"] = x
    handle.close()
    cut = folder / "cut.h5"
    cut.write_bytes(path.read_bytes()[:1200])
    places["arr_h5_cut"] = cut
    places["arr_h5_text"] = folder / "text.h5"
    places["arr_h5_text"].write_text("features,labels\n")
    return places
