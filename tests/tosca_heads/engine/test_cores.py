"""How many threads each epoch of the compiled step takes (engine/cores.py): one while this
process's evaluation thread works, else the faster count lately, the other timed again now and
then; never more than the run's most."""

from __future__ import annotations

import threading

from tosca_heads.engine import cores
from tosca_heads.engine.cores import ThreadChooser, evaluation_busy, evaluation_working


def test_one_thread_while_an_evaluation_thread_works() -> None:
    chooser = ThreadChooser(2)
    started, finish = threading.Event(), threading.Event()

    def evaluate() -> None:
        with evaluation_working():
            started.set()
            finish.wait()

    worker = threading.Thread(target=evaluate)
    worker.start()
    started.wait()
    assert evaluation_busy() and chooser.choose() == 1
    finish.set()
    worker.join()
    assert not evaluation_busy() and chooser.choose() == 2


def test_the_faster_count_lately_and_the_other_timed_again() -> None:
    chooser = ThreadChooser(2)
    assert chooser.choose() == 2
    chooser.record(2, 0.9, 10, evaluation_was_busy=False)  # 90 ms per step
    assert chooser.choose() == 1  # not timed yet
    chooser.record(1, 0.6, 10, evaluation_was_busy=False)
    picks = [chooser.choose() for _ in range(cores.PROBE_EVERY)]
    assert picks == [1] * (cores.PROBE_EVERY - 1) + [2]  # the slower one timed again once
    chooser.record(2, 0.3, 10, evaluation_was_busy=False)  # now faster
    assert chooser.choose() == 2


def test_epochs_beside_an_evaluation_are_not_timed() -> None:
    chooser = ThreadChooser(2)
    chooser.record(2, 0.3, 10, evaluation_was_busy=False)
    chooser.record(1, 0.1, 10, evaluation_was_busy=True)  # shared the CPU: says nothing
    assert chooser.choose() == 1 and 1 not in chooser.per_step


def test_never_more_than_the_most() -> None:
    chooser = ThreadChooser(1)
    chooser.record(2, 0.1, 10, evaluation_was_busy=False)
    assert {chooser.choose() for _ in range(40)} == {1}
