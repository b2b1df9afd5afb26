"""The routers: each picks, for every test sample and configuration, the task module that answers.

Every router is one short class with the same interface, registered by name. Honesty is
structural, not declared: an honest router is handed a `StageView`, which holds only what an
exemplar-free learner keeps (each module's outputs on the sample itself, and per-class
statistics of the frozen features, `statistics.ClassStatistics`); reading anything else from it
is an error, and a router that tries is refused in one line. Only routers registered as
references (`reference = True`) get a `ReferenceView`, which adds what no deployed model has:
`oracle` is told the task, and the `batch` routers let the other test samples of a class-sorted
(or shuffled) batch vote, as the reference code does. References are reported beside the honest
routers, never as honest results, and are never chosen as a default.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from tosca_foundation.arguments import check_types
from tosca_foundation.errors import UserError, UserValueError
from tosca_foundation.registry import Registry, reference_words
from tosca_heads.method.protocol import REFERENCE_BATCH

if TYPE_CHECKING:  # torch is imported where a router runs: listing them (`tosca list`) needs none
    import torch

    from tosca_heads.method.class_statistics import FrozenModel

REFERENCE_FIELDS = ("true_task", "class_ordered", "shuffled")


class ReferenceOnly(AttributeError):
    """An honest router read a field only reference routers see."""


@dataclass(frozen=True)
class StageView:
    """What an honest router sees after a task, for G configurations, M modules and n samples.

    - `entropy` [G, M, n]: the entropy of each module's softmax over all seen classes;
    - `energy` [G, M, n]: -logsumexp of each module's logits;
    - `frozen`: the frozen-feature class statistics' classifiers (`FrozenModel`: `ncm_scores(x)`
      [n, C], `lda_log_posterior(x)` [n, C]), or None when the run keeps none;
    - `features` [n, d]: the samples' frozen features;
    - `class_task` [C]: the task of each incremental class seen so far.
    """

    entropy: torch.Tensor
    energy: torch.Tensor
    frozen: FrozenModel | None
    features: torch.Tensor
    class_task: torch.Tensor

    def __getattr__(self, name: str) -> object:
        if name in REFERENCE_FIELDS:
            raise ReferenceOnly(name)
        raise AttributeError(f"{type(self).__name__!r} has no attribute {name!r}")

    @property
    def groups(self) -> int:
        return int(self.entropy.shape[0])

    @property
    def modules(self) -> int:
        return int(self.entropy.shape[1])

    def task_log_posterior(self, class_log_posterior: torch.Tensor) -> torch.Tensor:
        """log p(task | x) over this view's modules: [n, C] -> [n, M]."""
        return task_log_posterior(class_log_posterior, self.class_task, self.modules)

    @functools.cached_property
    def lda_task_log_posterior(self) -> torch.Tensor:
        """log p(task | frozen feature) under `lda`'s class Gaussians: [n, M], computed once per
        view (`lda` and `fusion` both read it)."""
        return self.task_log_posterior(self.frozen.lda_log_posterior(self.features))

    def for_every_configuration(self, chosen: torch.Tensor) -> torch.Tensor:
        """A choice shared by all configurations (frozen-feature routers): [n] -> [G, n]."""
        return chosen.to(self.entropy.device).expand(self.groups, -1)


@dataclass(frozen=True)
class ReferenceView(StageView):
    """What a reference router sees besides: `true_task` [n] (each sample's task),
    `class_ordered` [n] (sample positions in the reference code's class-by-class test order) and
    `shuffled` [n] (sample positions in a seeded shuffled order)."""

    true_task: torch.Tensor = None  # type: ignore[assignment]
    class_ordered: torch.Tensor = None  # type: ignore[assignment]
    shuffled: torch.Tensor = None  # type: ignore[assignment]

    def honest(self) -> StageView:
        """The same stage without what only references see (what every honest router is handed);
        one per view, so what honest routers compute from it (`lda_task_log_posterior`) is shared."""
        if "_honest" not in self.__dict__:
            part = StageView(**{f.name: getattr(self, f.name) for f in fields(StageView)})
            object.__setattr__(self, "_honest", part)
        return self.__dict__["_honest"]


def task_log_posterior(
    class_log_posterior: torch.Tensor, class_task: torch.Tensor, tasks: int
) -> torch.Tensor:
    """log p(task | x) = logsumexp of its classes' log p(c | x): [n, C] -> [n, tasks]."""
    import torch

    class_task = class_task.to(class_log_posterior.device)
    return torch.stack([class_log_posterior[:, class_task == t].logsumexp(-1) for t in range(tasks)], 1)


class Router:
    """A router: `route(view)` gives the module index per configuration and sample, [G, n].
    `reference = True` (or words saying why, "told the task") registers it as a reference (handed
    a `ReferenceView`, listed apart, never honest); `needs_statistics` when it reads `view.frozen`;
    `aliases`, other names `--router` takes for it; `label`, its column head where the name is too
    long for one (default: the name)."""

    name: str = ""
    aliases: tuple[str, ...] = ()
    label: str = ""
    reference: bool | str = False
    needs_statistics: bool = False
    summary: str = ""

    on_request: bool = False  # computed only where a run names it (`learned`: its cost is a baseline's)

    @property
    def honest(self) -> bool:
        return not self.reference

    def available(self, view: StageView) -> bool:
        """Whether this view holds what the router reads: the frozen-feature statistics where it
        needs them (a run keeps none when nothing asks for them)."""
        return view.frozen is not None or not self.needs_statistics

    def route(self, view: StageView) -> torch.Tensor:  # [G, n] module index per sample
        raise NotImplementedError


ROUTERS: Registry[Router] = Registry("router", "tosca_heads.routers.routing_rules:ROUTERS", "--router")


def is_honest(name: str) -> bool:
    """An honest router: registered without `reference` (it never saw what only references see)."""
    return not ROUTERS[name].reference


def router_label(name: str) -> str:
    """A router's column head: its `label`, else its name (also for a name not registered here)."""
    router = ROUTERS.get(name)
    return (router.label if router is not None else "") or name


def reference_text(name: str) -> str:
    """Why a router is a reference, in words ("" for an honest one)."""
    return reference_words(ROUTERS[name].reference)


def route(name: str, view: StageView) -> torch.Tensor:
    """The registered router `name`'s choices on `view` (`routed`: checked, in one line)."""
    return routed(ROUTERS[name], view)


def routed(router: Router, view: StageView) -> torch.Tensor:
    """A router's choices, refused in one line unless they are what a router must give
    (`checked_choices`). An honest router is handed the honest part of the view; one that reads a
    reference field is refused. A reference router needs a `ReferenceView` (evaluation has one; new
    images have no true task). Evaluation and the conformance check
    (`conformance.check_router`) both route through here."""
    name = router.name
    if router.reference and not isinstance(view, ReferenceView):
        raise UserError(
            f"router {name!r} is a reference (it is told the task or lets a class-sorted batch vote): "
            "it cannot route new samples; pick an honest router"
        )
    honest = view.honest() if isinstance(view, ReferenceView) else view
    try:
        chosen = router.route(view if router.reference else honest)
    except ReferenceOnly as exc:
        raise UserError(
            f"router {name!r} read view.{exc.args[0]}, which only reference routers see (the true task and "
            "the test order carry the labels): an honest router may read entropy, energy, frozen, features "
            "and class_task; register it with `reference = True` to report it as a reference"
        ) from None
    return checked_choices(name, chosen, view)


def checked_choices(name: str, chosen: object, view: StageView) -> torch.Tensor:
    """A router's answer on `view` as module indices [G, n] (long, on the view's device), refused
    in one line unless it is an integer tensor of that shape with every index in [0, M). A
    plug-in's [G, 1] would otherwise be broadcast against the labels into a plausible but
    meaningless accuracy."""
    import torch

    from tosca_heads.method.ties import TIED

    groups, modules, n = view.entropy.shape
    if not isinstance(chosen, torch.Tensor):
        raise UserError(f"router {name!r} returned {type(chosen).__name__}, not a tensor of module indices")
    if chosen.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8, torch.int8):
        raise UserError(f"router {name!r} returned {chosen.dtype} values, not integer module indices")
    if tuple(chosen.shape) != (groups, n):
        raise UserError(
            f"router {name!r} returned shape {list(chosen.shape)}, not [{groups}, {n}] "
            "(one module per configuration and test sample)"
        )
    picked = chosen[chosen.long() != TIED]  # a tied route (`method.ties`): no module, a wrong route
    if picked.numel() and (int(picked.min()) < 0 or int(picked.max()) >= modules):
        wrong = int(picked.min()) if int(picked.min()) < 0 else int(picked.max())
        raise UserError(f"router {name!r} chose module {wrong}; there are {modules} (0 to {modules - 1})")
    return chosen.long().to(view.entropy.device)


def register_router(cls: type[Router]) -> type[Router]:
    """Add a router to the registry (a class decorator): every evaluation after this reports it,
    `--router NAME` and `tosca routers` show it. A name registered twice is refused.

    >>> import torch
    >>> @register_router
    ... class LastModule(Router):
    ...     name = "doc_last_module"
    ...     summary = "always the newest task's module"
    ...     def route(self, view: StageView) -> torch.Tensor:
    ...         groups, modules, n = view.entropy.shape
    ...         return torch.full((groups, n), modules - 1, dtype=torch.long)
    >>> "doc_last_module" in ROUTERS
    True
    >>> del ROUTERS["doc_last_module"]  # (a doctest leaves the registry as it found it)
    """
    check_types("register_router", register_router, {"cls": cls})  # a Router subclass
    if any("honest" in vars(c) for c in cls.__mro__ if c is not Router):  # it would hide `reference`
        raise UserValueError(f"router {cls.name!r}: set `reference = True` (a reference) or nothing (honest)")
    ROUTERS.add(cls.name, cls(), cls.summary, cls.reference, cls.__module__, cls.aliases)
    return cls


class LeastScore(Router):
    """The module whose score `field` (a [G, M, n] field of the view) is least for the sample."""

    field = ""

    def route(self, view: StageView) -> torch.Tensor:
        from tosca_heads.method.ties import least_index

        return least_index(getattr(view, self.field), 1)  # a tie: no module (`method.ties`)


@register_router
class Entropy(LeastScore):
    name = "entropy"
    aliases = ("sample",)  # per-sample entropy routing, by its other name
    summary = "the paper's: the module whose softmax over all seen classes has the least entropy"
    field = "entropy"


@register_router
class Batch(Router):
    name = "batch"
    reference = "a test batch votes"
    summary = "the reference code's: one module per batch of 48 of a class-sorted test set, by mean entropy"
    order = "class_ordered"  # the test order the batches are cut from (a `ReferenceView` field)

    def route(self, view: ReferenceView) -> torch.Tensor:  # type: ignore[override]
        return route_batches(view.entropy, getattr(view, self.order))


@register_router
class ShuffledBatch(Batch):
    name = "batch_shuffled"
    label = "batch-shuf"
    summary = "`batch` on shuffled batches: how much `batch` owes to the ordering"
    order = "shuffled"


@register_router
class Oracle(Router):
    name = "oracle"
    reference = "told the task"
    summary = "the true task's module: the ceiling of any router"

    def route(self, view: ReferenceView) -> torch.Tensor:  # type: ignore[override]
        return view.true_task.long().to(view.entropy.device).expand(view.groups, -1)


@register_router
class Energy(LeastScore):
    name = "energy"
    summary = "the module with the largest logsumexp of its logits (least free energy)"
    field = "energy"


class FrozenFeature(Router):
    """A router that reads only the frozen feature and its class statistics: `task(view)` picks one
    task per sample [n], the same for every configuration (none of their modules is read)."""

    needs_statistics = True

    def route(self, view: StageView) -> torch.Tensor:
        return view.for_every_configuration(self.task(view))

    def task(self, view: StageView) -> torch.Tensor:  # [n] task index per sample
        raise NotImplementedError


@register_router
class NearestClassMean(FrozenFeature):
    name = "ncm"
    summary = "the task of the nearest class mean of the frozen feature (cosine; SimpleCIL's classifier)"

    def task(self, view: StageView) -> torch.Tensor:
        scores = view.frozen.ncm_scores(view.features)
        import torch

        from tosca_heads.method.ties import TIED, top_index

        # each task's best class score: two classes of one task tied at the top still pick that
        # task; where nothing ties, the task of the argmax class (the bits of before)
        class_task = view.class_task.to(scores.device).expand(scores.shape[0], -1)
        tasks = int(view.class_task.max()) + 1
        best = scores.new_full((scores.shape[0], tasks), -torch.inf).scatter_reduce(
            1, class_task, scores, "amax"
        )
        return top_index(best, -1).masked_fill(torch.isnan(scores).any(-1), TIED)


@register_router
class Gaussian(FrozenFeature):
    name = "lda"
    summary = (
        "the task of highest posterior under class Gaussians of the frozen features with one shared, "
        "shrunk covariance (Tukey-transformed when non-negative)"
    )

    def task(self, view: StageView) -> torch.Tensor:
        from tosca_heads.method.ties import top_index

        return top_index(view.lda_task_log_posterior, -1)


@register_router
class Fusion(Router):
    name = "fusion"
    needs_statistics = True
    summary = "log p(task | frozen feature) under `lda` minus each module's entropy"

    def route(self, view: StageView) -> torch.Tensor:
        from tosca_heads.method.ties import top_index

        posterior = view.lda_task_log_posterior  # [n, M]
        return top_index(posterior.T.unsqueeze(0).to(view.entropy.device) - view.entropy, 1)


def route_batches(
    entropy: torch.Tensor, order: torch.Tensor, batch_size: int = REFERENCE_BATCH
) -> torch.Tensor:
    """One module per consecutive batch of `order` (sample positions), by mean entropy over the batch."""
    import torch
    import torch.nn.functional as F

    from tosca_heads.method.ties import least_index

    groups, modules, n = entropy.shape
    batches = -(-n // batch_size)
    padded = F.pad(entropy[:, :, order], (0, batches * batch_size - n))
    sums = padded.view(groups, modules, batches, batch_size).sum(-1)
    counts = torch.full((batches,), float(batch_size), device=entropy.device, dtype=sums.dtype)
    counts[-1] = n - (batches - 1) * batch_size
    best = least_index(sums / counts, 1)  # [G, batches]; a tied batch: no module (`method.ties`)
    chosen = torch.empty(groups, n, dtype=torch.long, device=entropy.device)
    chosen[:, order] = best.repeat_interleave(batch_size, dim=1)[:, :n]
    return chosen
