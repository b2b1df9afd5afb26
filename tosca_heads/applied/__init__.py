"""The method applied beyond a run folder's own commands.

- `predict`: a trained run applied to new features (`RunPredictor`: every task module, a router,
  the chosen module's class);
- `estimators`: TOSCA and the baselines as scikit-learn estimators (`TOSCAClassifier`,
  `BaselineClassifier`);
- `scenario_runs`: TOSCA and the baselines under a scenario beyond class-incremental, through the
  estimators.
"""
