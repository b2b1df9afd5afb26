"""Evaluation computes each figure once and the same way: module outputs written straight into
the cache equal fresh ones, and the scores of a row (entropy, argmax, energy) are the same bits
whatever rows are scored with it, so scoring a block at a time moves no routing decision."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tosca_heads.engine import native
from tosca_heads.engine.evaluate import ModuleScorer, Snapshot
from tosca_heads.engine.layout import ParamLayout
from tosca_heads.engine.outputs import module_outputs
from tosca_heads.method.luca import new_module
from tosca_heads.routers.scores import module_scores

pytestmark = pytest.mark.cpu_reference


@pytest.mark.parametrize(("rows", "classes"), [(1, 2), (700, 5), (1300, 33), (2100, 100)])
def test_a_rows_scores_do_not_depend_on_the_rows_scored_with_it(rows: int, classes: int) -> None:
    gen = torch.Generator().manual_seed(rows)
    logits = 9.0 * torch.randn(2, rows, classes, generator=gen)
    whole = module_scores(logits)
    for block in (64, 512):
        parts = [module_scores(logits[:, lo : lo + block]) for lo in range(0, rows, block)]
        for i in range(3):
            assert torch.equal(torch.cat([p[i] for p in parts], dim=1), whole[i])


@pytest.mark.parametrize("groups", [1, 3])
def test_scores_block_by_block_are_the_scores_of_whole_logits(groups: int) -> None:
    """ModuleScorer.scores against the logits of each module computed at once and scored at once."""
    d, rows, classes = 24, 1100, 7
    layout = ParamLayout(d, 4, 4, "tosca")
    torch.manual_seed(0)
    modules = tuple(
        torch.stack([layout.pack(new_module(d, 4, 4, "tosca", t).state_dict(), 4, 4) for _ in range(groups)])
        for t in range(2)
    )
    gen = torch.Generator().manual_seed(1)
    features = torch.randn(rows, d, generator=gen)
    state = Snapshot(layout, modules, torch.randn(groups, classes, d, generator=gen), torch.rand(groups) + 1)
    scorer = ModuleScorer(features, torch.device("cpu"))
    entropy, predictions, energy = scorer.scores(state, 2, rows)
    w_unit = F.normalize(state.weight, dim=-1).transpose(1, 2)
    for i in range(2):
        units = module_outputs(layout, modules[i], features, normalize=True)
        logits = scorer._logits(units, w_unit) * state.sigma.view(-1, 1, 1)
        expected = module_scores(logits)
        assert torch.equal(entropy[:, i], expected[0])
        assert torch.equal(predictions[:, i], expected[1])
        assert torch.equal(energy[:, i], expected[2])


@pytest.mark.skipif(native.compiler() is None, reason="no C compiler here")
def test_module_outputs_written_into_a_cache_are_the_fresh_outputs() -> None:
    d, groups = 40, 3
    layout = ParamLayout(d, 5, 3, "tosca_r")
    torch.manual_seed(0)
    modules = torch.stack(
        [layout.pack(new_module(d, 5, 3, "tosca_r", 1).state_dict(), 5, 3) for _ in range(groups)]
    )
    x = torch.randn(150, d, generator=torch.Generator().manual_seed(2))
    cache = torch.full((groups, 400, d), float("nan"))
    module_outputs(layout, modules, x[:100], True, cache[:, 0:100])
    module_outputs(layout, modules, x[100:], True, cache[:, 100:150])
    assert torch.equal(cache[:, :150], module_outputs(layout, modules, x, normalize=True))
    assert torch.isnan(cache[:, 150:]).all()


def test_evaluation_grows_as_tasks_times_test_rows_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(issue 48, point 3) After task t, evaluation scores each of the t + 1 modules on the n_t test
    rows seen once (logits of (t + 1) x n_t rows, each over the classes seen), and a frozen module's
    outputs are computed once per row (kept across stages): a module forward over the new rows only.
    Nothing in it grows faster than tasks x test rows seen."""
    from support.stores import synthetic_store

    from tosca_heads.engine import evaluate
    from tosca_heads.method.protocol import StreamConfig
    from tosca_heads.method.recipe import TrainConfig
    from tosca_heads.running.group import fit_run

    store = synthetic_store(tmp_path / "s.zarr", classes=8, per_class=10, test_per_class=7, dim=16)
    stage, forwarded, scored = [-1], [0] * 4, [0] * 4
    outputs, logits, evaluate_stage = (
        evaluate.module_outputs,
        ModuleScorer._logits,
        evaluate.StageEvaluator.evaluate,
    )

    def counted_outputs(layout: ParamLayout, flat: torch.Tensor, rows: torch.Tensor, *args: object) -> object:
        forwarded[stage[0]] += rows.shape[0]
        return outputs(layout, flat, rows, *args)

    def counted_logits(self: ModuleScorer, units: torch.Tensor, w_unit: torch.Tensor) -> torch.Tensor:
        scored[stage[0]] += units.shape[0] * units.shape[1]  # configurations x rows
        return logits(self, units, w_unit)

    def at_stage(self: evaluate.StageEvaluator, task: int, state: Snapshot) -> object:
        stage[0] = task
        return evaluate_stage(self, task, state)

    monkeypatch.setattr(evaluate, "module_outputs", counted_outputs)
    monkeypatch.setattr(ModuleScorer, "_logits", counted_logits)
    monkeypatch.setattr(evaluate.StageEvaluator, "evaluate", at_stage)
    train = TrainConfig(epochs=1, batch_size=8, r=4, s=4)
    fit_run(
        store,
        StreamConfig(2, 2),
        train,
        None,
        tmp_path / "run",
        device="cpu",
        overlap=False,
        write_outputs=False,
    )
    seen = [14 * (t + 1) for t in range(4)]  # 7 test rows a class, 2 classes a task
    assert scored == [(t + 1) * n for t, n in enumerate(seen)]
    assert forwarded == [n + t * (n - (seen[t - 1] if t else 0)) for t, n in enumerate(seen)]
