"""Stage 2: LuCA modules, the cosine classifier and the entropy router, trained on cached features.

Needs torch, numpy and zarr only: never imports timm or torchvision, so a machine that only
fits heads never loads a backbone.
"""
