"""Routers: entropy routing on confident modules, how batch routing differs, and the frozen-feature
routers' statistics (kept task by task, never samples)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tosca_foundation.errors import UserError
from tosca_heads.method.class_statistics import ClassStatistics, _class_moments, _merge
from tosca_heads.routers import (
    ROUTERS,
    ReferenceView,
    resolve_routers,
    route_batches,
)
from tosca_heads.routers.scores import predict


def _view(entropy: torch.Tensor, true_task: torch.Tensor, seed: int = 0, **extra: object) -> ReferenceView:
    n = entropy.shape[-1]
    fields = {
        "entropy": entropy,
        "energy": entropy,
        "frozen": None,
        "features": torch.zeros(n, 2),
        "class_task": torch.arange(int(true_task.max()) + 1),
        "true_task": true_task,
        "class_ordered": torch.arange(n),
        "shuffled": torch.from_numpy(np.random.default_rng(seed).permutation(n)),
    }
    return ReferenceView(**{**fields, **extra})


def _constructed(n_per_task: int = 6, tasks: int = 3) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Module i is confident (low entropy) exactly on task i's samples and right there; one configuration."""
    true_task = torch.arange(tasks).repeat_interleave(n_per_task)
    labels = true_task * 2  # class 2t belongs to task t
    entropy = torch.full((1, tasks, len(labels)), 2.0)
    predictions = torch.full((1, tasks, len(labels)), -1)
    for i in range(tasks):
        entropy[0, i, true_task == i] = 0.1
        predictions[0, i, true_task == i] = labels[true_task == i]
    return entropy, predictions, true_task


def test_entropy_routing_routes_every_sample_right() -> None:
    entropy, predictions, true_task = _constructed()
    view = _view(entropy, true_task)
    chosen = ROUTERS["entropy"].route(view)
    assert torch.equal(chosen[0], true_task)
    assert torch.equal(predict(predictions, chosen)[0], true_task * 2)
    assert torch.equal(ROUTERS["oracle"].route(view)[0], true_task)


def test_batch_routing_differs_from_sample_routing_on_mixed_batches() -> None:
    entropy, _, true_task = _constructed(n_per_task=40)
    view = _view(entropy, true_task)
    sample = ROUTERS["entropy"].route(view)[0]
    ordered = ROUTERS["batch"].route(view)[0]
    shuffled = ROUTERS["batch_shuffled"].route(view)[0]
    # ordered batches of 48 over 3 x 40 class-sorted samples: batches 2 and 3 mix two tasks,
    # so one module serves both and some samples go to the wrong module
    assert (ordered != sample).any() and (shuffled != sample).sum() > (ordered != sample).sum()
    assert (ordered == true_task).float().mean() > (shuffled == true_task).float().mean()


def test_batch_routing_is_the_reference_loop_for_every_configuration() -> None:
    """The vectorised batch means (last batch partial) pick what a plain loop over batches picks."""
    rng = np.random.default_rng(3)
    entropy = torch.from_numpy(rng.random((3, 4, 101)).astype(np.float32))
    order = torch.from_numpy(rng.permutation(101))
    chosen = route_batches(entropy, order, batch_size=48)
    for g in range(3):
        expected = np.empty(101, dtype=np.int64)
        for start in range(0, 101, 48):
            members = order[start : start + 48].numpy()
            expected[members] = entropy[g][:, members].numpy().mean(1).argmin()
        np.testing.assert_array_equal(chosen[g].numpy(), expected)


def _gaussian_tasks(tasks: int = 3, per_class: int = 60, dim: int = 8, seed: int = 0):
    """Two classes per task, well separated Gaussians, non-negative (so the Tukey transform applies)."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(2, 6, size=(2 * tasks, dim))
    labels = np.repeat(np.arange(2 * tasks), per_class)
    x = np.clip(centres[labels] + 0.4 * rng.normal(size=(len(labels), dim)), 0, None).astype(np.float32)
    return torch.from_numpy(x), labels


def test_class_statistics_are_sufficient_statistics_built_task_by_task() -> None:
    """Means and the within-class scatter after three tasks equal the direct computation over all the
    data; the state holds sums and one d x d matrix, whatever the number of samples."""
    x, labels = _gaussian_tasks()
    stats = ClassStatistics(8)
    for t in range(3):
        rows = np.flatnonzero((labels >= 2 * t) & (labels < 2 * t + 2))
        stats.partial_fit(x[rows], labels[rows], range(2 * t, 2 * t + 2))
    assert stats.kind_ == "tukey" and len(stats.shrinkage_) == 3
    t = x.sqrt().double()
    means = torch.stack([t[torch.from_numpy(labels == c)].mean(0) for c in range(6)])
    centred = t - means[torch.from_numpy(labels)]
    torch.testing.assert_close(stats.scatter_, centred.T @ centred)
    torch.testing.assert_close(stats.tsums_ / stats.counts_[:, None], means)
    assert {k: tuple(v.shape) for k, v in stats.state_dict().items() if v.dim() > 1} == {
        "sums": (6, 8),
        "tsums": (6, 8),
        "scatter": (8, 8),
    }
    model = stats.model()
    posterior = model.lda_log_posterior(x)
    assert float((posterior.argmax(-1) == torch.from_numpy(labels)).float().mean()) > 0.95
    assert float((model.ncm_scores(x).argmax(-1) == torch.from_numpy(labels)).float().mean()) > 0.9
    with pytest.raises(ValueError, match="in order"):
        stats.partial_fit(x[:4], labels[:4], range(0, 2))


def test_moments_of_two_parts_merge_into_the_moments_of_all() -> None:
    """A task's held-out fifth and the rest are summarised once each and merged (no second pass over
    the rows); a class with no row in one part merges too."""
    x, labels = _gaussian_tasks()
    rows = np.flatnonzero(labels < 3)
    x, labels = x[rows], labels[rows]
    part = np.zeros(len(labels), dtype=bool)
    part[::5] = True
    part[labels == 2] = False  # class 2 only in the second part
    whole = _class_moments(x, labels, range(3), "tukey")
    merged = _merge(
        _class_moments(x[part], labels[part], range(3), "tukey"),
        _class_moments(x[~part], labels[~part], range(3), "tukey"),
    )
    for got, want in zip(merged, whole, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-9)


def test_frozen_feature_routers_route_by_the_task_of_the_class() -> None:
    x, labels = _gaussian_tasks()
    stats = ClassStatistics(8)
    for t in range(3):
        rows = np.flatnonzero((labels >= 2 * t) & (labels < 2 * t + 2))
        stats.partial_fit(x[rows], labels[rows], range(2 * t, 2 * t + 2))
    true_task = torch.from_numpy(labels // 2)
    confused = torch.rand(2, 3, len(labels), generator=torch.Generator().manual_seed(0))  # useless modules
    view = _view(
        confused, true_task, frozen=stats.model(), features=x, class_task=torch.tensor([0, 0, 1, 1, 2, 2])
    )
    for name in ("ncm", "lda", "fusion"):
        chosen = ROUTERS[name].route(view)
        assert chosen.shape == (2, len(labels))
        assert float((chosen == true_task).float().mean()) > 0.9, name
    assert float((ROUTERS["entropy"].route(view) == true_task).float().mean()) < 0.5


def test_router_names_resolve_with_the_old_alias() -> None:
    assert resolve_routers(None) == [n for n in ROUTERS if not ROUTERS[n].on_request]
    assert resolve_routers("all") == list(ROUTERS)
    assert resolve_routers("sample, lda") == ["entropy", "lda"]
    with pytest.raises(UserError, match="unknown --router 'knn'"):
        resolve_routers("lda,knn")
    assert not ROUTERS["oracle"].honest and not ROUTERS["batch"].honest and ROUTERS["lda"].honest


def test_routers_command_lists_every_router_beside_the_baselines(tmp_path: Path) -> None:
    import json

    from support.stores import synthetic_store
    from typer.testing import CliRunner

    from cli import app

    runner = CliRunner()
    store = synthetic_store(tmp_path / "s.zarr", classes=6, views=2, spread=1.5)
    stream = ["--init-cls", "2", "--increment", "2", "--device", "cpu"]
    run = tmp_path / "runs" / "run"
    fit = runner.invoke(app, ["fit", "--store", str(store.path), *stream, "--epochs", "2", "--run", str(run)])
    assert fit.exit_code == 0, fit.output
    base = runner.invoke(
        app,
        [
            "baselines",
            "--store",
            str(store.path),
            *stream,
            "--no-tosca",
            "--methods",
            "simplecil",
            "--out",
            str(tmp_path / "runs" / "b"),
        ],
    )
    assert base.exit_code == 0, base.output
    result = runner.invoke(app, ["routers", str(run), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    metrics = json.loads((run / "metrics.json").read_text())
    by_name = {r["router"]: r for r in rows}
    computed = [n for n in ROUTERS if not ROUTERS[n].on_request]  # an on-request router: where named
    assert set(computed) | {"simplecil"} == set(by_name)
    for name in computed:
        assert by_name[name]["A_last"] == pytest.approx(100 * metrics["routers"][name]["A_last"])
        assert by_name[name]["routing_accuracy"] == pytest.approx(
            100 * metrics["routers"][name]["routing_accuracy"]
        )
    assert by_name["simplecil"]["kind"] == "baseline" and by_name["simplecil"]["routing_accuracy"] is None
    table = runner.invoke(app, ["routers", str(run)])
    assert table.exit_code == 0 and "the best honest router of this run" in table.output
    missing = runner.invoke(app, ["routers", str(tmp_path)])
    assert missing.exit_code == 2 and "not a run directory" in missing.output


def test_runs_that_write_nothing_share_the_router_statistics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sweep points (runs that write nothing) of one store and task split build the routers'
    statistics once per process, and score exactly as a run that builds its own; a store rewritten
    in place with the same identity but other features, or features from another source, get
    their own."""
    from support.stores import synthetic_store

    from tosca_heads.method.class_statistics import ClassStatistics
    from tosca_heads.method.features import CachedFeatures
    from tosca_heads.method.protocol import StreamConfig
    from tosca_heads.method.recipe import TrainConfig
    from tosca_heads.requests.plan import FitPlan
    from tosca_heads.running.group import fit_group, fit_run

    calls: list[int] = []
    original = ClassStatistics.partial_fit

    def counted(self, features, labels, classes):  # type: ignore[no-untyped-def]
        calls.append(classes.start)
        return original(self, features, labels, classes)

    monkeypatch.setattr(ClassStatistics, "partial_fit", counted)
    store = synthetic_store(tmp_path / "a.zarr", classes=6, per_class=12, spread=2.0)
    stream = StreamConfig(2, 2)
    points = [TrainConfig(r=4, s=4, epochs=2, batch_size=8, seed=s) for s in (0, 1)]
    first = fit_group(FitPlan.build(store, stream, trains=points[:1]), write_outputs=False)[0]
    assert calls == [0, 2, 4]  # three tasks, each added once
    second = fit_group(FitPlan.build(store, stream, trains=points[1:]), write_outputs=False)[0]
    assert calls == [0, 2, 4]  # the second point reused them
    written = fit_run(store, stream, points[1], None, tmp_path / "run")
    assert calls == [0, 2, 4] * 2  # a run that writes files builds (and saves) its own
    for name in ("ncm", "lda", "fusion"):
        assert second.metrics()["routers"][name] == written.metrics()["routers"][name]
    # ncm and lda route by the frozen features alone: the same tasks for either point
    for name in ("ncm", "lda"):
        routing = first.metrics()["routers"][name]["routing_accuracy_t"]
        assert routing == second.metrics()["routers"][name]["routing_accuracy_t"]
    # the same place and identity, other features (rewritten in place): its own statistics
    import shutil

    shutil.rmtree(tmp_path / "a.zarr")
    rewritten = synthetic_store(tmp_path / "a.zarr", classes=6, per_class=12, spread=0.5)
    assert rewritten.fingerprint == store.fingerprint
    fit_group(FitPlan.build(rewritten, stream, trains=points[:1]), write_outputs=False)
    assert calls == [0, 2, 4] * 3
    # features from another source than the store's own cache are never shared
    foreign = CachedFeatures(synthetic_store(tmp_path / "c.zarr", classes=6, per_class=12, spread=1.0))
    fit_group(FitPlan.build(rewritten, stream, trains=points[:1]), source=foreign, write_outputs=False)
    fit_group(FitPlan.build(rewritten, stream, trains=points[:1]), source=foreign, write_outputs=False)
    assert calls == [0, 2, 4] * 5
