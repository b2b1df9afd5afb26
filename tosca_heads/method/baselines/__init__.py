"""The frozen-feature class-incremental methods researchers compare TOSCA with, one file each
(ridge, SLDA, FeCAM, KLDA, RanDumb, ACIL, DS-AL, LoRanPAC): registered by name in
`baseline_registry`, imported when first used. Each follows its paper and its authors' code;
docs/method.md names their quirks, docs/baselines.md compares them on the local stores."""
