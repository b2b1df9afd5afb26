"""The bad-input sweep: every command, fed malformed values, ends with exit code 1 or 2 and one line
naming the problem, no traceback, and no file changed.

One table, one row per mistake. Each row runs in a folder holding a complete synthetic store, an
incomplete one, a finished run, a small image tree, a stray file and an empty folder; the working
directory is that folder, so default outputs (runs/, cache/) would land there too, and its files
(names, sizes, modification times) and folders must be exactly the same afterwards.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import shutil
import stat
import struct
import zipfile
from pathlib import Path
from typing import Any

import pytest
from support.arrays import hostile_arrays
from support.cells import redigest
from support.images import TINY_VIT, make_image_tree
from support.messages import after_the_plan
from support.stores import synthetic_store
from typer.testing import CliRunner

from cli import app
from featcache.store import FeatureStore

runner = CliRunner()

# placeholders in the rows: {store} complete store, {half} incomplete store, {run} a finished run,
# {img} an image tree, {file} a plain file, {empty} an empty folder, {missing} a path that does not exist
EXTRACT = ["extract", "-m", TINY_VIT, "-d", "imagefolder", "--data-root", "{img}", "--random-init"]
FIT = ["fit", "--store", "{store}", "--device", "cpu", "--init-cls", "2", "--increment", "2"]
SWEEP = ["sweep", "--store", "{store}", "--device", "cpu", "--init-cls", "2", "--increment", "2"]
SCEN = ["scenario", "--store", "{store}"]
FSC = ["fit", "--store", "{store}"]  # a fit under a scenario: its own split
SSW = ["sweep", "--store", "{store}"]  # a sweep under a scenario: its own split, no class-incremental flags
FSCIL_ONE_SHOT = ["--set", "base_classes=2", "--set", "ways=2", "--set", "sessions=1", "--set", "shots=1"]
BASE = [
    "baselines",
    "--store",
    "{store}",
    "--device",
    "cpu",
    "--no-tosca",
    "--init-cls",
    "2",
    "--increment",
    "2",
]

# `tosca baselines --scenario`: no split flags (a scenario declares its own), SimpleCIL alone
BSCEN = ["baselines", "--store", "{store}", "--device", "cpu", "--no-tosca", "--methods", "simplecil"]
FEW = ["--set", "base_classes=2", "--set", "ways=2", "--set", "sessions=1"]

IMPORT = ["import", "{arr_ok}", "--store", "{root}/new.zarr", "--encoder", "e5", "--modality", "text"]
EXPORT = ["export", "{store}", "--to"]


def _imported(source: str, *extra: str) -> list[str]:
    return ["import", source, *IMPORT[2:], *extra]


def _under(flag: str, file: str, leaf: str) -> str:
    return (
        f"{flag} {file}/{leaf} lies under {file}, which is a file, not a folder: nothing can be made under it"
    )


ROWS: list[tuple[str, list[str], str]] = [
    # ------------------------------------------------------------------ extract
    ("extract views negative", [*EXTRACT, "--views", "-1"], "--views must be 0 or more, got -1"),
    ("extract views not a number", [*EXTRACT, "--views", "two"], "Invalid value for '--views'"),
    ("extract batch size zero", [*EXTRACT, "--batch-size", "0"], "--batch-size must be at least 1, got 0"),
    ("extract workers negative", [*EXTRACT, "--workers", "-2"], "--workers must be 0 or more, got -2"),
    ("extract chunk size zero", [*EXTRACT, "--chunk-size", "0"], "--chunk-size must be at least 1, got 0"),
    (
        "extract chunk size not a number",
        [*EXTRACT, "--chunk-size", "1e3"],
        "Invalid value for '--chunk-size'",
    ),
    ("extract seed not a number", [*EXTRACT, "--seed", "x"], "Invalid value for '--seed'"),
    (
        "extract limit zero",
        [*EXTRACT, "--limit-per-class", "0"],
        "--limit-per-class must be at least 1, got 0",
    ),
    (
        "extract unknown model",
        ["extract", "-m", "resnet_9000", "-d", "imagefolder"],
        "unknown model 'resnet_9000'",
    ),
    ("extract empty model", ["extract", "-m", "", "-d", "imagefolder"], "unknown model ''"),
    ("extract unknown dataset", [*EXTRACT[:3], "-d", "mnist"], "unknown dataset 'mnist'"),
    ("extract unknown dtype", [*EXTRACT, "--dtype", "int8"], "unknown --dtype 'int8'"),
    ("extract unknown policy", [*EXTRACT, "--policy", "fancy"], "unknown --policy 'fancy'"),
    ("extract unknown device", [*EXTRACT, "--device", "tpu"], "unknown --device 'tpu'"),
    ("extract unknown precision", [*EXTRACT, "--precision", "fp8"], "unknown --precision 'fp8'"),
    ("extract unknown decoder", [*EXTRACT, "--decode", "magic"], "unknown --decode 'magic'"),
    (
        "extract scheduler local:0",
        [*EXTRACT, "--scheduler", "local:0"],
        "--scheduler local:0: N must be at least 1",
    ),
    ("extract unknown scheduler", [*EXTRACT, "--scheduler", "cluster"], "unknown --scheduler 'cluster'"),
    ("extract missing data root", [*EXTRACT[:6], "{missing}"], "data root not found: {missing}"),
    (
        "extract data root a file",
        [*EXTRACT[:6], "{file}"],
        "data root {file} is a file but not a known archive",
    ),
    (
        "extract data root no splits",
        [*EXTRACT[:6], "{empty}"],
        "no train/ with test/ or val/ folders found under {empty}",
    ),
    ("extract missing data root flag", EXTRACT[:5], "dataset 'imagefolder' needs --data-root"),
    (
        "extract weights missing",
        [*EXTRACT[:7], "--weights", "{missing}"],
        "weights file not found: {missing}",
    ),
    (
        "extract weights a folder",
        [*EXTRACT[:7], "--weights", "{empty}"],
        "--weights {empty} is a folder, not a weights file",
    ),
    (
        "extract weights and random init",
        [*EXTRACT, "--weights", "{file}"],
        "--weights and --random-init exclude each other",
    ),
    ("extract store a file", [*EXTRACT, "--store", "{file}"], "--store {file} is a file, not a folder"),
    ("extract store a plain folder", [*EXTRACT, "--store", "{img}"], "not a feature store: {img}"),
    (
        "extract cache dir a file",
        [*EXTRACT, "--cache-dir", "{file}"],
        "--cache-dir {file} is a file, not a folder",
    ),
    ("extract unknown option", [*EXTRACT, "--view", "2"], "No such option: --view"),
    ("extract missing model", ["extract", "-d", "imagefolder"], "Missing option '--model'"),
    # ------------------------------------------------------------------ import (nothing read into a store)
    ("import lengths differ", _imported("{arr_lengths}"), "the features have 12 rows and labels 'labels'"),
    (
        "import label outside the classes",
        _imported("{arr_outside}"),
        "label 7 of row 8 is outside the 3 class names",
    ),
    ("import NaN", _imported("{arr_nan}"), "train features hold NaN or inf (first in row '5'"),
    ("import inf", _imported("{arr_inf}"), "train features hold NaN or inf (first in row '0'"),
    (
        "import one vector for every row",
        _imported("{arr_one_vector}"),
        "every one of the 9 train rows holds the same features, so nothing tells its classes apart",
    ),
    ("import integer features", _imported("{arr_int}"), "hold int64 values, not floats"),
    (
        "import 1-D features",
        _imported("{arr_1d}"),
        "have shape [12]: features are one row per sample, [N, D]",
    ),
    ("import class without test rows", _imported("{arr_no_test}"), "class 'c' has no test rows"),
    ("import duplicate class names", _imported("{arr_dup}"), "name the class 'a' twice"),
    ("import split word", _imported("{arr_bad_split}"), "says 'val' at row 1: each row is train or test"),
    ("import no split", _imported("{arr_no_split}"), "the sources have no split column 'split'"),
    ("import text labels", _imported("{arr_str_labels}"), "hold <U1 values, not integers"),
    (
        "import pickled arrays",
        _imported("{arr_object}"),
        "as npz (ValueError: Object arrays cannot be loaded",
    ),
    ("import npz that is not one", _imported("{arr_fake}"), "fake.npz is not a .npz file"),
    (
        "import parquet that is not one",
        _imported("{arr_fake_parquet}"),
        "fake.parquet is not a .parquet file",
    ),
    ("import unknown suffix", _imported("{arr_suffix}"), "has the suffix '.csv': tosca reads .npz"),
    (
        "import hdf5 external link",
        _imported("{arr_h5_external}"),
        "external.h5 holds an external link at 'features': tosca reads what is inside the file only",
    ),
    (
        "import hdf5 soft link",
        _imported("{arr_h5_soft}"),
        "soft.h5 holds a soft link at 'features': tosca reads what is inside the file only",
    ),
    (
        "import hdf5 virtual dataset",
        _imported("{arr_h5_virtual}"),
        "virtual.h5 stores 'features' outside the file (a virtual or external dataset)",
    ),
    (
        "import hdf5 declared terabytes",
        _imported("{arr_h5_huge}"),
        "huge.h5: 'features' holds 3.6 TiB, more than the",
    ),
    ("import hdf5 cut short", _imported("{arr_h5_cut}"), "cannot read source {arr_h5_cut} as hdf5 ("),
    ("import hdf5 that is text", _imported("{arr_h5_text}"), "text.h5 is not a .h5 file"),
    ("import a fifo", _imported("{arr_pipe}"), "pipe.npz is not a regular file"),
    (
        "import a folder named npz",
        _imported("{arr_folder}"),
        "folder.npz is a folder but not a `datasets` folder",
    ),
    ("import parquet column missing", _imported("{arr_parquet}"), "no column 'labels' in the sources"),
    ("import missing source", _imported("{missing}.npz"), "source {missing}.npz is missing"),
    ("import missing sources", IMPORT[:1] + IMPORT[2:], "Missing argument 'sources'"),
    (
        "import test fraction 0",
        _imported("{arr_no_split}", "--test-fraction", "0"),
        "--test-fraction must be between 0 and 1",
    ),
    ("import test fraction 1.5", _imported("{arr_no_split}", "--test-fraction", "1.5"), "got 1.5"),
    (
        "import split and fraction",
        [*IMPORT, "--test-fraction", "0.5"],
        "and --test-fraction is given: use one",
    ),
    (
        "import split seed negative",
        _imported("{arr_no_split}", "--test-fraction", "0.5", "--split-seed", "-1"),
        "--split-seed must be 0 or more",
    ),
    ("import chunk size zero", [*IMPORT, "--chunk-size", "0"], "--chunk-size must be at least 1, got 0"),
    ("import unknown dtype", [*IMPORT, "--dtype", "int8"], "unknown --dtype 'int8'"),
    ("import unsafe name", [*IMPORT, "--name", "../up"], "unsafe dataset name '../up'"),
    ("import modality word", [*IMPORT, "--modality", "Text!"], "--modality 'Text!' is no modality word"),
    ("import empty encoder", [*IMPORT, "--encoder", ""], "--encoder '' names no encoder"),
    (
        "import no encoder",
        [*IMPORT[:4], "--modality", "text"],
        "say which encoder computed the features: --encoder NAME",
    ),
    ("import no modality", IMPORT[:6], "say what the features describe: --modality"),
    (
        "import unknown column",
        [*IMPORT, "--features", "nosuch"],
        "no column 'nosuch' in the sources (they hold: features, labels, split)",
    ),
    (
        "import class names missing",
        [*IMPORT, "--class-names", "{missing}"],
        "--class-names file {missing} is missing",
    ),
    (
        "import views not views",
        [*IMPORT, "--views", "labels"],
        "views 'labels' (in {arr_ok}) have shape [12], not [12, V, 4]",
    ),
    (
        "import store a file",
        ["import", "{arr_ok}", "--store", "{file}", *IMPORT[4:]],
        "--store {file} is a file, not a folder",
    ),
    (
        "import store inside a store",
        ["import", "{arr_ok}", "--store", "{store}/inner.zarr", *IMPORT[4:]],
        "lies inside the zarr store {store}",
    ),
    (
        "import store named dot",
        ["import", "{arr_ok}", "--store", ".", *IMPORT[4:]],
        "--store '.' names no folder",
    ),
    (
        "import store a plain folder",
        ["import", "{arr_ok}", "--store", "{img}", *IMPORT[4:]],
        "--store {img} is a folder that is not a tosca store",
    ),
    (
        "import over another store",
        ["import", "{arr_ok}", "--store", "{store}", *IMPORT[4:]],
        "holds other features (backbone.alias: none -> e5",
    ),
    # ------------------------------------------------------------------ export
    ("export to a file there", [*EXPORT, "{file}"], "--to {file} has no .npz or .parquet suffix"),
    ("export unknown format", [*EXPORT, "{root}/x.npz", "--format", "xml"], "unknown --format 'xml'"),
    ("export folder missing", [*EXPORT, "{missing}/x.npz"], "its folder {missing} is not there"),
    ("export incomplete store", ["export", "{half}", "--to", "{root}/x.npz"], "is not fully extracted"),
    (
        "export missing store",
        ["export", "{missing}", "--to", "{root}/x.npz"],
        "not a feature store: {missing}",
    ),
    ("export into a store", [*EXPORT, "{store}/x.npz"], "lies inside a zarr store"),
    (
        "export over a folder",
        [*EXPORT, "{empty}", "--format", "npz", "--overwrite"],
        "--to {empty} is a folder: not what npz writes",
    ),
    ("export over a file", [*EXPORT, "{arr_ok}"], "--to {arr_ok} is there already: pass --overwrite"),
    (
        "export to a link",
        [*EXPORT, "{dangling}", "--format", "npz", "--overwrite"],
        "--to {dangling} is a symbolic link",
    ),
    ("export to a fifo", [*EXPORT, "{arr_pipe}", "--overwrite"], "{arr_pipe} is a fifo"),
    # ------------------------------------------------------------------ cache
    ("ls missing cache dir", ["cache", "ls", "--cache-dir", "{missing}"], "no folder {missing}"),
    (
        "ls cache dir a file",
        ["cache", "ls", "--cache-dir", "{file}"],
        "--cache-dir {file} is a file, not a folder",
    ),
    ("info missing store", ["cache", "info", "{missing}"], "not a feature store: {missing}"),
    ("info a file", ["cache", "info", "{file}"], "not a feature store: {file}"),
    ("info a plain folder", ["cache", "info", "{empty}"], "not a feature store: {empty}"),
    ("info no argument", ["cache", "info"], "Missing argument 'store'"),
    ("verify missing store", ["cache", "verify", "{missing}"], "not a feature store: {missing}"),
    ("verify a file", ["cache", "verify", "{file}"], "not a feature store: {file}"),
    ("verify --fix a plain folder", ["cache", "verify", "{empty}", "--fix"], "not a feature store: {empty}"),
    (
        "verify incomplete store",
        ["cache", "verify", "{half}"],
        "FAIL train: 1/8 chunks not done (first: [3])",
    ),
    # ------------------------------------------------------------------ fit
    ("fit task out of range", [*FIT, "--task", "99"], "--task 99"),
    ("fit task negative", [*FIT, "--task", "-1"], "--task must be 0 or more, got -1"),
    ("fit task not a number", [*FIT, "--task", "last"], "Invalid value for '--task'"),
    ("fit r zero", [*FIT, "--r", "0"], "--r must be at least 1, got 0"),
    ("fit r negative", [*FIT, "--r", "-4"], "--r must be at least 1, got -4"),
    ("fit s zero", [*FIT, "--s", "0"], "--s must be at least 1, got 0"),
    ("fit lr zero", [*FIT, "--lr", "0"], "--lr must be > 0, got 0.0"),
    ("fit lr negative", [*FIT, "--lr", "-0.1"], "--lr must be > 0, got -0.1"),
    ("fit lr not a number", [*FIT, "--lr", "fast"], "Invalid value for '--lr'"),
    ("fit l1 negative", [*FIT, "--l1", "-1e-4"], "--l1 must be >= 0, got -0.0001"),
    ("fit epochs zero", [*FIT, "--epochs", "0"], "--epochs must be at least 1, got 0"),
    ("fit batch size zero", [*FIT, "--batch-size", "0"], "--batch-size must be at least 1, got 0"),
    ("fit unknown flow", [*FIT, "--flow", "sideways"], "unknown --flow 'sideways'"),
    ("fit unknown preset", [*FIT, "--preset", "best"], "unknown --preset 'best'"),
    ("fit init cls zero", [*FIT[:5], "--init-cls", "0"], "--init-cls must be at least 1, got 0"),
    ("fit init cls negative", [*FIT[:5], "--init-cls", "-2"], "--init-cls must be at least 1, got -2"),
    (
        "fit increment zero",
        [*FIT[:5], "--init-cls", "2", "--increment", "0"],
        "--increment must be at least 1, got 0",
    ),
    (
        "fit init cls past classes",
        [*FIT[:5], "--init-cls", "99"],
        "--init-cls 99 is more than the store's 6 classes",
    ),
    ("fit unknown device", [*FIT[:3], "--device", "tpu"], "unknown --device 'tpu'"),
    (
        "fit missing store",
        ["fit", "--store", "{missing}", "--device", "cpu"],
        "not a feature store: {missing}",
    ),
    ("fit store a file", ["fit", "--store", "{file}", "--device", "cpu"], "not a feature store: {file}"),
    ("fit incomplete store", ["fit", "--store", "{half}", "--device", "cpu"], "is not fully extracted"),
    (
        "fit no store matches",
        ["fit", "-m", "vit_b16", "--cache-dir", "{root}", "--device", "cpu"],
        "no store under",
    ),
    ("fit run a file", [*FIT, "--run", "{file}"], "--run {file} is a file, not a folder"),
    ("fit unknown tracker", [*FIT, "--log", "wandb"], "unknown --log 'wandb': use one of"),
    # trackers write by the rules every write follows, and a WHERE that cannot serve is one line
    (
        "fit tensorboard inside a store",
        [*FIT, "--log", "tensorboard={store}/tb"],
        "--log tensorboard {store}/tb lies inside the zarr store {store}",
    ),
    (
        "fit tensorboard inside a run folder",
        [*FIT, "--log", "tensorboard={run}/tb"],
        "--log tensorboard {run}/tb lies inside the tosca run folder {run}",
    ),
    (
        "fit tensorboard default a planted link",
        [*FIT, "--log", "tensorboard"],
        "runs/tensorboard is a symbolic link: tosca never writes through one",
    ),
    (
        "fit mlflow artifacts a planted link",
        [*FIT, "--log", "mlflow=sqlite:///{planted}/m.db"],
        "{planted}/mlartifacts is a symbolic link: tosca never writes through one",
    ),
    (
        "fit mlflow database inside a store",
        [*FIT, "--log", "mlflow=sqlite:///{store}/m.db"],
        "--log mlflow {store} is a zarr store",
    ),
    (
        "fit mlflow database a device",
        [*FIT, "--log", "mlflow=sqlite:////dev/full"],
        "/dev/full is a fifo, a device",
    ),
    (
        "fit mlflow in memory",
        [*FIT, "--log", "mlflow=sqlite:///:memory:"],
        "an in-memory database keeps nothing",
    ),
    ("fit mlflow unknown scheme", [*FIT, "--log", "mlflow=garbage://x"], "not a tracking URI MLflow knows"),
    ("fit mlflow a plain path", [*FIT, "--log", "mlflow={empty}"], "a folder is MLflow's file store"),
    (
        "fit mlflow file under proc",
        [*FIT, "--log", "mlflow=file:///proc/mlruns"],
        "a folder is MLflow's file store",
    ),
    (
        "fit mlflow server unreachable",
        [*FIT, "--log", "mlflow=http://127.0.0.1:1"],
        "--log mlflow=http://127.0.0.1:1: no tracking server answers there",
    ),
    (
        "fit refused after mlflow",
        [*FIT, "--task", "99", "--log", "mlflow=sqlite:///{root}/d/m.db"],
        "--task 99 is past",
    ),
    (
        "fit tensorboard folder a file",
        [*FIT, "--log", "tensorboard={file}"],
        "{file} is a file, not a folder",
    ),
    ("sweep keep-modules a file", [*SWEEP, "--keep-modules", "{file}"], "--keep-modules {file} is a file"),
    (
        "sweep keep-modules inside a store",
        [*SWEEP, "--keep-modules", "{store}/kept"],
        "--keep-modules {store}/kept lies inside the zarr store {store}",
    ),
    ("fit order seed negative", [*FIT, "--order-seed", "-1"], "--order-seed must be in [0, 2**32), got -1"),
    ("fit seed too large", [*FIT, "--seed", str(2**40)], f"--seed must be in [0, 2**32), got {2**40}"),
    # ------------------------------------------------------------------ eval
    (
        "eval missing run",
        ["eval", "{missing}", "--device", "cpu"],
        "not a run directory: {missing} (no asked.json)",
    ),
    ("eval a file", ["eval", "{file}", "--device", "cpu"], "not a run directory: {file} (no asked.json)"),
    (
        "eval not a run",
        ["eval", "{empty}", "--device", "cpu"],
        "not a run directory: {empty} (no asked.json)",
    ),
    ("eval unknown device", ["eval", "{run}", "--device", "tpu"], "unknown --device 'tpu'"),
    ("eval no argument", ["eval"], "Missing argument 'run'"),
    # the validation split: a share of each class, at most half
    ("fit validation over half", [*FIT, "--val-fraction", "0.7"], "--val-fraction must be in [0, 0.5]"),
    ("fit validation negative", [*FIT, "--val-fraction", "-0.1"], "--val-fraction must be in [0, 0.5]"),
    ("fit validation nan", [*FIT, "--val-fraction", "nan"], "--val-fraction must be in [0, 0.5]"),
    (
        "fit validation seed negative",
        [*FIT, "--val-seed", "-1"],
        "--val-seed must be an integer in [0, 2**32)",
    ),
    (
        "sweep validation over half",
        [*SWEEP, "--r", "2", "--val-fraction", "1"],
        "--val-fraction must be in [0, 0.5]",
    ),
    ("baselines validation inf", [*BASE, "--val-fraction", "inf"], "--val-fraction must be in [0, 0.5]"),
    # ------------------------------------------------------------------ sweep
    ("sweep empty list", [*SWEEP, "--r", ""], "--r is empty"),
    ("sweep empty items", [*SWEEP, "--r", ",,"], "--r is empty"),
    ("sweep not numbers", [*SWEEP, "--r", "8,big"], "--r: 'big' is not an integer"),
    ("sweep r zero", [*SWEEP, "--r", "0,8"], "--r must be at least 1, got 0"),
    ("sweep r negative", [*SWEEP, "--r", "-8"], "--r must be at least 1, got -8"),
    ("sweep lr negative", [*SWEEP, "--lr", "-0.1"], "--lr must be > 0, got -0.1"),
    (  # every flag at fault, and no other (issue 49, point 5: this named --lr, not given, and not r = 0)
        "sweep two flags at fault",
        [*SWEEP, "--r", "16,0", "--l1", "0,-5e-4"],
        "error: --r must be at least 1, got 0; --l1 must be >= 0, got -0.0005",
    ),
    ("sweep epochs zero", [*SWEEP, "--epochs", "0"], "--epochs must be at least 1, got 0"),
    ("sweep unknown flow", [*SWEEP, "--flow", "tosca,sideways"], "unknown --flow 'sideways'"),
    ("sweep empty seeds", [*SWEEP, "--seeds", ""], "--seeds is empty"),
    ("sweep seed negative", [*SWEEP, "--seeds", "0,-3"], "--seeds must be in [0, 2**32), got -3"),
    ("sweep init cls zero", [*SWEEP[:5], "--init-cls", "0"], "--init-cls must be at least 1, got 0"),
    (
        "sweep init cls past classes",
        [*SWEEP[:5], "--init-cls", "99"],
        "--init-cls 99 is more than the store's 6 classes",
    ),
    ("sweep jobs zero", [*SWEEP, "--jobs", "0"], "--jobs must be at least 1, got 0"),
    ("sweep group negative", [*SWEEP, "--group", "-1"], "--group must be at least 1, got -1"),
    ("sweep unknown rank", [*SWEEP, "--rank-by", "best"], "unknown --rank-by 'best'"),
    (
        "sweep ranked by the oracle",
        [*SWEEP, "--rank-by", "oracle"],
        "--rank-by oracle is a reference router (told the task): a reference never ranks or chooses",
    ),
    ("sweep ranked by batch votes", [*SWEEP, "--rank-by", "batch"], "--rank-by batch is a reference router"),
    ("sweep unknown preset", [*SWEEP, "--preset", "best"], "unknown --preset 'best'"),
    ("sweep unknown scheduler", [*SWEEP, "--scheduler", "cluster"], "unknown --scheduler 'cluster'"),
    ("sweep out a file", [*SWEEP, "--out", "{file}"], "--out {file} is a file, not a folder"),
    (
        "sweep missing store",
        ["sweep", "--store", "{missing}", "--device", "cpu"],
        "not a feature store: {missing}",
    ),
    ("sweep incomplete store", ["sweep", "--store", "{half}", "--device", "cpu"], "is not fully extracted"),
    # ------------------------------------------------------------------ baselines
    ("baselines empty methods", [*BASE, "--methods", ""], "unknown --methods"),
    ("baselines unknown method", [*BASE, "--methods", "simplecil,magic"], "unknown --methods 'magic'"),
    # ------------------------------------------------------------------ scenario
    ("scenario unknown", [*SCEN, "--scenario", "fscl"], "unknown --scenario 'fscl' (did you mean 'fscil'?)"),
    ("scenario set without value", [*SCEN, "--set", "shots"], "--set takes NAME=VALUE, got 'shots'"),
    (
        "scenario set unknown parameter",
        [*SCEN, "--set", "shots=5"],
        "scenario cil takes no parameter 'shots'",
    ),
    (
        "scenario set not a number",
        [*SCEN, "--scenario", "fscil", "--set", "shots=five"],
        "--set shots must be an integer",
    ),
    (
        "scenario blurry ratio above 1",
        [*SCEN, "--scenario", "blurry", "--set", "blurry=1.5"],
        "blurry blurry must be in [0, 1], got 1.5",
    ),
    (
        "scenario blurry ratio negative",
        [*SCEN, "--scenario", "blurry", "--set", "disjoint=-0.1"],
        "blurry disjoint must be in [0, 1], got -0.1",
    ),
    (
        "scenario blurry ratio nan",
        [*SCEN, "--scenario", "blurry", "--set", "blurry=nan"],
        "blurry blurry must be in [0, 1], got nan",
    ),
    (
        "scenario more shots than images",
        [
            *SCEN,
            "--scenario",
            "fscil",
            "--set",
            "base_classes=2",
            "--set",
            "ways=2",
            "--set",
            "sessions=1",
            "--set",
            "shots=30",
        ],
        "fscil: class 2 has 20 training images, fewer than the 30 shots asked",
    ),
    (
        "scenario one-shot session for the fecam router",
        [*SCEN, "--scenario", "fscil", "--methods", "tosca", "--routers", "lda,fecam", *FSCIL_ONE_SHOT],
        "router fecam learns fecam, which needs 2 or more training images of a class in each module's "
        "rows: in fscil's task 1, class",
    ),
    # issue 58, point 5: stores on object storage (no server needed for these: refused first)
    (
        "store url naming only a bucket",
        ["fit", "--store", "s3://bucket", "--device", "cpu"],
        "--store s3://bucket names a bucket but no store in it",
    ),
    (
        "store url over plain http",
        ["fit", "--store", "https://example.org/s.zarr", "--device", "cpu"],
        "https:// is no object storage tosca reads a store from",
    ),
    (
        "store url of an unknown protocol",
        ["baselines", "--store", "nosuchproto://bucket/s.zarr", "--no-tosca", "--methods", "ridge"],
        "nosuchproto:// is no object storage tosca reads a store from",
    ),
    (
        "store url with a '..' part",
        ["fit", "--store", "s3://bucket/a/../s.zarr", "--device", "cpu"],
        "a store's key has no empty, '.' or '..' part",
    ),
    (
        "extract to a key on object storage not ending in .zarr",
        ["extract", "--model", "effnet_lite0", "--dataset", "eurosat", "--store", "s3://bucket/team/store"],
        "a store's key on object storage ends in .zarr",
    ),
    (
        "import to a key on object storage not ending in .zarr",
        ["import", "{arr_ok}", "--store", "s3://bucket/team/store", "--encoder", "e", "--modality", "text"],
        "a store's key on object storage ends in .zarr",
    ),
    (
        "push to a key not ending in .zarr",
        ["cache", "push", "{store}", "s3://bucket/team/store"],
        "a store's key on object storage ends in .zarr",
    ),
    (
        "push to a local path",
        ["cache", "push", "{store}", "{root}/copy.zarr"],
        "tosca cache push copies to object storage",
    ),
    (
        "push from object storage",
        ["cache", "push", "s3://bucket/s.zarr", "s3://bucket/t.zarr"],
        "copies a local store; s3://bucket/s.zarr is already on object storage",
    ),
    (  # FeCAM holds a class met once until its second image: one never given one is refused first
        "scenario fecam on a one-shot session",
        [*SCEN, "--scenario", "fscil", "--methods", "fecam", *FSCIL_ONE_SHOT],
        "FeCAM needs 2 or more training images of each class: class 2 has 1 (and 1 other class(es)) "
        "in fscil's whole training stream; leave it out of the methods",
    ),
    (
        "scenario dil without domains",
        [*SCEN, "--scenario", "dil"],
        "dil needs a store with a domain per image",
    ),
    (
        "scenario tosca reference router",
        [*SCEN, "--methods", "tosca", "--routers", "lda,oracle"],
        "--routers oracle is a reference, never a scenario's result",
    ),
    (
        "scenario tosca flag without tosca",
        [*SCEN, "--methods", "simplecil", "--module-per", "step"],
        "--module-per is TOSCA's, and --methods has no tosca (add it, or leave --module-per out)",
    ),
    (
        "scenario tosca no router",
        [*SCEN, "--methods", "tosca", "--routers", ","],
        "--routers names no router",
    ),
    (
        "scenario tosca unknown router",
        [*SCEN, "--methods", "tosca", "--routers", "ldaa"],
        "unknown --routers 'ldaa' (did you mean 'lda'?)",
    ),
    (
        "scenario tosca recurring unknown",
        [*SCEN, "--scenario", "blurry", "--methods", "tosca", "--recurring", "merge"],
        "--recurring must be one of task_rows, first_task, got 'merge'",
    ),
    (
        "scenario tosca module unit unknown",
        [*SCEN, "--methods", "tosca", "--module-per", "epoch"],
        "--module-per must be one of task, step, got 'epoch'",
    ),
    (
        "scenario tosca later modules unknown",
        [*SCEN, "--methods", "tosca", "--later-modules", "last"],
        "--later-modules must be one of train, first, got 'last'",
    ),
    (
        "scenario later modules without tosca",
        [*SCEN, "--methods", "simplecil", "--later-modules", "first"],
        "--later-modules is TOSCA's, and --methods has no tosca (add it, or leave --later-modules out)",
    ),
    (
        "scenario once-per-class baseline under blurry",
        [*SCEN, "--scenario", "blurry", "--methods", "slda"],
        "slda cannot run blurry",
    ),
    ("scenario unknown method", [*SCEN, "--methods", "magic"], "unknown --methods 'magic'"),
    (
        "scenario read as unknown",
        [*SCEN, "--read-as", "cifar100_superclasses"],
        "cannot be read as cifar100_superclasses",
    ),
    # ------------------------------------------------------------------ baselines --scenario
    (
        "baselines scenario unknown",
        [*BSCEN, "--scenario", "fscl"],
        "unknown --scenario 'fscl' (did you mean 'fscil'?)",
    ),
    ("baselines scenario empty", [*BSCEN, "--scenario", ""], "unknown --scenario ''"),
    (
        "baselines scenario more shots than images",
        [*BSCEN, "--scenario", "fscil", *FEW, "--set", "shots=30"],
        "fscil: class 2 has 20 training images, fewer than the 30 shots asked",
    ),
    (
        "baselines scenario zero shots",
        [*BSCEN, "--scenario", "fscil", *FEW, "--set", "shots=0"],
        "fscil shots must be at least 1, got 0",
    ),
    (
        "baselines scenario blurry ratio above 1",
        [*BSCEN, "--scenario", "blurry", "--methods", "ridge", "--set", "blurry=1.5"],
        "blurry blurry must be in [0, 1], got 1.5",
    ),
    (
        "baselines scenario blurry ratio negative",
        [*BSCEN, "--scenario", "blurry", "--methods", "ridge", "--set", "disjoint=-0.1"],
        "blurry disjoint must be in [0, 1], got -0.1",
    ),
    (
        "baselines scenario blurry ratio nan",
        [*BSCEN, "--scenario", "blurry", "--methods", "ridge", "--set", "blurry=nan"],
        "blurry blurry must be in [0, 1], got nan",
    ),
    (
        "baselines scenario dil without domains",
        [*BSCEN, "--scenario", "dil", "--methods", "ridge"],
        "dil needs a store with a domain per image",
    ),
    (
        "baselines scenario set without value",
        [*BSCEN, "--scenario", "til", "--set", "shots"],
        "--set takes NAME=VALUE",
    ),
    (
        "baselines scenario set unknown parameter",
        [*BSCEN, "--scenario", "til", "--set", "shots=5"],
        "scenario til takes no parameter 'shots'",
    ),
    (
        "baselines scenario set for cil",
        [*BSCEN, "--set", "shots=5"],
        "scenario values are for a scenario other than cil",
    ),
    (
        "baselines scenario once-per-class baseline under blurry",
        [*BSCEN, "--scenario", "blurry", "--methods", "slda"],
        "slda cannot run blurry",
    ),
    (
        "baselines scenario no scores for til",
        [*BSCEN, "--methods", "joint_probe", "--scenario", "til"],
        "joint_probe cannot run til",
    ),
    (
        "baselines scenario split flag it does not take",
        [*BSCEN, "--scenario", "fscil", "--init-cls", "2"],
        "--init-cls does not apply to scenario fscil",
    ),
    (
        "baselines scenario with a validation split",
        [*BSCEN, "--scenario", "til", "--val-fraction", "0.2"],
        "--val-fraction is for the class-incremental table",
    ),
    (
        "baselines scenario with a run",
        [*BSCEN[:-3], "--methods", "simplecil", "--scenario", "til", "--run", "{run}"],
        "--run is for the class-incremental table",
    ),
    (
        "baselines scenario on a gpu",
        [*BSCEN, "--scenario", "til", "--device", "cuda"],
        "--scenario til runs on the CPU",
    ),
    (
        "baselines scenario into a run folder",
        [*BSCEN, "--scenario", "til", "--out", "{run}"],
        "not a scenario folder: pass another --out",
    ),
    (
        "baselines scenario store missing",
        ["baselines", "--store", "{missing}", "--scenario", "til"],
        "does not exist",
    ),
    (
        "baselines scenario incomplete store",
        ["baselines", "--store", "{half}", "--no-tosca", "--scenario", "til"],
        "is not fully extracted",
    ),
    ("scenario store missing", ["scenario", "--store", "{missing}"], "does not exist"),
    ("scenario incomplete store", ["scenario", "--store", "{half}"], "is not fully extracted"),
    # ------------------------------------------------------------------ fit --scenario
    (
        "fit scenario unknown",
        [*FSC, "--scenario", "fscl"],
        "unknown --scenario 'fscl' (did you mean 'fscil'?)",
    ),
    (
        "fit scenario values for cil",
        [*FSC, "--set", "shots=5"],
        "scenario values are for a scenario other than cil",
    ),
    (
        "fit scenario up to a task",
        [*FSC, "--scenario", "til", "--task", "1"],
        "learns its whole stream; leave out --task",
    ),
    (
        "fit scenario on a gpu",
        [*FSC, "--scenario", "til", "--device", "cuda"],
        "--scenario til runs on the CPU",
    ),
    (
        "fit scenario reference router",
        [*FSC, "--scenario", "til", "--router", "lda,oracle"],
        "--router oracle is a reference, never a scenario's result",
    ),
    (
        "fit scenario split flag it does not take",
        [*FSC, "--scenario", "fscil", "--init-cls", "2"],
        "--init-cls does not apply to scenario fscil",
    ),
    (
        "fit scenario more shots than images",
        [*FSC, "--scenario", "fscil", *FEW, "--set", "shots=30"],
        "fscil: class 2 has 20 training images, fewer than the 30 shots asked",
    ),
    ("fit scenario bad recipe", [*FSC, "--scenario", "til", "--r", "0"], "--r must be at least 1, got 0"),
    ("fit scenario into a run", [*FSC, "--scenario", "til", "--run", "{run}"], "not a scenario-run folder"),
    (
        "fit scenario dil without domains",
        [*FSC, "--scenario", "dil"],
        "dil needs a store with a domain per image",
    ),
    # ------------------------------------------------------------------ sweep --scenario
    (
        "sweep scenario unknown",
        [*SSW, "--scenario", "fscl"],
        "unknown --scenario 'fscl' (did you mean 'fscil'?)",
    ),
    (
        "sweep scenario values for cil",
        [*SSW, "--set", "shots=5"],
        "scenario values are for a scenario other than cil",
    ),
    (
        "sweep scenario value given twice",
        [*SSW, "--scenario", "fscil", "--set", "shots=5", "--set", "shots=6"],
        "--set shots given twice (give each scenario value once)",
    ),
    (
        "sweep scenario read as for cil",
        [*SSW, "--read-as", "x"],
        "scenario values are for a scenario other than cil",
    ),
    (
        "sweep scenario split flag it does not take",
        [*SSW, "--scenario", "fscil", "--init-cls", "2"],
        "--init-cls does not apply to scenario fscil",
    ),
    (
        "sweep scenario split swept",
        [*SSW, "--scenario", "til", "--init-cls", "2,3"],
        "--init-cls is scenario til's stream, one value per sweep, got 2",
    ),
    (
        "sweep scenario split given twice",
        [*SSW, "--scenario", "til", "--init-cls", "2", "--set", "init_cls=2"],
        "--init-cls given twice (also as a scenario value)",
    ),
    (
        "sweep scenario keeps no modules",
        [*SSW, "--scenario", "til", "--keep-modules", "{empty}"],
        "keeps each point's answers, not its modules; leave out --keep-modules",
    ),
    ("sweep scenario group", [*SSW, "--scenario", "til", "--group", "2"], "leave out --group"),
    (
        "sweep scenario on a gpu",
        [*SSW, "--scenario", "til", "--device", "cuda"],
        "--scenario til runs on the CPU",
    ),
    (
        "sweep scenario reference ranks",
        [*SSW, "--scenario", "til", "--rank-by", "oracle"],
        "--rank-by oracle is a reference router",
    ),
    (
        "sweep scenario reference shown",
        [*SSW, "--scenario", "til", "--router", "oracle"],
        "--router oracle is a reference",
    ),
    ("sweep scenario bad r", [*SSW, "--scenario", "til", "--r", "0,4"], "--r must be at least 1, got 0"),
    (
        "sweep scenario bad seeds",
        [*SSW, "--scenario", "til", "--seeds", "a"],
        "--seeds: 'a' is not an integer",
    ),
    (
        "sweep scenario more shots than the rows kept",
        [*SSW, "--scenario", "fscil", *FEW, "--set", "shots=19"],
        "fscil: class 2 has 18 training images, fewer than the 19 shots asked",
    ),
    (
        "sweep scenario one-shot session ranked by fecam",
        [*SSW, "--scenario", "fscil", "--rank-by", "fecam", *FSCIL_ONE_SHOT],
        "router fecam learns fecam, which needs 2 or more training images of a class",
    ),
    (
        "sweep scenario dil without domains",
        [*SSW, "--scenario", "dil"],
        "dil needs a store with a domain per image",
    ),
    (
        "sweep scenario nothing to hold out",
        ["sweep", "--store", "{lonely}", "--scenario", "til"],
        "has 1 training sample(s): none can be held out for validation",
    ),
    (
        "sweep scenario into a run folder",
        [*SSW, "--scenario", "til", "--out", "{run}"],
        "not a scenario-sweep folder",
    ),
    (
        "sweep scenario incomplete store",
        ["sweep", "--store", "{half}", "--scenario", "til"],
        "is not fully extracted",
    ),
    (
        "baselines ranpac m zero",
        [*BASE, "--ranpac-projection-dim", "0"],
        "--ranpac-projection-dim must be at least 1, got 0",
    ),
    (
        "baselines ranpac m not a number",
        [*BASE, "--ranpac-projection-dim", "10k"],
        "--ranpac-projection-dim must be an integer, got '10k'",
    ),
    (
        "baselines unknown own option",
        [*BASE, "--ranpac-projection-dims", "3"],
        "unknown --ranpac-projection-dims (did you mean '--ranpac-projection-dim'?): the baselines' own parameters are --ranpac-projection-dim, --ranpac-seed",
    ),
    (
        "baselines own option without its value",
        [*BASE, "--ranpac-projection-dim"],
        "no such option --ranpac-projection-dim, or a baseline's own option without its value (--ranpac-projection-dim VALUE)",
    ),
    (
        "baselines own option twice",
        [*BASE, "--ranpac-projection-dim", "3", "--ranpac-projection-dim=4"],
        "option --ranpac-projection-dim is given twice",
    ),
    (
        "baselines stray argument",
        [*BASE, "stray"],
        "unexpected argument 'stray': options take the form --NAME VALUE",
    ),
    (
        "baselines randumb features too wide to fit",
        [*BASE, "--methods", "randumb", "--randumb-dim", "300000"],
        "RanDumb with D = 300,000 would need",
    ),
    (
        "baselines klda features too wide to fit",
        [*BASE, "--methods", "klda", "--klda-dim", "400000"],
        "lower --klda-dim (or --klda-members)",
    ),
    # issue 57, point 10: FeCAM's two images a class, checked before any work (or worker, or folder)
    (
        "fit router fecam, a class of one image",
        [*(p.replace("{store}", "{lonely}") for p in FIT), "--router", "fecam"],
        "FeCAM needs 2 or more training images of each class: class 0 has 1 (and 3 other class(es)) in this split's training rows; leave it out of --router",
    ),
    (
        "sweep rank-by fecam, a class of one image",
        [
            *(p.replace("{store}", "{lonely}") for p in SWEEP),
            "--r",
            "2,4",
            "--val-fraction",
            "0",
            "--rank-by",
            "fecam",
        ],
        "FeCAM needs 2 or more training images of each class: class 0 has 1 (and 3 other class(es)) in this split's training rows; choose another router",
    ),
    (
        "baselines fecam, a class of one image",
        [*(p.replace("{store}", "{lonely}") for p in BASE), "--methods", "fecam"],
        "FeCAM needs 2 or more training images of each class: class 0 has 1 (and 3 other class(es)) in this split's training rows; leave it out of --methods",
    ),
    (
        "memory budget over the machine's memory",
        ["--memory-budget", "100TB", *FIT],
        "TOSCA_MEMORY_BUDGET=100TB (--memory-budget) is more than this machine's",
    ),
    (
        "memory budget of a million terabytes",
        ["--memory-budget", "1000000TB", *FIT],
        "is more than this machine's",
    ),
    (
        "baselines loranpac embedding too wide to fit",
        [*BASE, "--methods", "loranpac", "--loranpac-embedding-dim", "10000000"],
        "lower --loranpac-embedding-dim or --loranpac-rank",
    ),
    (
        "baselines slda unknown update",
        [*BASE, "--methods", "slda", "--slda-update", "fast"],
        "--slda-update must be one of 'authors', 'exact', got 'fast'",
    ),
    # an infinite parameter (issue 57, point 1): an Interval without a high bound took inf, and printed a figure
    *[
        (
            f"baselines {flag} {value}",
            [*BASE, "--methods", method, flag, value],
            f"{flag} must be a finite number",
        )
        for method, flag in (
            ("acil", "--acil-gamma"),
            ("klda", "--klda-sigma"),
            ("ridge", "--ridge-ridge"),
            ("loranpac", "--loranpac-ridge"),
            ("ds_al", "--ds-al-compensation"),
            ("ds_al", "--ds-al-gamma-main"),
            ("ds_al", "--ds-al-gamma-comp"),
        )
        for value in ("inf", "-inf", "Infinity", "1e400")
    ],
    ("baselines acil gamma nan", [*BASE, "--methods", "acil", "--acil-gamma", "nan"], "--acil-gamma must be"),
    # a regularisation too small for float64 beside the features' scale (issue 57, point 2,
    # `method.scale.BeyondPrecision`): refused after the baselines' folder was claimed, given back
    *[
        (
            f"baselines {flag} {value} beyond float64",
            [*BASE, "--methods", method, *extra, flag, value],
            f"{said} = {value} is too small beside the features' scale for float64",
        )
        for method, extra, flag, said, value in (
            ("acil", ["--acil-buffer-size", "64"], "--acil-gamma", "ACIL's gamma (--acil-gamma)", "1e-300"),
            (
                "ds_al",
                ["--ds-al-buffer-size", "64"],
                "--ds-al-gamma-main",
                "DS-AL's gamma_main (--ds-al-gamma-main)",
                "1e-300",
            ),
            (
                "ds_al",
                ["--ds-al-buffer-size", "64"],
                "--ds-al-gamma-comp",
                "DS-AL's gamma_comp (--ds-al-gamma-comp)",
                "5e-324",
            ),
            ("gacl", ["--gacl-buffer-size", "64"], "--gacl-gamma", "GACL's gamma (--gacl-gamma)", "1e-300"),
        )
    ],
    # KLDA's absolute sigma far from the features' scale (`method.scale.KernelBeyondScale`)
    *[
        (
            f"baselines --klda-sigma {value} beyond the features' scale",
            [*BASE, "--methods", "klda", "--klda-dim", "64", "--klda-sigma", value],
            f"KLDA's sigma (--klda-sigma) = {said} is far from the features' scale",
        )
        for value, said in (("1e-300", "1e-300"), ("1e300", "1e+300"), ("5e-324", "5e-324"))
    ],
    (
        "baselines ranpac seed negative",
        [*BASE, "--ranpac-seed", "-1"],
        "--ranpac-seed must be in [0, 2**32), got -1",
    ),
    (
        "baselines ranpac seed huge",
        [*BASE, "--ranpac-seed", str(10**23)],
        f"--ranpac-seed must be in [0, 2**32), got {10**23}",
    ),
    (
        "baselines init cls zero",
        [*BASE[:5], "--no-tosca", "--init-cls", "0"],
        "--init-cls must be at least 1, got 0",
    ),
    (
        "baselines increment negative",
        [*BASE[:5], "--no-tosca", "--init-cls", "2", "--increment", "-2"],
        "--increment must be at least 1, got -2",
    ),
    ("baselines missing store", ["baselines", "--store", "{missing}"], "not a feature store: {missing}"),
    (
        "baselines incomplete store",
        ["baselines", "--store", "{half}", "--no-tosca"],
        "is not fully extracted",
    ),
    ("baselines out a file", [*BASE, "--out", "{file}"], "--out {file} is a file, not a folder"),
    (
        "baselines run missing",
        [*BASE[:5], "--run", "{missing}"],
        "not a run directory: {missing} (no asked.json)",
    ),
    ("baselines unknown device", [*BASE[:3], "--device", "tpu"], "unknown --device 'tpu'"),
    ("baselines order seed", [*BASE, "--order-seed", "-1"], "--order-seed must be in [0, 2**32), got -1"),
    # ------------------------------------------------------------------ demo
    (
        "demo per class zero",
        ["demo", "--data-root", "{img}", "--per-class", "0"],
        "--per-class must be at least 1, got 0",
    ),
    (
        "demo per class negative",
        ["demo", "--data-root", "{img}", "--per-class", "-5"],
        "--per-class must be at least 1, got -5",
    ),
    ("demo jobs zero", ["demo", "--data-root", "{img}", "--jobs", "0"], "--jobs must be at least 1, got 0"),
    ("demo missing data", ["demo", "--data-root", "{missing}"], "no EuroSAT data at {missing}"),
    (
        "demo data a plain file",
        ["demo", "--data-root", "{file}"],
        "--data-root {file} is neither a folder nor an archive",
    ),
    ("demo unknown device", ["demo", "--data-root", "{img}", "--device", "tpu"], "unknown --device 'tpu'"),
    (
        "demo cache dir a file",
        ["demo", "--data-root", "{img}", "--cache-dir", "{file}"],
        "--cache-dir {file} is a file",
    ),
    # ------------------------------------------------------------------ routers, predict
    ("routers missing run", ["routers", "{missing}"], "{missing}"),
    ("routers a file", ["routers", "{file}"], "{file}"),
    ("routers not a run", ["routers", "{empty}"], "{empty}"),
    (
        "predict two routers",
        ["predict", "{run}", "{img}", "--router", "entropy,lda"],
        "--router takes one router for predict, got 'entropy,lda'",
    ),
    (
        "predict oracle router",
        ["predict", "{run}", "{img}", "--router", "oracle"],
        "--router oracle is a reference (it needs the task id",
    ),
    (
        "predict unknown router",
        ["predict", "{run}", "{img}", "--router", "magic"],
        "unknown --router 'magic'",
    ),
    ("predict not a run", ["predict", "{empty}", "{img}"], "not a run directory: {empty}"),
    (
        "predict a device",
        ["predict", "{run}", "/dev/null"],
        "/dev/null is neither an image file nor a folder",
    ),
    # ------------------------------------------------------------------ output folders nothing can be made in
    # (one check for every output flag of every command, before anything runs or is written)
    (
        "fit run under a file",
        [*FIT, "--run", "{run}/asked.json/x"],
        _under("--run", "{run}/asked.json", "x"),
    ),
    (
        "fit run under /dev/null",
        [*FIT, "--run", "/dev/null/x"],
        "--run /dev/null/x lies in /dev, the kernel's",
    ),
    ("fit run in /proc", [*FIT, "--run", "/proc/x"], "--run /proc/x lies in /proc, the kernel's view"),
    (
        "fit run a fifo",
        [*FIT, "--run", "{fifo}"],
        "--run {fifo} is a device, a fifo or a socket, not a folder",
    ),
    (
        "fit run under a dangling link",
        [*FIT, "--run", "{dangling}/x"],
        "--run {dangling}/x lies under {dangling}, which is a dangling link, not a folder",
    ),
    ("fit run under a link to /proc", [*FIT, "--run", "{toproc}/x"], "--run {toproc}/x lies in /proc"),
    ("fit tensorboard in /proc", [*FIT, "--log", "tensorboard=/proc/tb"], "/proc/tb lies in /proc"),
    ("sweep out in /proc", [*SWEEP, "--r", "2", "--out", "/proc/sw"], "--out /proc/sw lies in /proc"),
    ("sweep keep-modules in /proc", [*SWEEP, "--r", "2", "--keep-modules", "/proc/km"], "lies in /proc"),
    (
        "sweep keep-modules under a file",
        [*SWEEP, "--r", "2", "--keep-modules", "{run}/asked.json/km"],
        _under("--keep-modules", "{run}/asked.json", "km"),
    ),
    ("baselines out in /proc", [*BASE, "--out", "/proc/bl"], "--out /proc/bl lies in /proc"),
    ("baselines run under a file", [*BASE, "--run", "{file}/r"], _under("--run", "{file}", "r")),
    (
        "extract store under a file",
        [*EXTRACT, "--store", "{file}/s.zarr"],
        _under("--store", "{file}", "s.zarr"),
    ),
    ("extract cache dir in /sys", [*EXTRACT, "--cache-dir", "/sys/c"], "--cache-dir /sys/c lies in /sys"),
    (
        "suite out in /proc",
        ["suite", "--preset", "local", "--out", "/proc/su"],
        "--out /proc/su lies in /proc",
    ),
    ("demo runs dir under a file", ["demo", "--runs-dir", "{file}/r"], _under("--runs-dir", "{file}", "r")),
    # ------------------------------------------------------------------ sizes checked before any work
    (
        "fit epochs 2**31",
        [*FIT, "--epochs", str(2**31)],
        "--epochs 2147483648 is over the limit of 10,000 epochs per task",
    ),
    (
        "fit r ten million",
        [*FIT, "--r", "10000000"],
        "of r up to 10000000, s up to 2, batch up to 48 would need",
    ),
    (
        "fit s ten million",
        [*FIT, "--s", "10000000"],
        "of r up to 2, s up to 10000000, batch up to 48 would need",
    ),
    (
        "sweep epochs 2**31",
        [*SWEEP, "--epochs", str(2**31)],
        "--epochs 2147483648 is over the limit of 10,000",
    ),
    ("sweep r ten million", [*SWEEP, "--r", "4,10000000"], "of r up to 10000000, s up to 2"),
    (
        "sweep grid too large",
        [*SWEEP, "--r", ",".join(map(str, range(1, 401))), "--l1", ",".join(f"{i}e-6" for i in range(300))],
        "a grid of 120000 is over the limit of 100,000 points",
    ),
    ("sweep jobs 10**5", [*SWEEP, "--jobs", "100000"], "--jobs 100000 is over the limit of"),
    ("extract workers 10**5", [*EXTRACT, "--workers", "100000"], "--workers 100000 is over the limit of"),
    ("extract local:10**5", [*EXTRACT, "--scheduler", "local:100000"], "N = 100000 is over the limit of"),
    ("extract views 10**7", [*EXTRACT, "--views", "10000000"], "view(s) each would need"),
    ("extract zip bomb", [*EXTRACT[:6], "{bomb}"], "times its own size (the limit is 100x"),
    (
        "baselines ranpac m 10**6",
        [*BASE, "--ranpac-projection-dim", "1000000"],
        "RanPAC with M = 1,000,000 would need",
    ),
    (
        "demo jobs 10**5",
        ["demo", "--data-root", "{img}", "--jobs", "100000"],
        "--jobs 100000 is over the limit",
    ),
    ("suite file a fifo", ["suite", "{fifo}", "--dry-run"], "suite file {fifo} is not a regular file"),
    (
        "extract data root a fifo",
        [*EXTRACT[:6], "{fifo}"],
        "data root {fifo} is neither a folder nor an archive",
    ),
    (
        "extract store inside a store",
        [*EXTRACT, "--store", "{store}/inner.zarr"],
        "lies inside the zarr store {store}",
    ),
    ("extract store named dot", [*EXTRACT, "--store", "."], "--store '.' names no folder"),
    ("extract store named dot dot", [*EXTRACT, "--store", ".."], "--store '..' names no folder"),
    (
        "extract store inside the images",
        [*EXTRACT, "--store", "{img}/train/feat.zarr"],
        "lies inside the train images",
    ),
    ("info of the working folder", ["cache", "info", "."], "not a feature store: ."),
    (
        "extract scheduler file not one",
        [*EXTRACT, "--scheduler", "{notsched}"],
        "--scheduler {notsched} is not a scheduler file (no address in it)",
    ),
    (
        "fit run name too long",
        [*FIT, "--run", "{root}/" + "r" * 300],
        "a file or folder name is too long for this filesystem",
    ),
    (
        "extract store name too long",
        [*EXTRACT, "--store", "{root}/" + "s" * 300 + ".zarr"],
        "a file or folder name is too long for this filesystem",
    ),
    (  # every name 250 bytes, the whole path over 4,096 (issue 47, point 11)
        "fit run path too long",
        [*FIT, "--run", "{root}/" + "/".join(["r" * 250] * 17)],
        "a path is too long for this system (",
    ),
    (
        "extract store path too long",
        [*EXTRACT, "--store", "{root}/" + "/".join(["s" * 250] * 17) + "/s.zarr"],
        "a path is too long for this system (",
    ),
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bad-input")
    store = synthetic_store(root / "store.zarr").path
    half = synthetic_store(root / "half.zarr").path
    lonely = synthetic_store(root / "lonely.zarr", classes=4, per_class=1, test_per_class=1).path
    FeatureStore.open(half, mode="r+").mark_undone("train", [3])
    run = root / "run"
    result = runner.invoke(
        app,
        [*(s.format(store=store) for s in FIT), "--epochs", "1", "--r", "4", "--s", "4", "--run", str(run)],
    )
    assert result.exit_code == 0, result.output
    img = make_image_tree(root / "img", classes=2, train=1, test=1)
    (root / "file.txt").write_text("not what you think")
    os.mkfifo(root / "fifo")
    (root / "notsched.json").write_text("{}")
    with zipfile.ZipFile(root / "bomb.zip", "w", zipfile.ZIP_DEFLATED) as bomb:
        bomb.writestr("train/a/x.png", bytes(8 << 20))  # 8 MiB of zeros in a few kB
        bomb.writestr("test/a/x.png", b"x")
    (root / "empty").mkdir()
    (root / "elsewhere").mkdir()  # planted links' target: a tracker must never write there
    (root / "runs").mkdir()
    (root / "runs" / "tensorboard").symlink_to(root / "elsewhere")
    (root / "planted").mkdir()
    (root / "planted" / "mlartifacts").symlink_to(root / "elsewhere")
    (root / "dangling").symlink_to(root / "nowhere")
    (root / "toproc").symlink_to("/proc")
    return hostile_arrays(root / "arrays") | {
        "dangling": root / "dangling",
        "toproc": root / "toproc",
        "root": root,
        "store": store,
        "half": half,
        "lonely": lonely,
        "run": run,
        "img": img,
        "bomb": root / "bomb.zip",
        "fifo": root / "fifo",
        "notsched": root / "notsched.json",
        "file": root / "file.txt",
        "empty": root / "empty",
        "planted": root / "planted",
        "missing": root / "no-such-thing",
    }


def _state(root: Path) -> tuple[dict[str, tuple[int, int]], set[str]]:
    files, folders = {}, set()
    for path in root.rglob("*"):
        info = path.lstat()  # a link is compared as itself, never followed
        if stat.S_ISDIR(info.st_mode):
            folders.add(str(path))
        else:
            files[str(path)] = (info.st_size, info.st_mtime_ns)
    return files, folders


# refused once the images are listed and the backbone loaded, so after `tosca extract`'s plan line
# (every mistake in the flags alone is refused before it)
AFTER_THE_PLAN = {"extract views 10**7"}


@pytest.mark.parametrize(("name", "argv", "expected"), [pytest.param(*row, id=row[0]) for row in ROWS])
def test_bad_input(
    name: str, argv: list[str], expected: str, folder: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(folder["root"])
    monkeypatch.delenv("TOSCA_DATA", raising=False)
    monkeypatch.setenv("TOSCA_MEMORY_BUDGET", "")  # `--memory-budget` sets it: unset after each row
    places = {k: str(v) for k, v in folder.items()}
    args = [part.format(**places) for part in argv]
    before = _state(folder["root"])
    result = runner.invoke(app, args)
    after = _state(folder["root"])
    output = result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), (
        f"{name}: {result.exception!r}"
    )
    assert result.exit_code in (1, 2), f"{name}: exit {result.exit_code}: {output}"
    assert "Traceback" not in output and "╭" not in output, output
    lines = [line for line in after_the_plan(output) if not line.startswith(("warning:", "note:"))]
    if name in AFTER_THE_PLAN:  # found once the backbone is loaded: after extract's plan line
        assert lines and lines[0].startswith("extract: "), f"{name}: {lines}"
        lines = lines[1:]
    problem = [line for line in lines if line.startswith(("error:", "FAIL"))]
    assert len(problem) == 1 and len(lines) == 1, f"{name}: {lines}"
    assert expected.format(**places) in problem[0], f"{name}: {problem[0]}"
    assert after == before, (
        f"{name} changed files: {set(after[0]) ^ set(before[0])} {set(after[1]) ^ set(before[1])}"
    )


# ---------------------------------------------------------------------------------- damaged files
# Each row damages a fresh copy of the folder (prepare), then runs one command: it must stop with
# one line naming the file and what to do, and change nothing.


def _edit_json(path: Path, **changes: object) -> None:
    data = json.loads(path.read_text())
    for dotted, value in changes.items():
        block = data
        *parents, last = dotted.split("__")
        for key in parents:
            block = block[key]
        block[last] = value
    path.write_text(json.dumps(data))


def _garbage(path: Path) -> None:
    path.write_text("not a safetensors file")


def _identity_without_a_name(root: Path) -> None:
    from tosca_foundation.fingerprints import fingerprint

    meta = json.loads((root / "store.zarr" / "zarr.json").read_text())
    meta["attributes"]["identity"]["dataset"]["name"] = ["not", "a", "name"]
    meta["attributes"]["fingerprint"] = fingerprint(meta["attributes"]["identity"])
    (root / "store.zarr" / "zarr.json").write_text(json.dumps(meta))


def _sparse(path: Path, size: int, head: bytes = b"") -> None:
    """A file of `size` bytes that takes a few KiB on disk (a hole after `head`)."""
    with open(path, "wb") as fh:
        fh.write(head)
        fh.truncate(size)


DEEP = "[" * 3000 + "]" * 3000


def _task_file_edit(path: Path, edit: Any, extra_bytes: int = 0) -> None:
    """Rewrite a safetensors file's header with `edit`; `extra_bytes` of hole appended to its data."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header, data = json.loads(raw[8 : 8 + n]), raw[8 + n :]
    edit(header, len(data))
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    _sparse(path, 8 + len(text) + len(data) + extra_bytes, struct.pack("<Q", len(text)) + text + data)


def _extra_tensor(header: dict[str, Any], data: int) -> None:
    header["extra"] = {"dtype": "F32", "shape": [2 << 30], "data_offsets": [data, data + (8 << 30)]}


def _deep_stats(header: dict[str, Any], data: int) -> None:
    header["__metadata__"]["stats"] = DEEP


def _router_of_a_million_classes(root: Path) -> None:
    path = root / "run" / "state" / "router.safetensors"
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    dim = json.loads(raw[8 : 8 + n])["scatter"]["shape"][0]
    layout, offset = {}, 0
    for name, shape, dtype, size in (
        ("counts", [10**6], "F64", 8),
        ("sums", [10**6, dim], "F64", 8),
        ("tsums", [10**6, dim], "F64", 8),
        ("scatter", [dim, dim], "F64", 8),
        ("shrinkage", [1], "F64", 8),
        ("tukey", [1], "BOOL", 1),
    ):
        layout[name] = {
            "dtype": dtype,
            "shape": shape,
            "data_offsets": [offset, offset + math.prod(shape) * size],
        }
        offset += math.prod(shape) * size
    text = json.dumps(layout).encode()
    text += b" " * (-len(text) % 8)
    _sparse(path, 8 + len(text) + offset, struct.pack("<Q", len(text)) + text)


def _asked_edited(root: Path, **changes: object) -> None:
    """The run's asked.json edited and its done.json made again to match."""
    _edit_json(root / "run" / "asked.json", **changes)
    redigest(root / "run")


def _first_task_seconds(root: Path, seconds: float) -> None:
    """Task 0's training seconds in measured.json set, and done.json made again to match."""
    path = root / "run" / "measured.json"
    measured = json.loads(path.read_text())
    measured["tasks"][0]["seconds"] = seconds
    path.write_text(json.dumps(measured))
    redigest(root / "run")


def _unfinished(root: Path, damage: Any) -> None:
    """A run never finished (no done.json: a killed fit's), then `damage`: its state files are
    checked as they are read, since no digest vouches for them."""
    (root / "run" / "done.json").unlink()
    damage(root)


# A TOSCA run is a cell (`records.cell`, issue 54): a finished run (done.json there) is checked
# whole against its digests before anything is read or rewritten; a run never finished has each
# state file checked as it is read. No file holds a figure: an edited finished_tasks or A_last is
# no longer possible (metrics.json is a view, never read: tests/tosca_heads/running/test_edited_runs.py).
DAMAGED: list[tuple[str, Any, list[str], str]] = [
    (
        "task file not safetensors",
        lambda root: _unfinished(root, lambda r: _garbage(r / "run" / "state" / "task_000.safetensors")),
        ["eval", "{run}", "--device", "cpu"],
        "run {run}: task_000.safetensors is damaged (it is not a safetensors file",
    ),
    (
        "task file of another recipe",
        lambda root: _unfinished(
            root,
            lambda r: shutil.copy(
                r / "wide" / "state" / "task_001.safetensors", r / "run" / "state" / "task_001.safetensors"
            ),
        ),
        ["eval", "{run}", "--device", "cpu"],
        "task_001.safetensors is damaged (it was written under another asked.json",
    ),
    (
        "finished run's task file edited",
        lambda root: _garbage(root / "run" / "state" / "task_000.safetensors"),
        ["eval", "{run}", "--device", "cpu"],
        "{run}/state/task_000.safetensors is not the file that was written (edited or damaged since",
    ),
    (
        "finished run's task file of another recipe",
        lambda root: shutil.copy(
            root / "wide" / "state" / "task_001.safetensors", root / "run" / "state" / "task_001.safetensors"
        ),
        ["eval", "{run}", "--device", "cpu"],  # a fit says its plan first: its refusal is after_the_plan's
        "{run}/state/task_001.safetensors is not the file that was written (edited or damaged since",
    ),
    (
        "router file not safetensors",
        lambda root: _garbage(root / "run" / "state" / "router.safetensors"),
        ["predict", "{run}", "{img}", "--device", "cpu"],
        "{run}/state/router.safetensors is not the file that was written (edited or damaged since",
    ),
    (
        "config r not a number",
        lambda root: _asked_edited(root, train__r="forty"),
        ["eval", "{run}", "--device", "cpu"],
        "records an invalid recipe (--r must be an integer, got 'forty'); the file was edited or damaged",
    ),
    (
        "config r edited",
        lambda root: _edit_json(root / "run" / "asked.json", train__r=8),
        ["routers", "{run}"],
        "{run}/asked.json is not the file that was written (edited or damaged since",
    ),
    (
        "config stream negative",
        lambda root: _asked_edited(root, stream__increment=-2),
        ["predict", "{run}", "{img}", "--device", "cpu"],
        "records an invalid task split (--increment must be at least 1, got -2)",
    ),
    (
        "config a list",
        lambda root: (root / "run" / "asked.json").write_text("[1, 2]"),
        ["eval", "{run}", "--device", "cpu"],
        "holds a list, not a JSON object; it was edited or damaged",
    ),
    (
        "config store not text",
        lambda root: _edit_json(root / "run" / "asked.json", store=123),
        ["eval", "{run}", "--device", "cpu"],
        "records a store that is not text; the file was edited or damaged",
    ),
    (
        "run measured.json edited",
        lambda root: _edit_json(root / "run" / "measured.json", seconds=-3),
        ["routers", "{run}"],
        "{run}/measured.json is not the file that was written (edited or damaged since",
    ),
    (
        "run seconds negative, done.json made again",
        lambda root: _first_task_seconds(root, -3),
        ["routers", "{run}"],
        "seconds must not be negative, got -3",
    ),
    (
        "run seconds not finite, done.json made again",
        lambda root: (
            _edit_json(root / "run" / "measured.json", seconds=float("inf")),
            redigest(root / "run"),
        ),
        ["routers", "{run}"],
        "seconds must be a finite number of seconds, got inf",
    ),
    (
        "run answers edited",
        lambda root: _garbage(root / "run" / "outcomes.safetensors"),
        ["routers", "{run}"],
        "{run}/outcomes.safetensors is not the file that was written (edited or damaged since",
    ),
    (
        "run done.json deleted",
        lambda root: (root / "run" / "done.json").unlink(),
        ["routers", "{run}"],
        "run {run} is not finished (no done.json: it was stopped or is still running); `tosca fit --run {run}` finishes it",
    ),
    (
        "run done.json not JSON",
        lambda root: (root / "run" / "done.json").write_text("{not json"),
        ["eval", "{run}", "--device", "cpu"],
        "{run}/done.json",
    ),
    (
        "run a state file added",
        lambda root: shutil.copy(
            root / "run" / "state" / "task_001.safetensors", root / "run" / "state" / "task_009.safetensors"
        ),
        ["predict", "{run}", "{img}", "--device", "cpu"],
        "holds state/task_009.safetensors, a file its done.json does not name (added since)",
    ),
    (
        "run written before cells",
        lambda root: (
            (root / "run" / "asked.json").rename(root / "run" / "config.json"),
            (root / "run" / "done.json").unlink(),
        ),
        ["eval", "{run}", "--device", "cpu"],
        "run {run} was written before runs were kept as cells (a config.json, no asked.json): delete it and fit it again",
    ),
    (
        "store identity edited and re-fingerprinted",
        _identity_without_a_name,
        ["fit", "--store", "{store}", "--device", "cpu", "--run", "{root}/new-run"],
        "records no valid dataset.name in its identity; was it edited by hand?",
    ),
    (
        "sweep file edited",
        lambda root: (root / "sweep" / "sweep.json").write_text("{oops"),
        [*SWEEP, "--r", "2", "--epochs", "1", "--jobs", "1", "--out", "{root}/sweep"],
        "sweep file {root}/sweep/sweep.json is not valid JSON",
    ),
    # ------------------------------------------------ crafted files: bounded reads, one line in seconds
    (
        "asked.json a sparse 2 GiB file",
        lambda root: _sparse(root / "run" / "asked.json", 2 << 30, b"{"),
        ["eval", "{run}", "--device", "cpu"],
        "run config {run}/asked.json is larger than such a file can be (2.0 GiB; at most 32.0 MiB)",
    ),
    (
        "asked.json nested 3,000 deep",
        lambda root: (root / "run" / "asked.json").write_text('{"x": ' + DEEP + "}"),
        ["eval", "{run}", "--device", "cpu"],
        "run config {run}/asked.json nests more than 64 levels deep",
    ),
    (
        "measured.json nested 3,000 deep, done.json made again",
        lambda root: (
            (root / "run" / "measured.json").write_text('{"x": ' + DEEP + "}"),
            redigest(root / "run"),
        ),
        ["routers", "{run}"],
        "{run}/measured.json nests more than 64 levels deep",
    ),
    (
        "a finished run's task file grown to a sparse 2 GiB",
        lambda root: _sparse(root / "run" / "state" / "task_000.safetensors", 2 << 30, b"{"),
        ["eval", "{run}", "--device", "cpu"],
        "task_000.safetensors",
    ),
    (
        "sweep.json nested 3,000 deep",
        lambda root: (root / "sweep" / "sweep.json").write_text('{"x": ' + DEEP + "}"),
        [*SWEEP, "--r", "2", "--epochs", "1", "--jobs", "1", "--out", "{root}/sweep"],
        "sweep file {root}/sweep/sweep.json nests more than 64 levels deep",
    ),
    (
        "a task file's metadata nested 3,000 deep",
        lambda root: _unfinished(
            root, lambda r: _task_file_edit(r / "run" / "state" / "task_000.safetensors", _deep_stats)
        ),
        ["eval", "{run}", "--device", "cpu"],
        "task_000.safetensors is damaged (its training stats nests more than 64 levels deep",
    ),
    (
        "a task file with an extra 8 GiB tensor",
        lambda root: _unfinished(
            root,
            lambda r: _task_file_edit(r / "run" / "state" / "task_000.safetensors", _extra_tensor, 8 << 30),
        ),
        ["eval", "{run}", "--device", "cpu"],
        "task_000.safetensors is damaged (it holds a tensor 'extra' that no task file has)",
    ),
    (
        "a router file claiming a million classes",
        _router_of_a_million_classes,
        ["predict", "{run}", "{img}", "--device", "cpu"],
        "state/router.safetensors",  # a finished run's file: its digest is refused (too large to be one)
    ),
]


SWEEP_AGAIN = [*SWEEP, "--r", "2", "--epochs", "1", "--jobs", "1", "--out", "{root}/sweep"]


def _point(root: Path) -> Path:
    """The finished sweep's one point: its cell's folder (points/KEY)."""
    (folder,) = (root / "sweep" / "points").iterdir()
    return folder


def _point_outcomes(root: Path) -> Path:
    return _point(root) / "outcomes.safetensors"


def _flipped_outcomes(root: Path) -> None:
    """A point's kept answers with every answer of one router turned over."""
    from safetensors.numpy import load_file, save_file

    from tosca_heads.records import FORMAT

    path = _point_outcomes(root)
    tensors = load_file(path)
    tensors["test/right/entropy"] = 255 - tensors["test/right/entropy"]
    meta = {"format": str(FORMAT), "tasks": str(tensors["test/right/entropy"].shape[0])}
    save_file(tensors, path, metadata=meta)


def _point_redigested(root: Path, name: str, **changes: object) -> None:
    """A file of the finished point edited and its done.json made again over it: an edit that
    hides itself from the digests."""
    import hashlib

    folder = _point(root)
    _edit_json(folder / name, **changes)
    done = json.loads((folder / "done.json").read_text())
    done["sha256"][name] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    (folder / "done.json").write_text(json.dumps(done))


def _point_of_a_recipe_out_of_range(root: Path) -> None:
    """asked.json given a negative learning rate, done.json made again and the folder renamed to
    the key its flags now give: every digest agrees, the recipe does not."""
    from tosca_heads.records.sweep_points import flags_of, point_key

    _point_redigested(root, "asked.json", train__lr=-1.0)
    folder = _point(root)
    folder.rename(folder.with_name(point_key(flags_of(json.loads((folder / "asked.json").read_text())))))


def _deep_point_asked(root: Path) -> None:
    import hashlib

    folder = _point(root)
    text = (folder / "asked.json").read_text().replace('"train": {', f'"deep": {DEEP}, "train": {{', 1)
    (folder / "asked.json").write_text(text)
    done = json.loads((folder / "done.json").read_text())
    done["sha256"]["asked.json"] = hashlib.sha256(text.encode()).hexdigest()
    (folder / "done.json").write_text(json.dumps(done))


def _point_a_link(root: Path) -> None:
    """The point's folder moved out of the sweep and a link left in its place."""
    folder = _point(root)
    shutil.move(folder, root / "elsewhere")
    folder.symlink_to(root / "elsewhere")


def _sweep_of_the_old_layout(root: Path) -> None:
    """results.csv and outcomes/KEY.safetensors as truth, no points/: a sweep written before points
    were cells."""
    folder = _point(root)
    (root / "sweep" / "outcomes").mkdir()
    shutil.move(folder / "outcomes.safetensors", root / "sweep" / "outcomes" / f"{folder.name}.safetensors")
    shutil.rmtree(root / "sweep" / "points")


DAMAGED += [
    (
        "sweep point answers not safetensors",
        lambda root: _garbage(_point_outcomes(root)),
        SWEEP_AGAIN,
        "outcomes.safetensors is not the file that was written (edited or damaged since",
    ),
    (
        "sweep point answers edited",
        _flipped_outcomes,
        SWEEP_AGAIN,
        "outcomes.safetensors is not the file that was written (edited or damaged since",
    ),
    (
        "sweep point answers deleted",
        lambda root: _point_outcomes(root).unlink(),
        SWEEP_AGAIN,
        "outcomes.safetensors is missing (deleted?); delete the point's folder (points/KEY)",
    ),
    (
        "sweep point seconds edited",
        lambda root: _edit_json(_point(root) / "measured.json", seconds=-3),
        SWEEP_AGAIN,
        "measured.json is not the file that was written (edited or damaged since",
    ),
    (
        "sweep point flags edited",
        lambda root: _edit_json(_point(root) / "asked.json", train__r=8),
        SWEEP_AGAIN,
        "asked.json is not the file that was written (edited or damaged since",
    ),
    (
        "sweep point seconds negative, done.json made again",
        lambda root: _point_redigested(root, "measured.json", seconds=-3),
        SWEEP_AGAIN,
        "seconds must not be negative, got -3",
    ),
    (
        "sweep point train seconds infinite, done.json made again",
        lambda root: _point_redigested(root, "measured.json", train_seconds=float("inf")),
        SWEEP_AGAIN,
        "train_seconds must be a finite number of seconds, got inf",
    ),
    (
        "sweep point group size zero, done.json made again",
        lambda root: _point_redigested(root, "measured.json", group_size=0),
        SWEEP_AGAIN,
        "group_size must be a whole number of at least 1, got 0",
    ),
    (
        "sweep point flags of another point, done.json made again",
        lambda root: _point_redigested(root, "asked.json", train__r=8),
        SWEEP_AGAIN,
        "not the one its folder names (moved or renamed)",
    ),
    (
        "sweep point flags not a mapping, done.json made again",
        lambda root: _point_redigested(root, "asked.json", train="r=8"),
        SWEEP_AGAIN,
        "records no point's flags (no recipe or task split); the file was edited or damaged",
    ),
    (
        "sweep point store of no feature size, done.json made again",
        lambda root: _point_redigested(root, "asked.json", store__dim="wide"),
        SWEEP_AGAIN,
        "records no point's flags (no store of a feature size)",
    ),
    (
        "sweep point recipe out of range under its own key, done.json made again",
        _point_of_a_recipe_out_of_range,
        SWEEP_AGAIN,
        "records no point's flags (--lr must be > 0, got -1.0)",
    ),
    (
        "sweep point asked.json nested 3,000 deep, done.json made again",
        _deep_point_asked,
        SWEEP_AGAIN,
        "asked.json nests more than 64 levels deep",
    ),
    (
        "sweep point done.json not JSON",
        lambda root: (_point(root) / "done.json").write_text("{not json"),
        SWEEP_AGAIN,
        "done.json",
    ),
    (
        "sweep point done.json naming a file outside the cell",
        lambda root: _edit_json(_point(root) / "done.json", sha256={"../../../store.zarr/zarr.json": "0"}),
        SWEEP_AGAIN,
        "names '../../../store.zarr/zarr.json', no file of a cell",
    ),
    (
        "sweep point holding a stray file",
        lambda root: (_point(root) / "notes.txt").write_text("mine"),
        SWEEP_AGAIN,
        "holds 'notes.txt', no file of a sweep point (added since)",
    ),
    (
        "sweep points holding a stray file",
        lambda root: (root / "sweep" / "points" / "notes.txt").write_text("mine"),
        SWEEP_AGAIN,
        "holds 'notes.txt', no sweep point's folder (added since)",
    ),
    (
        "sweep point renamed",
        lambda root: _point(root).rename(_point(root).with_name("0123456789abcdef")),
        SWEEP_AGAIN,
        "holds the point",
    ),
    ("sweep point folder a link", _point_a_link, SWEEP_AGAIN, "a symbolic link"),
    (
        "sweep written before its points were cells",
        _sweep_of_the_old_layout,
        SWEEP_AGAIN,
        "was written before sweep points were kept as cells (results.csv and outcomes/, no points/): "
        "pass another --out",
    ),
]


# A baseline cell (`records.cell`): its files are checked whole against its done.json before it is
# reused, so an edit (issue 54: a parameter count of 5 or seconds of -3 were printed on reuse) is one
# line; a measured value no machine gives is refused even where done.json was made again to match.
BASE_CELL = "base/simplecil"
BASE_AGAIN = [*BASE, "--methods", "simplecil", "--out", "{root}/base"]


def _redigested(root: Path, **measured: object) -> None:
    """measured.json edited and done.json made again over it: an edit that hides itself."""
    import hashlib

    folder = root / BASE_CELL
    _edit_json(folder / "measured.json", **measured)
    done = json.loads((folder / "done.json").read_text())
    done["sha256"]["measured.json"] = hashlib.sha256((folder / "measured.json").read_bytes()).hexdigest()
    (folder / "done.json").write_text(json.dumps(done))


def _flipped_baseline_answers(root: Path) -> None:
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    path = root / BASE_CELL / "outcomes.safetensors"
    with safe_open(path, "np") as fh:
        meta = fh.metadata()
    tensors = load_file(path)
    tensors["test/right/simplecil"] = 255 - tensors["test/right/simplecil"]
    save_file(tensors, path, metadata=meta)


def _written_before_cells(root: Path) -> None:
    for name in ("asked.json", "measured.json", "done.json"):
        (root / BASE_CELL / name).unlink()


NOT_WRITTEN = "is not the file that was written (edited or damaged since"
DAMAGED += [
    (
        "baseline parameters edited",
        lambda root: _edit_json(root / BASE_CELL / "measured.json", parameters=5),
        BASE_AGAIN,
        f"measured.json {NOT_WRITTEN}",
    ),
    (
        "baseline seconds edited",
        lambda root: _edit_json(root / BASE_CELL / "measured.json", seconds=-3),
        BASE_AGAIN,
        f"measured.json {NOT_WRITTEN}",
    ),
    (
        "baseline seconds negative, done.json made again",
        lambda root: _redigested(root, seconds=-3),
        BASE_AGAIN,
        "seconds must not be negative, got -3",
    ),
    (
        "baseline seconds NaN, done.json made again",
        lambda root: _redigested(root, seconds=float("nan")),
        BASE_AGAIN,
        "seconds must be a finite number of seconds, got nan",
    ),
    (
        "baseline asked.json edited",
        lambda root: _edit_json(root / BASE_CELL / "asked.json", params={"seed": 5}),
        BASE_AGAIN,
        f"asked.json {NOT_WRITTEN}",
    ),
    ("baseline answers edited", _flipped_baseline_answers, BASE_AGAIN, f"outcomes.safetensors {NOT_WRITTEN}"),
    (
        "baseline answers deleted",
        lambda root: (root / BASE_CELL / "outcomes.safetensors").unlink(),
        BASE_AGAIN,
        "outcomes.safetensors is missing (deleted?)",
    ),
    (
        "baseline done.json not JSON",
        lambda root: (root / BASE_CELL / "done.json").write_text("{not json"),
        BASE_AGAIN,
        "done.json",
    ),
    (
        "baseline done.json naming a file outside the cell",
        lambda root: _edit_json(root / BASE_CELL / "done.json", sha256={"../../store.zarr/zarr.json": "0"}),
        BASE_AGAIN,
        "names '../../store.zarr/zarr.json', no file of a cell",
    ),
    (
        "baseline done.json digests not text",
        lambda root: _edit_json(root / BASE_CELL / "done.json", sha256=[1, 2]),
        BASE_AGAIN,
        "does not hold the cell's digests",
    ),
    (
        "baseline written before cells",
        _written_before_cells,
        BASE_AGAIN,
        "written before baselines were kept as cells (a metrics.json, no asked.json): delete it and run the baselines again",
    ),
]

# Links and fifos planted in tosca's folders, one row per file a command writes there (in a shared
# folder, a link makes tosca write where its planter wants): refused in one line before anything is
# written; the file it points to is untouched. A dangling link must not create its target either.
SWEEP_MORE = [*SWEEP, "--r", "2,4", "--epochs", "1", "--jobs", "1", "--out", "{root}/sweep"]
FIT_MORE = [*FIT, "--epochs", "1", "--r", "4", "--s", "4", "--run", "{run}"]
BASELINES_AGAIN = [*BASE, "--methods", "simplecil", "--out", "{root}/base"]
LINKED: list[tuple[str, str, str, list[str]]] = [  # (name, the file, what is planted there, command)
    ("sweep results.csv", "sweep/results.csv", "link", SWEEP_MORE),
    ("sweep results.csv, a dangling link", "sweep/results.csv", "dangling", SWEEP_MORE),
    ("sweep results.csv a fifo", "sweep/results.csv", "fifo", SWEEP_MORE),
    ("sweep results.csv, a hard link", "sweep/results.csv", "hard link", SWEEP_MORE),
    ("run asked.json, a hard link", "run/asked.json", "hard link", FIT_MORE),
    (
        "run measured.json, a hard link",
        "run/measured.json",
        "hard link",
        ["eval", "{run}", "--device", "cpu"],
    ),
    ("run done.json", "run/done.json", "link", ["eval", "{run}", "--device", "cpu"]),
    ("run done.json a fifo", "run/done.json", "fifo", FIT_MORE),
    ("run metrics.json, a hard link", "run/metrics.json", "hard link", ["eval", "{run}", "--device", "cpu"]),
    ("baselines comparison.csv, a hard link", "base/comparison.csv", "hard link", BASELINES_AGAIN),
    ("sweep.json", "sweep/sweep.json", "link", SWEEP_MORE),
    ("sweep summary.md", "sweep/summary.md", "link", SWEEP_MORE),
    ("sweep results.parquet", "sweep/results.parquet", "link", SWEEP_MORE),
    ("sweep heatmap", "sweep/heatmap_A_last.png", "link", SWEEP_MORE),
    ("sweep summary.csv", "sweep/summary.csv", "link", SWEEP_MORE),
    ("sweep points folder", "sweep/points", "link", SWEEP_MORE),
    ("run outcomes.safetensors", "run/outcomes.safetensors", "link", ["eval", "{run}", "--device", "cpu"]),
    ("baselines outcomes.safetensors", "base/simplecil/outcomes.safetensors", "link", BASELINES_AGAIN),
    ("run asked.json, a dangling link", "run/asked.json", "dangling", FIT_MORE),
    ("run marker .tosca", "run/.tosca", "link", FIT_MORE),
    ("run metrics.json", "run/metrics.json", "link", ["eval", "{run}", "--device", "cpu"]),
    ("run results.csv", "run/results.csv", "link", ["eval", "{run}", "--device", "cpu"]),
    ("run accuracy.png", "run/accuracy.png", "link", ["eval", "{run}", "--device", "cpu"]),
    ("run router.safetensors", "run/state/router.safetensors", "link", ["eval", "{run}", "--device", "cpu"]),
    ("run head.safetensors", "run/state/head.safetensors", "link", FIT_MORE),
    ("run the next task file, a dangling link", "run/state/task_002.safetensors", "dangling", FIT_MORE),
    ("run state folder", "run/state", "link", ["eval", "{run}", "--device", "cpu"]),
    ("run metrics.json a fifo", "run/metrics.json", "fifo", ["eval", "{run}", "--device", "cpu"]),
    ("baselines metrics.json", "base/simplecil/metrics.json", "link", BASELINES_AGAIN),
    ("baselines results.csv", "base/simplecil/results.csv", "link", BASELINES_AGAIN),
    ("baselines asked.json", "base/simplecil/asked.json", "link", BASELINES_AGAIN),
    ("baselines measured.json", "base/simplecil/measured.json", "link", BASELINES_AGAIN),
    ("baselines done.json", "base/simplecil/done.json", "link", BASELINES_AGAIN),
    ("baselines done.json a fifo", "base/simplecil/done.json", "fifo", BASELINES_AGAIN),
    ("baselines comparison.csv", "base/comparison.csv", "link", BASELINES_AGAIN),
    ("baselines comparison.png", "base/comparison.png", "link", BASELINES_AGAIN),
]


@pytest.fixture(scope="module")
def damaged_template(folder: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bad-input folder plus a run of another recipe and a finished sweep, to damage copies of."""
    root = folder["root"]
    store = folder["store"]
    wide = [
        *(s.format(store=store) for s in FIT),
        "--epochs",
        "1",
        "--r",
        "8",
        "--s",
        "8",
        "--run",
        str(root / "wide"),
    ]
    assert runner.invoke(app, wide).exit_code == 0
    sweep = [*(s.format(store=store) for s in SWEEP), "--r", "2", "--epochs", "1", "--jobs", "1"]
    assert runner.invoke(app, [*sweep, "--out", str(root / "sweep")]).exit_code == 0
    base = [*(s.format(store=store) for s in BASE), "--methods", "simplecil", "--out", str(root / "base")]
    with contextlib.chdir(
        tmp_path_factory.mktemp("work")
    ):  # its preset run under runs/ here, not the checkout's
        assert runner.invoke(app, base).exit_code == 0
    return root


@pytest.mark.parametrize(
    ("name", "prepare", "argv", "expected"), [pytest.param(*r, id=r[0]) for r in DAMAGED]
)
def test_damaged_files(
    name: str,
    prepare: Any,
    argv: list[str],
    expected: str,
    damaged_template: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = tmp_path / "copy"
    shutil.copytree(damaged_template, root, symlinks=True, ignore=shutil.ignore_patterns("fifo", "pipe.npz"))
    for run in ("run", "wide"):  # the copies' runs point at the copy's store
        _edit_json(root / run / "asked.json", store=str(root / "store.zarr"))
        redigest(root / run)
    _edit_json(root / "sweep" / "sweep.json", store=str(root / "store.zarr"))
    prepare(root)
    monkeypatch.chdir(root)
    places = {
        "root": str(root),
        "store": str(root / "store.zarr"),
        "run": str(root / "run"),
        "img": str(root / "img"),
    }
    before = _state(root)
    result = runner.invoke(app, [part.format(**places) for part in argv])
    output = result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), (
        f"{name}: {result.exception!r}"
    )
    lines = [line for line in output.splitlines() if line.strip() and not line.startswith("note")]
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), f"{name}: {lines}"
    assert expected.format(**places) in lines[0], f"{name}: {lines[0]}"
    assert _state(root) == before, f"{name} changed files"


@pytest.mark.parametrize(
    "name",
    [
        "done.json deleted",
        "done.json deleted and the answers cut short",
        "the answers deleted with done.json",
    ],
)
def test_a_sweep_point_without_done_json_is_computed_again_never_shown(
    name: str, damaged_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A point whose done.json is gone looks like one a kill or a full disk stopped: it is never
    read (its figures, edited or not, are never shown) and is computed again, whole, with the
    figures it had."""
    root = _copy(damaged_template, tmp_path)
    folder = _point(root)
    figures = (root / "sweep" / "results.csv").read_text()
    (folder / "measured.json").write_text('{"format": 1, "seconds": -3}')  # never read: not finished
    (folder / "done.json").unlink()
    if name == "done.json deleted and the answers cut short":
        _sparse(folder / "outcomes.safetensors", 4, b"\x00\x00")
    elif name == "the answers deleted with done.json":
        (folder / "outcomes.safetensors").unlink()
    monkeypatch.chdir(root)
    argv = [part.format(root=root, store=root / "store.zarr") for part in SWEEP_AGAIN]
    result = runner.invoke(app, argv)
    assert result.exit_code == 0, result.output
    assert "1 run(s)" in result.output and "0 already done" in result.output
    assert sorted(p.name for p in folder.iterdir()) == [
        "asked.json",
        "done.json",
        "measured.json",
        "outcomes.safetensors",
    ]
    assert json.loads((folder / "measured.json").read_text())["seconds"] >= 0
    timed = {"train_seconds", "eval_seconds", "run_seconds", "group_seconds", "worker_pid"}

    def untimed(text: str) -> list[list[str]]:
        header, *rows = csv.reader(io.StringIO(text))
        return [[c for c, h in zip(row, header, strict=True) if h not in timed] for row in [header, *rows]]

    assert untimed((root / "sweep" / "results.csv").read_text()) == untimed(figures)


def _copy(damaged_template: Path, tmp_path: Path) -> Path:
    root = tmp_path / "copy"
    shutil.copytree(damaged_template, root, symlinks=True, ignore=shutil.ignore_patterns("fifo", "pipe.npz"))
    for run in ("run", "wide"):  # the copies' runs point at the copy's store
        _edit_json(root / run / "asked.json", store=str(root / "store.zarr"))
        redigest(root / run)
    _edit_json(root / "sweep" / "sweep.json", store=str(root / "store.zarr"))
    return root


@pytest.mark.parametrize(("name", "file", "planted", "argv"), [pytest.param(*r, id=r[0]) for r in LINKED])
def test_a_planted_link_or_fifo_is_never_written_through(
    name: str,
    file: str,
    planted: str,
    argv: list[str],
    damaged_template: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = _copy(damaged_template, tmp_path)
    target, outside = root / file, tmp_path / "outside.txt"
    outside.write_text("the planter's target\n")
    if target.is_dir() and not target.is_symlink():  # a folder tosca made (a sweep's points/)
        shutil.rmtree(target)
    target.unlink(missing_ok=True)
    if planted == "fifo":
        os.mkfifo(target)
    elif planted == "hard link":  # another name for the planter's file: appends would land there
        os.link(outside, target)
    else:
        target.symlink_to(outside if planted == "link" else tmp_path / "created-through-the-link")
    monkeypatch.chdir(root)
    places = {
        "root": str(root),
        "store": str(root / "store.zarr"),
        "run": str(root / "run"),
        "img": str(root / "img"),
    }
    before = _state(root)
    result = runner.invoke(app, [part.format(**places) for part in argv])
    lines = after_the_plan(result.output)
    assert result.exit_code == 2 and len(lines) == 1, f"{name}: {lines}"
    what = {"fifo": "not a regular file", "hard link": "a file with 2 hard links"}.get(
        planted, "a symbolic link"
    )
    inside = file.split("/", 1)[1]  # as named from the folder the command claims
    assert lines[0].startswith("error: ") and f"holds {inside}, {what}" in lines[0], lines[0]
    assert outside.read_text() == "the planter's target\n"
    assert not (tmp_path / "created-through-the-link").exists()
    assert _state(root) == before, f"{name} changed files"


def test_a_link_planted_in_the_keep_modules_folder_is_refused(
    folder: dict[str, Path], tmp_path: Path
) -> None:
    """A point's run folder is named by its key, so a link planted at that name (or anywhere in the
    folder) would have the sweep write the point's files elsewhere: refused before anything runs."""
    keep, victim = tmp_path / "kept", tmp_path / "victim"
    keep.mkdir()
    victim.mkdir()
    (keep / "point-0123456789abcdef").symlink_to(victim)
    args = [part.format(**{k: str(v) for k, v in folder.items()}) for part in SWEEP]
    result = runner.invoke(
        app, [*args, "--r", "2", "--epochs", "1", "--out", str(tmp_path / "sw"), "--keep-modules", str(keep)]
    )
    lines = [line for line in result.output.splitlines() if line.strip() and not line.startswith("warning:")]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "holds point-0123456789abcdef, a symbolic link" in lines[0]
    assert not any(victim.iterdir()) and not (tmp_path / "sw").exists()
