"""Lists of units and the views over them: what to run, and what is built from what ran.

- `sweeps`: the Cartesian grid of fit flags, grouped into engine runs; `results`: the tables,
  figures and choices built from a sweep's points;
- `comparison`: `tosca baselines`, the baselines beside TOSCA's routers under one protocol;
- `report`: `tosca routers RUN`, every router of a finished run beside its baselines;
- `demo`: `tosca demo`, the main job end to end;
- `suite`: `tosca suite`, from stores to the paper's tables (spec, presets, cells, runner, tables).

The units they list run through `tosca_heads.running`.
"""
