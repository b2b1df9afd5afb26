"""What a plan says it will cost (issue 35): the arithmetic measured here, and what is no arithmetic
(the command's start, the workers', each worker's first run, the tables) as its quiet CPU time over
the share of a core this process gets, so a busy machine's plan is as busy as the machine."""

from __future__ import annotations

import pytest

from tosca_foundation import time_estimates as est
from tosca_heads.running import cost_models as costs


def test_what_is_no_arithmetic_takes_longer_on_a_busy_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(est, "usable_cores", lambda: 2)
    works = {"a": 40.0, "b": 30.0, "c": 20.0}
    plans = {}
    for share in (1.0, 0.25):
        monkeypatch.setattr(est, "cpu_share", lambda share=share: share)
        plans[share] = est.plan_works(works, {"ranpac": 100.0}, workers=2)
    quiet, busy = plans[1.0], plans[0.25]
    assert quiet.parts["command"] == est.COMMAND_CPU and busy.parts["command"] == 4 * est.COMMAND_CPU
    assert quiet.parts["start-up"] == est.WORKER_START_CPU + est.FIRST_RUN_CPU
    assert busy.parts["finish"] == 4 * (est.FINISH_CPU + est.CLUSTER_CLOSE_CPU)  # a cluster of 2 closes
    assert quiet.parts["train"] == busy.parts["train"] == 90.0 and quiet.parts["baselines"] == 100.0
    # the works shared by 2 workers, longest first: 100 | 40 + 30 + 20, each plus its dispatch
    shared = max(100 + est.PER_WORK_SECONDS, 90 + 3 * est.PER_WORK_SECONDS)
    others = sum(v for k, v in busy.parts.items() if k not in ("train", "baselines"))
    assert busy.wall == pytest.approx(shared + others)
    assert busy.shared == pytest.approx(shared)
    assert any("25% of a core" in line for line in busy.how) and not quiet.how


def test_one_worker_starts_no_cluster_and_nothing_planned_costs_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(est, "cpu_share", lambda: 1.0)
    alone = est.plan_works({"a": 10.0}, {}, workers=1)
    assert alone.parts["start-up"] == est.FIRST_RUN_CPU  # no worker to start: its first run only
    assert alone.parts["finish"] == est.FINISH_CPU  # and no cluster to close
    assert est.plan_works({}, {}, workers=2).wall == 0.0


def test_the_works_shared_by_the_workers_are_said_once_as_planned(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep and a suite say what their works are; the plan says what sharing makes of them, from
    the same figure its wall time counts."""
    monkeypatch.setattr(est, "cpu_share", lambda: 1.0)
    plan = est.plan_works({"a": 120.0, "b": 60.0}, {}, workers=2, what="2 point(s), 3.0 min of training")
    assert plan.shared == 120.0 + est.PER_WORK_SECONDS
    assert plan.how == [f"2 point(s), 3.0 min of training, shared by 2 worker(s): {plan.shared / 60:.1f} min"]


def test_the_share_of_a_core_is_a_share() -> None:
    est.cpu_share.cache_clear()
    assert 0.05 <= est.cpu_share() <= 1.0


def test_ranpac_is_planned_at_the_m_it_runs_with(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parameters a suite or `baselines` hands RanPAC (`baseline_registry.arguments`) set the M it
    is planned at: a plan read M = 10,000 whatever --ranpac-projection-dim said (with fewer rows than either M, the smaller form's time grows about as M)."""
    from tosca_heads.method.baseline_registry import arguments

    monkeypatch.setattr(costs, "flops_per_second", lambda dtype: 1e10)
    shape = costs.TaskShape((480,) * 5, (120,) * 5, 1280, 10)
    small, paper = (
        costs.baseline_seconds("ranpac", shape, arguments("ranpac", {"ranpac_projection_dim": m}, seed=0))
        for m in (4000, 10_000)
    )
    # 2,400 rows < M: the n x n form, whose products grow with M and whose solve does not
    assert 10_000 / 4000 * 0.8 < paper / small < (10_000 / 4000) ** 2
    assert small == pytest.approx(costs.baseline_seconds("ranpac", shape, {"projection_dim": 4000}))
