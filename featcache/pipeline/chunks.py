"""Compute and write some chunks of one split: the unit of work of every runner.

Its own module so that the local runner (featcache.extraction) and the Dask distributor
(featcache.distributor) both import it, and neither imports the other's internals.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from featcache.images.transforms import Preprocessing
from featcache.pipeline.mapper import FeatureMapper
from featcache.pipeline.prefetch import Prefetcher
from featcache.pipeline.reader import Batch, DeviceImages, SampleImages, chunk_batches, make_loader
from featcache.pipeline.writer import ChunkWriter
from featcache.sources.datasets import SplitSamples
from featcache.store import FeatureStore
from tosca_foundation.errors import UserError

# progress(split, images_done_now, images_total_for_split)
Progress = Callable[[str, int, int], None]


def uses_device_stage(prep: Preprocessing, mapper: FeatureMapper) -> bool:
    """The `torch` decoder decodes on a CUDA device (nvjpeg); on a CPU its DataLoader workers do it."""
    return prep.decoder == "torch" and mapper.device.type == "cuda"


def extract_chunks(
    store: FeatureStore,
    split: str,
    chunks: list[int],
    samples: SplitSamples,
    prep: Preprocessing,
    mapper: FeatureMapper,
    seed: int,
    batch_size: int,
    workers: int,
    progress: Progress | None = None,
    device_stage: bool | None = None,
    sources: dict[int, str] | None = None,
) -> int:
    """Compute and write the given chunks of one split; returns the number of images forwarded.

    `device_stage` (default: `uses_device_stage`) moves decoding and transforms into this process,
    batch by batch on the mapper's device, a prefetch thread ahead of the forward. `sources` (chunk
    -> fingerprint of its files) is recorded with each chunk.
    """
    views = store.views if split == "train" else 0
    on_device = uses_device_stage(prep, mapper) if device_stage is None else device_stage
    batches = chunk_batches(store.layout(split), chunks, batch_size)
    dataset = SampleImages(samples, prep, split, seed, views, device_stage=on_device)
    loader = make_loader(dataset, batches, workers, pin_memory=mapper.device.type == "cuda")
    stream: Iterable[Batch] = loader
    if on_device:
        stream = Prefetcher(
            loader,
            DeviceImages(samples, prep, split, seed, views, mapper.device),
            mapper.device,
            tensors_of=lambda b: [] if b.images is None else [b.images],
        )
    writer = ChunkWriter(store, split, str(store.node(f"{split}/features").dtype), sources)
    images = 0
    total = sum(len(b) for b in batches) * (1 + views)
    for batch in stream:
        if batch.errors:
            chunk = batch.indices[0] // store.chunk_size
            raise UserError(
                f"cannot read image {batch.errors[0]}; stopped, {split} chunk {chunk} not marked done "
                "(fix or remove the file and run the same command again, or pass --skip-bad-images "
                "--overwrite to rebuild the store without unreadable images)"
            )
        assert batch.images is not None
        out = mapper(batch.images)
        n = len(batch.indices)
        view_out = out[n:].reshape(n, views, -1) if views else None
        writer.add(batch.indices, out[:n], view_out)
        images += out.shape[0]
        if progress is not None:
            progress(split, out.shape[0], total)
    return images
