"""How a message names a class: by the store's label and, where the store has class names, its
name, never by its position in the class order (issue 57, point 8: FeCAM said "class 4" of the
class whose label is 5, beside messages that said 5).

An estimator learns incremental ids (positions in the class order) and does not know the store: a
fault about one class is a `ClassFault` carrying the position, and the edge that knows the class
order and the store's names (`named_classes`) says it with `said_class`. Through the Python API an
estimator's ids are the caller's own labels, so unrenamed it names the id it was given.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import numpy as np

from tosca_foundation.errors import UserError
from tosca_foundation.text import printable


def said_class(label: int, class_names: Sequence[str] | None = None) -> str:
    """`5 ('forest')`: the store's label, and its name where the store has one; `5` without."""
    label = int(label)
    if class_names is not None and 0 <= label < len(class_names):
        return f"{label} ('{printable(class_names[label])}')"
    return str(label)


class ClassFault(UserError):
    """A refusal about one class, raised by an estimator with the class's incremental id; `{cls}`
    in `template` is where the class is named. Said as the id until `renamed` names it."""

    def __init__(self, template: str, position: int) -> None:
        self.template, self.position = template, int(position)
        super().__init__(template.format(cls=self.position))

    def renamed(self, order: np.ndarray, class_names: Sequence[str] | None) -> UserError:
        """The same refusal naming the class by the store's label (order[position]) and name."""
        return UserError(self.template.format(cls=said_class(int(order[self.position]), class_names)))


@contextlib.contextmanager
def named_classes(order: np.ndarray, class_names: Sequence[str] | None) -> Iterator[None]:
    """Within it, a `ClassFault` is re-raised naming its class by the store's label and name."""
    try:
        yield
    except ClassFault as fault:
        raise fault.renamed(order, class_names) from None
