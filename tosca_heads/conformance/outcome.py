"""What a conformance check answers: `Conformance` for a class that passes, `NonConforming` (one
line, a `UserValueError`) for one that does not."""

from __future__ import annotations

from dataclasses import dataclass

from tosca_foundation.errors import UserValueError


class NonConforming(UserValueError):
    """A plug-in breaks the contract the built-ins keep: one line naming the class and what is
    wrong (a `UserValueError`: the class handed in is no valid plug-in; a script catches it as a
    `ValueError`, the command line prints the line and exits 2)."""


@dataclass(frozen=True)
class Conformance:
    """A class that passed: its `kind` ("baseline" or "router"), its `name`, the checks it passed
    (`passed`, in the order they ran) and those that did not apply (`skipped`: check -> why)."""

    kind: str
    name: str
    passed: tuple[str, ...]
    skipped: dict[str, str]

    def __str__(self) -> str:
        said = f"{self.kind} {self.name} conforms: {', '.join(self.passed)}"
        return said + "".join(f"; {check} skipped ({why})" for check, why in self.skipped.items())
