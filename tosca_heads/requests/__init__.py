"""What the commands ask of stage 2, and a fit's facts worked out once from it.

- `command_requests`: one request per command (`tosca fit`, `sweep`, `baselines`, `predict`,
  `demo`), its flags as values, import-light;
- `plan`: `FitPlan`, a fit request checked once at the edge into every fact a fit needs (store,
  stream, validation rows, protocol, recipes, folders, device), handed down whole.

Nothing here runs: what runs is `tosca_heads.running`.
"""
