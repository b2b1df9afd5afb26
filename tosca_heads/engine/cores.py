"""How the compiled step shares the CPU with the evaluation thread and with other processes.

Two step threads give one thread's numbers bit for bit (csrc/luca_step.c), so how many threads an
epoch takes is a matter of speed only, and it is chosen epoch by epoch: one while an evaluation
thread of this process works (its core would otherwise go to a helper that waits for half of
each step), else whichever count has been faster per step lately: on a machine that other
processes keep busy, two threads that are not both running wait for each other and lose to one.
The count not in use is timed again every PROBE_EVERY epochs.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

PROBE_EVERY = 16  # epochs between two timings of the thread count not in use

_working = 0
_lock = threading.Lock()


@contextlib.contextmanager
def evaluation_working() -> Iterator[None]:
    """Marks an evaluation thread of this process at work (steps take one thread meanwhile)."""
    global _working
    with _lock:
        _working += 1
    try:
        yield
    finally:
        with _lock:
            _working -= 1


def evaluation_busy() -> bool:
    return _working > 0


class ThreadChooser:
    """The thread count of each epoch of one training run: at most `most` (1 or 2)."""

    def __init__(self, most: int):
        self.most = most
        self.per_step: dict[int, float] = {}  # seconds per step of the latest timed epoch, by count
        self.since_probe = 0

    def choose(self) -> int:
        if self.most == 1 or evaluation_busy():
            return 1
        untimed = [count for count in (2, 1) if count not in self.per_step]
        if untimed:
            return untimed[0]
        faster = min(self.per_step, key=lambda count: self.per_step[count])
        self.since_probe += 1
        if self.since_probe >= PROBE_EVERY:
            self.since_probe = 0
            return 3 - faster
        return faster

    def record(self, threads: int, seconds: float, steps: int, evaluation_was_busy: bool) -> None:
        """An epoch's time; one that shared the CPU with an evaluation thread says nothing of the
        thread counts' speeds on their own."""
        if self.most > 1 and steps > 0 and not evaluation_was_busy:
            self.per_step[threads] = seconds / steps
