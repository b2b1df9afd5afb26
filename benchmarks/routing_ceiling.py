"""How far routing can go on a store: the routing goal against what the features and modules allow.

    python benchmarks/routing_ceiling.py [--data ../shared/data] [--cache cache] [--stores eurosat,cifar10,cifar100]

For each store of `benchmarks/routing.py` (same stores, same paper-preset run, refitted if its
folder is missing), after the last task:

- the goal: A_last >= RanPAC's and at least half of the entropy-to-oracle gap closed;
- the routers: `lda` (the best registered one), and RanPAC itself used as a router (the task of
  the class it predicts), each with its routing accuracy and the A_last it gives TOSCA;
- `misrouted yet right`: the share of test images sent to a wrong module that still get their
  class (so A_last is bounded by about the routing accuracy);
- an optimistic ceiling: one score per task from everything a router can read (the `lda` and
  RanPAC task posteriors, each module's entropy, energy, best own-class logit, own-class margin
  and own-class probability mass), combined with weights FITTED ON TEST LABELS (two folds: each
  half of the test set is routed by weights fitted on the other half). No honest router may do
  this; it bounds what a learned fusion of these signals could reach.

The figures say whether the goal is reachable with these features and modules.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from featcache.store import FeatureStore
from tosca_heads.applied.predict import RunPredictor
from tosca_heads.method.baseline_estimators import RanPAC
from tosca_heads.method.protocol import StreamConfig
from tosca_heads.method.recipe import PRESETS
from tosca_heads.routers import task_log_posterior
from tosca_heads.routers.scores import module_scores
from tosca_heads.running.group import fit_run

SIGNALS = ("lda", "ranpac", "entropy", "energy", "own_max", "own_margin", "own_mass")
RANPAC_TEMPERATURE = (
    0.05  # ridge outputs are near one-hot targets: a sharp softmax turns them into posteriors
)


@dataclass
class Routed:
    routing: float  # share routed to the true task's module
    a_last: float  # TOSCA's accuracy with that routing
    misrouted_right: float  # share of misrouted images that still get their class


@dataclass
class Ceiling:
    store: str
    entropy: Routed
    oracle: Routed
    lda: Routed
    ranpac_router: Routed
    fitted_on_test: Routed
    ranpac: float  # the RanPAC baseline's own A_last
    weights: np.ndarray  # the fitted signal weights (mean of the two folds)

    @property
    def goal(self) -> float:
        """The A_last of the goal: RanPAC's, and half the entropy-to-oracle gap."""
        return max(self.ranpac, (self.entropy.a_last + self.oracle.a_last) / 2)


def routed(chosen: np.ndarray, predictions: np.ndarray, labels: np.ndarray, true_task: np.ndarray) -> Routed:
    """predictions [M, n] (each module's class), chosen [n] module per image."""
    right = predictions[chosen, np.arange(len(labels))] == labels
    wrong = chosen != true_task
    return Routed(
        float((~wrong).mean()),
        float(right.mean()),
        float(right[wrong].mean()) if wrong.any() else 0.0,
    )


def task_signals(
    logits: torch.Tensor, lda: torch.Tensor, ranpac: torch.Tensor, class_task: np.ndarray
) -> torch.Tensor:
    """Per image and task, every signal in SIGNALS: logits [M, n, C] -> [n, M, len(SIGNALS)]."""
    tasks = logits.shape[0]
    own = torch.from_numpy(class_task).unsqueeze(0) == torch.arange(tasks).unsqueeze(1)  # [M, C]
    own = own.unsqueeze(1)
    entropy, _, energy = module_scores(logits)  # energy = -logsumexp
    own_logits = logits.masked_fill(~own, float("-inf"))
    other_max = logits.masked_fill(own, float("-inf")).amax(-1)
    own_max = own_logits.amax(-1)
    margin = torch.where(torch.isfinite(other_max), own_max - other_max, torch.zeros_like(own_max))
    mass = own_logits.logsumexp(-1) + energy  # log of the probability on the module's own classes
    owner = torch.from_numpy(class_task)
    signals = [
        task_log_posterior(lda, owner, tasks).T,
        task_log_posterior(F.log_softmax(ranpac / RANPAC_TEMPERATURE, -1), owner, tasks).T,
        entropy,
        energy,
        own_max,
        margin,
        mass,
    ]
    return torch.stack(signals, -1).transpose(0, 1).double()


def fit_task_scorer(signals: torch.Tensor, true_task: torch.Tensor) -> torch.Tensor:
    """A weight per signal (shared by all tasks), softmax over tasks, cross-entropy; [F]."""
    weight = torch.zeros(signals.shape[-1], dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([weight], max_iter=300, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = F.cross_entropy(signals @ weight, true_task)
        loss.backward()
        return loss

    optimizer.step(closure)
    return weight.detach()


def fitted_on_test(
    signals: torch.Tensor, true_task: np.ndarray, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Two-fold routing by signal weights fitted on the other half's test labels: ([n] choice, [F] weights)."""
    flat = signals.reshape(-1, signals.shape[-1])
    scaled = (signals - flat.mean(0)) / flat.std(0).clamp_min(1e-12)
    scaled = torch.nan_to_num(scaled)
    n = len(true_task)
    order = np.random.default_rng(seed).permutation(n)
    folds = (order[: n // 2], order[n // 2 :])
    chosen = np.empty(n, dtype=np.int64)
    weights = []
    target = torch.from_numpy(true_task)
    for fit, held in (folds, folds[::-1]):
        weight = fit_task_scorer(scaled[fit], target[fit])
        chosen[held] = (scaled[held] @ weight).argmax(-1).numpy()
        weights.append(weight.numpy())
    return chosen, np.mean(weights, 0)


@torch.no_grad()
def measure(
    name: str, store: FeatureStore, stream_cfg: StreamConfig, run_dir: Path, ranpac_projection_dim: int
) -> Ceiling:
    num_classes = int(store.identity["dataset"]["num_classes"])
    run = RunPredictor(run_dir, num_classes).load()
    stream = run.stream_
    tasks = run.tasks_
    train_x = torch.from_numpy(np.asarray(store.features("train"), dtype=np.float32))
    train_y = stream.remap(store.labels("train"))
    test_x = torch.from_numpy(np.asarray(store.features("test"), dtype=np.float32))
    test_y = stream.remap(store.labels("test"))
    seen = test_y < stream.seen_classes(tasks - 1)
    test_x, test_y = test_x[torch.from_numpy(seen)], test_y[seen]
    class_task = stream.task_of(np.arange(stream.seen_classes(tasks - 1)))
    true_task = stream.task_of(test_y)

    logits = run.module_logits(test_x)  # [M, n, C]
    entropy, predictions, _ = module_scores(logits)
    predictions = predictions.numpy()
    lda = run.statistics_.model().lda_log_posterior(test_x)

    ranpac = RanPAC(projection_dim=ranpac_projection_dim)
    for task in range(tasks):
        rows = stream.rows_of_task(train_y, task)
        ranpac.partial_fit(train_x[rows], train_y[rows])
    ranpac_scores = torch.from_numpy(ranpac.decision_function(test_x)).float()
    ranpac_class = ranpac_scores.argmax(-1).numpy()

    signals = task_signals(logits, lda, ranpac_scores, class_task)
    chosen, weights = fitted_on_test(signals, true_task)

    def report(choice: np.ndarray) -> Routed:
        return routed(np.asarray(choice), predictions, test_y, true_task)

    return Ceiling(
        store=name,
        entropy=report(entropy.argmin(0).numpy()),
        oracle=report(true_task),
        lda=report(task_log_posterior(lda, torch.from_numpy(class_task), tasks).argmax(-1).numpy()),
        ranpac_router=report(class_task[ranpac_class]),
        fitted_on_test=report(chosen),
        ranpac=float((ranpac_class == test_y).mean()),
        weights=weights,
    )


def table(results: list[Ceiling]) -> list[str]:
    lines = [
        "| store | goal A_last | RanPAC A_last | lda router | RanPAC as router | fitted on test labels (ceiling) | misrouted yet right |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in results:

        def cell(r: Routed) -> str:
            return f"{100 * r.a_last:.2f} ({100 * r.routing:.1f})"

        lines.append(
            f"| {c.store} | {100 * c.goal:.2f} | {100 * c.ranpac:.2f} | {cell(c.lda)} | {cell(c.ranpac_router)} | "
            f"{cell(c.fitted_on_test)} | {100 * c.lda.misrouted_right:.1f}% |"
        )
    lines.append("")
    lines.append("A_last in %, routing accuracy in brackets; fitted signal weights (standardised signals):")
    for c in results:
        pairs = ", ".join(f"{s} {w:+.2f}" for s, w in zip(SIGNALS, c.weights, strict=True))
        lines.append(f"- {c.store}: {pairs}")
    return lines


def main() -> None:
    from routing import STORES, argument_parser, store_for  # the routing benchmark's stores and runs

    args = argument_parser(__doc__).parse_args()
    results = []
    for name in args.stores:
        _, per_class, init_cls, increment = STORES[name]
        store = store_for(name, args.data, args.cache)
        stream = StreamConfig(init_cls, increment)
        run_dir = args.runs / f"{name}-{per_class}"
        if not (run_dir / "metrics.json").is_file():
            fit_run(store, stream, PRESETS["paper"], None, run_dir, device="cpu")
        start = time.perf_counter()
        results.append(measure(name, store, stream, run_dir, args.ranpac_projection_dim))
        print(f"{name}: {time.perf_counter() - start:.1f} s", flush=True)
    print("\n".join(table(results)))


if __name__ == "__main__":
    main()
