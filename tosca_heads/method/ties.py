"""The tie rule, once for every method's prediction (issue 57, point 3): a row whose top score is
held by two classes or more, or that has no top (a NaN score), is answered `TIED`, which no true
label equals, so a tie counts as wrong, and the run says how many ties it counted.

argmax breaks a tie towards the first class in the class order, so a method that gives every
class the same score (RanDumb on a store whose classes are each one repeated vector: a zero
covariance, no discriminant left) scored 1 / C of the images as if it had told them apart, without
a word. A tie is exact equality of the scores: two floating-point scores that differ in their last
bit are not tied (the method told them apart, however narrowly).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # torch loads where a tensor is scored, never for `tosca --help` or `tosca list`
    import torch

# the answer of a row with no single top class: never a class id, so never right; the least int64,
# not -1, so that a plug-in's -1 is still refused as the bogus class it is (`checked_predictions`)
TIED = int(np.iinfo(np.int64).min)
# a tied route as a run keeps it (its routes are int16, -1 a class not seen yet): no module picked
TIED_ROUTE = -2


def top_class(scores: np.ndarray | torch.Tensor) -> np.ndarray:
    """Each row's class of highest score ([n, C] scores), `TIED` where two or more classes share
    the highest score or a score is NaN; int64."""
    values = scores.detach().cpu().numpy() if hasattr(scores, "detach") else np.asarray(scores)
    if values.ndim != 2 or values.shape[1] == 0:
        return values.argmax(-1) if values.ndim == 2 else np.asarray(values)
    best = values.argmax(1)
    top = values[np.arange(len(values)), best]
    shared = (values == top[:, None]).sum(1) > 1
    unordered = np.isnan(values).any(1)
    return np.where(shared | unordered, TIED, best).astype(np.int64)


def top_index(scores: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """`top_class` on a tensor, on its own device (evaluation's [G, rows, C] logits, a router's
    [G, M, n] scores): the argmax along `dim`, `TIED` where two or more entries share the top or one
    is NaN. Where nothing ties, the bits of `scores.argmax(dim)`."""
    top, best = scores.max(dim, keepdim=True)  # a NaN in the row is its max: one pass finds both
    shared = (scores == top).sum(dim) > 1
    return best.squeeze(dim).masked_fill(shared | top.squeeze(dim).isnan(), TIED)


def least_index(scores: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """`top_index` of the least: the argmin along `dim`, `TIED` where the least is shared or a
    score is NaN (a router's least entropy or energy)."""
    least, best = scores.min(dim, keepdim=True)  # a NaN in the row is its min too
    shared = (scores == least).sum(dim) > 1
    return best.squeeze(dim).masked_fill(shared | least.squeeze(dim).isnan(), TIED)


def task_of_classes(class_task: torch.Tensor, classes: torch.Tensor) -> torch.Tensor:
    """Each class's task (`class_task[classes]`), `TIED` for a tied class: a router that picks the
    task of a tied class has picked no task, a tied route, which is a wrong route."""
    tied = classes == TIED
    return class_task.to(classes.device)[classes.masked_fill(tied, 0)].masked_fill(tied, TIED)


def ties_said(method: str, tied: int, images: int, split: str = "test") -> str:
    """The line a run prints when it counted ties (after the last task)."""
    return (
        f"{method}: {tied:,} of the {images:,} {split} images had two or more classes tied for the top "
        "score after the last task; a tie counts as wrong (docs/guarantees.md)"
    )
