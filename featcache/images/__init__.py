"""Pictures for a backbone: the preprocessing policies and seeded augmented views (`transforms`),
the two decoders (`decoding`: `pil`, `torch`), and the scan for unreadable images before a store
is laid out (`scan`). Built on `sources` (which samples) and `store` (what a store records).
"""
