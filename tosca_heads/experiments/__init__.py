"""What the commands ask of stage 2, one module each: the requests themselves (`requests`), a fit's
plan (`plan`) and its engine run (`group`, `runs`), the one executor (`executor`), sweeps
(`sweeps`) and their results table (`results`), baselines beside TOSCA (`comparison`), suites
(`suite`), every router of a run (`report`), new images classified (`predict`) and the demo
(`demo`). What they write is `tosca_heads.records` (each file's schema, version, reader and
writer, the figures too); what they send to MLflow or TensorBoard is `tosca_heads.trackers`.
"""
