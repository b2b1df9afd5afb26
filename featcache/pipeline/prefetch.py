"""Prefetch: run a per-batch step in a background thread, a few batches ahead of the consumer.

Why: on a GPU the device stage (batched nvjpeg decode, resizes, views) and the forward pass are
both launched from the extraction process. Run one after the other, the GPU idles while the CPU
side of the decode runs, and the other way round. A thread (torch and nvjpeg release the GIL)
on its own CUDA stream prepares batch i+1 while batch i runs through the backbone; an event
orders the two streams, and `record_stream` keeps the allocator from reusing the batch early.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import torch

T = TypeVar("T")
U = TypeVar("U")


@dataclass
class _Failed:
    error: BaseException


_END = object()


class Prefetcher(Generic[T, U]):
    """Iterate `step(item)` for every item of `source`, computed up to `depth` items ahead.

    `source` is turned into an iterator in the caller's thread (a DataLoader forks its workers
    there, not from the helper thread). An exception in `step` or in `source` is raised in the
    consumer at the position it happened. `tensors_of` names the CUDA tensors of a result that
    the consumer's stream will use.
    """

    def __init__(
        self,
        source: Iterable[T],
        step: Callable[[T], U],
        device: torch.device,
        depth: int = 2,
        tensors_of: Callable[[U], list[torch.Tensor]] = lambda _: [],
    ):
        self.source, self.step, self.device, self.depth = source, step, device, depth
        self.tensors_of = tensors_of

    def __iter__(self) -> Iterator[U]:
        items = iter(self.source)
        results: queue.Queue[Any] = queue.Queue(maxsize=self.depth)
        stop = threading.Event()
        cuda = self.device.type == "cuda"

        def put(value: Any) -> None:
            while not stop.is_set():
                try:
                    results.put(value, timeout=0.1)
                    return
                except queue.Full:
                    continue

        def work() -> None:
            try:
                device_ctx = torch.cuda.device(self.device) if cuda else contextlib.nullcontext()
                with device_ctx:
                    stream = torch.cuda.Stream(self.device) if cuda else None
                    for item in items:
                        if stop.is_set():
                            return
                        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                            out = self.step(item)
                            event = None
                            if stream is not None:
                                event = torch.cuda.Event()
                                event.record(stream)
                        put((out, event))
                put(_END)
            except BaseException as exc:  # handed to the consumer, raised there
                put(_Failed(exc))

        thread = threading.Thread(target=work, name="featcache-prefetch", daemon=True)
        thread.start()
        try:
            while True:
                got = results.get()
                if got is _END:
                    return
                if isinstance(got, _Failed):
                    raise got.error
                out, event = got
                if event is not None:
                    consumer = torch.cuda.current_stream(self.device)
                    consumer.wait_event(event)
                    for tensor in self.tensors_of(out):
                        tensor.record_stream(consumer)
                yield out
        finally:
            stop.set()
            thread.join(timeout=30)
