"""The extraction pipeline in small parts, each tested alone: `reader` (samples -> decoded
batches, on loader workers), `mapper` (a batch -> features on the device, at a precision),
`writer` (features -> a store's chunk, checksummed), `chunks` (the loop over a split's pending
chunks) and `prefetch` (decoding the next chunk while the backbone runs). `featcache.extract`
wires them; `featcache.distributor` runs chunks on Dask workers.
"""
