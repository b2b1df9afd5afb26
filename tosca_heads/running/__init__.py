"""The units of stage 2 that run, and what each costs here.

- `group`: one engine run (`GroupFit`: a plan's recipes trained task by task, every router
  evaluated after each, kept on disk); `runs`: the fit command's edge (the plan said before torch
  loads);
- `baseline_runs`: one registered baseline on one store under TOSCA's protocol;
- `executor`: the one executor of bulk work (here, or Dask processes, one worker policy);
- `cost_models`: what those works cost on this machine, measured, for a plan's estimate.

Lists of units and the views over them are `tosca_heads.studies`.
"""
