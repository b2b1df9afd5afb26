"""What TOSCA is, apart from how it is computed fast: the LuCA module (`luca`), the shared cosine
classifier (`classifier`), the class-incremental protocol and its task split (`protocol`), the
training recipe and its flags (`recipe`), the metrics over an accuracy matrix (`metrics`), where
features come from (`features`) and the baselines it is compared with (`baselines`).
"""
