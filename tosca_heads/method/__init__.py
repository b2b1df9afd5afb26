"""What TOSCA is, apart from how it is computed fast: the LuCA module (`luca`), the shared cosine
classifier (`classifier`), the class-incremental protocol and its task split (`protocol`), the
training recipe and its flags (`recipe`), the per-class statistics of frozen features
(`class_statistics`: counts, sums and the shared-covariance Gaussian that routers and baselines
build on), the metrics over an accuracy matrix (`metrics`), where
features come from (`features`) and the baselines it is compared with (`baselines`).
"""
