"""`tosca suite`: from stores to the paper's tables in one command, with seeds, ablations and the
paper's claims checked, every cell reproducible by one single command.

- `spec`: what a suite asks for (SUITE.toml or a preset), checked;
- `presets`: the suites tosca ships (`local`, `paper`);
- `cells`: one folder per number, and how each is found done, read and rerun alone;
- `run`: `run_suite`, resumable, in parallel on Dask when asked;
- `tables`: the tables, claims and figures from the finished cells.
"""

from __future__ import annotations

from tosca_foundation.lazy import lazy_names

# loaded on first use: `tosca list` names the presets without loading what runs a suite
__getattr__, __all__ = lazy_names(
    __name__,
    {
        "suite_runner": ("SuiteResult", "run_suite"),
        "spec": ("StoreSpec", "SuiteSpec", "load_suite", "parse_suite"),
    },
)
