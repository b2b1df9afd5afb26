"""The Python API: every public function's docstring example runs (doctests on tiny data), the
packages re-export it without loading it at import, and plug-ins registered from outside the
package show up in the commands' tables and in the Python results."""

from __future__ import annotations

import doctest
import inspect
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support import ROOT
from support.images import make_image_tree
from support.stores import synthetic_store

import featcache
import tosca_heads
from featcache import stage1_api as stage1
from tosca_foundation import errors as featcache_errors
from tosca_heads import stage2_api as stage2


@pytest.mark.heavy
@pytest.mark.parametrize("module", [stage1, stage2], ids=["featcache.stage1_api", "tosca_heads.stage2_api"])
def test_every_public_function_has_an_example_that_runs(
    module: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "scratch").mkdir()
    globs = {
        "STORE": synthetic_store(tmp_path / "store.zarr", classes=6, per_class=16, test_per_class=8).path,
        "IMAGES": make_image_tree(tmp_path / "images", classes=3, train=4, test=2),
        "TMP": tmp_path / "scratch",
    }
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    functions = [n for n in module.__all__ if inspect.isfunction(getattr(module, n))]
    without = []
    for name in functions:
        obj = getattr(module, name)
        found = finder.find(obj, name, module=inspect.getmodule(obj), extraglobs=globs)
        tests = [t for t in found if t.examples]
        if not tests:
            without.append(name)
        for test in tests:
            runner.run(test)
    assert functions and not without, f"public functions without an example: {without}"
    assert runner.summarize(verbose=False).failed == 0


def test_the_packages_reexport_the_api_without_loading_it() -> None:
    code = (
        "import sys, featcache, tosca_heads\n"
        "assert 'featcache.stage1_api' not in sys.modules and 'tosca_heads.stage2_api' not in sys.modules\n"
        "assert callable(featcache.open_store) and callable(tosca_heads.fit)\n"
        "assert 'timm' not in sys.modules\n"
        "print(sorted(featcache.API), sorted(tosca_heads.API))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert set(featcache.API) <= set(dir(featcache)) and set(tosca_heads.API) <= set(dir(tosca_heads))
    with pytest.raises(AttributeError):
        featcache.no_such_thing  # noqa: B018


def test_protocol_warnings_point_at_the_line_that_asked(tmp_path: Path) -> None:
    """A figure that will mean little is a ProtocolWarning from the user's own line (not from deep
    in tosca), once per thing said, for each face that fits."""
    store = synthetic_store(tmp_path / "s.zarr", classes=6)
    calls = {
        "fit": lambda: tosca_heads.fit(
            store.path, write=False, init_cls=2, increment=2, epochs=1, batch_size=8
        ),
        "baselines": lambda: tosca_heads.baselines(
            store.path, ["simplecil"], init_cls=2, increment=2, with_tosca=False, out=tmp_path / "b"
        ),
    }
    for name, call in calls.items():
        with pytest.warns(tosca_heads.ProtocolWarning) as caught:
            call()
        assert {w.filename for w in caught} == {__file__}, name
        assert "fewer than" in str(caught[0].message)


PLUGIN = '''
import numpy as np
import torch

from tosca_heads import Router, StageView, register_baseline, register_router


@register_router
class FirstModule(Router):
    name = "first_module"
    summary = "always task 0's module (a plug-in)"

    def route(self, view: StageView) -> torch.Tensor:
        return torch.zeros(view.entropy.shape[0], view.entropy.shape[2], dtype=torch.long)


@register_baseline("majority")
class Majority:
    """Always the most frequent class seen so far (a plug-in)."""

    incremental = True

    def __init__(self, device="cpu"):
        self.device = device
        self.counts_ = np.zeros(0, dtype=np.int64)

    def partial_fit(self, features, labels):
        labels = np.asarray(labels.cpu() if hasattr(labels, "cpu") else labels)
        grown = np.zeros(max(len(self.counts_), int(labels.max()) + 1), dtype=np.int64)
        grown[: len(self.counts_)] = self.counts_
        np.add.at(grown, labels, 1)
        self.counts_ = grown
        return self

    def predict(self, features):
        return np.full(len(features), int(self.counts_.argmax()))

    def num_parameters(self):
        return len(self.counts_)
'''


@pytest.mark.heavy
def test_plugins_show_up_in_the_commands_and_in_python(tmp_path: Path) -> None:
    (tmp_path / "my_plugins.py").write_text(textwrap.dedent(PLUGIN))
    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)]),
        "TOSCA_PLUGINS": "my_plugins",
    }
    tosca = [sys.executable, "-c", "from tosca_cli.app import main; main()"]
    split = ["--init-cls", "2", "--increment", "2", "--device", "cpu"]
    run = tmp_path / "run"
    fit = subprocess.run(
        [*tosca, "fit", "--store", str(store.path), "--run", str(run), "--epochs", "1", *split],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert fit.returncode == 0, fit.stderr
    assert "first_module" in fit.stdout
    routers = subprocess.run(
        [*tosca, "routers", str(run)], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert routers.returncode == 0 and "first_module" in routers.stdout and "a plug-in" in routers.stdout
    out = tmp_path / "baselines"
    base = subprocess.run(
        [
            *tosca,
            "baselines",
            "--store",
            str(store.path),
            "--run",
            str(run),
            "--methods",
            "simplecil,majority",
            "--out",
            str(out),
            *split,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert base.returncode == 0, base.stderr
    assert "majority" in base.stdout and (out / "majority" / "metrics.json").exists()
    code = textwrap.dedent(f"""
        import my_plugins, tosca_heads
        frame = tosca_heads.baselines({str(store.path)!r}, ["majority"], init_cls=2, increment=2, with_tosca=False)
        result = tosca_heads.fit({str(store.path)!r}, init_cls=2, increment=2, epochs=1)
        print(frame["method"].tolist(), "first_module" in result.metrics()["routers"])
    """)
    python = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert python.returncode == 0, python.stderr
    assert python.stdout.strip() == "['majority'] True"
    broken = {**env, "TOSCA_PLUGINS": "no_such_plugin"}
    failed = subprocess.run(
        [*tosca, "routers", str(run)], cwd=tmp_path, env=broken, capture_output=True, text=True
    )
    assert failed.returncode == 2 and failed.stderr.strip().startswith(
        "error: plug-in 'no_such_plugin' failed to import"
    )


@pytest.mark.parametrize(
    ("script", "said"),
    [("sweep_and_plot.py", "chosen on validation under entropy"), ("custom_router.py", "confident")],
)
@pytest.mark.heavy
def test_the_examples_run_on_tiny_data(tmp_path: Path, script: str, said: str) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=6, per_class=16)
    args = ["--store", str(store.path), "--epochs", "2"]
    if script == "sweep_and_plot.py":
        args += ["--out", str(tmp_path / "sweep"), "--r", "2,4", "--l1", "0,5e-4"]
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), *args],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert said in done.stdout
    if script == "sweep_and_plot.py":
        assert (tmp_path / "sweep" / "a_last_by_r.png").stat().st_size > 0


def test_the_api_functions_are_not_hidden_by_modules_of_the_same_name() -> None:
    import types

    import featcache
    import featcache.embedding
    import featcache.extraction

    assert not isinstance(featcache.extract, types.ModuleType) and callable(featcache.extract)
    assert not isinstance(featcache.embed, types.ModuleType) and callable(featcache.embed)


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"overwrite": "false"}, "overwrite='false' must be True or False"),
        ({"random_init": "False"}, "random_init='False' must be True or False"),
        ({"chunk_size": True}, "chunk_size=True must be an integer"),
        ({"views": "1"}, "views='1' must be an integer"),
        ({"views": 1.0}, "views=1.0 must be an integer"),
        ({"colour": 3}, "extract.. got an unknown keyword argument 'colour'"),
    ],
)
def test_extract_options_of_the_wrong_type_are_refused(tmp_path: Path, options: dict, said: str) -> None:
    with pytest.raises(TypeError, match=said):
        stage1.extract("test_efficientnet", "imagefolder", tmp_path, store=tmp_path / "s.zarr", **options)
    assert not (tmp_path / "s.zarr").exists()


def test_embed_takes_one_path_as_a_list_of_one_and_refuses_an_empty_one(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "s.zarr")
    with pytest.raises(ValueError, match="empty"):
        stage1.embed(store.path, [""])
    with pytest.raises(featcache_errors.UserError, match=f"no such image or folder: {tmp_path / 'none'}"):
        stage1.embed(store.path, str(tmp_path / "none"))


def test_a_sweep_grid_value_that_is_not_a_list_is_quoted_and_an_empty_list_refused(tmp_path: Path) -> None:
    store = synthetic_store(tmp_path / "s.zarr", classes=4).path
    for grid, said in (
        ({"r": "48"}, r"grid entry 'r' must be a list of values, got '48'"),  # not swept as 4 and 8
        ({"r": 48}, r"grid entry 'r' must be a list of values, got 48"),
        ({"r": []}, r"grid entry 'r' is an empty list: give at least one value"),
    ):
        with pytest.raises(featcache_errors.UserError, match=said):
            stage2.sweep(store, grid, tmp_path / "sweep", init_cls=2, increment=2, epochs=1)
    assert not (tmp_path / "sweep").exists()


def test_features_that_are_not_real_numbers_are_refused_by_predict(tmp_path: Path) -> None:
    import numpy as np

    store = synthetic_store(tmp_path / "s.zarr", classes=4)
    stage2.fit(store.path, run=tmp_path / "run", init_cls=2, increment=2, epochs=1, batch_size=8)
    x = store.features("test")[:3]
    assert stage2.predict(tmp_path / "run", x, router="lda").classes.shape == (3,)
    for bad in (x.astype(np.complex64), x.astype(str)):
        with pytest.raises(
            featcache_errors.UserError, match=f"features of dtype {bad.dtype} cannot be classified"
        ):
            stage2.predict(tmp_path / "run", bad, router="lda")
