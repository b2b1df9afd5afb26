"""Writes `baseline_index.py`, the light index of the built-in baselines that `tosca list`, a
refused name and `register_baseline` read without importing torch.

Each built-in says what it is once, on its class: the first line of its docstring (its
description), `reference` and `paper`. The index is generated from the classes, never written by
hand, so the two cannot disagree; tests/tosca_heads/method/test_baseline_index.py fails when the
file on disk is not what this writer would write now. After changing a built-in's docstring,
reference or paper, or adding a built-in to `BUILT_INS`, run

    python -m tosca_heads.method.baseline_index_writer
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from tosca_foundation import atomic

INDEX_FILE = Path(__file__).with_name("baseline_index.py")

_HOME, _FIELD = "tosca_heads.method.baseline_estimators", "tosca_heads.method.baselines"
# the built-ins, in the order they are listed and run (`default_baselines()` keeps it): name, class
BUILT_INS: tuple[tuple[str, str], ...] = (
    ("simplecil", f"{_HOME}:SimpleCIL"),
    ("ranpac", f"{_HOME}:RanPAC"),
    ("joint_probe", f"{_HOME}:JointProbe"),
    ("ridge", f"{_FIELD}.ridge:Ridge"),
    ("slda", f"{_FIELD}.slda:SLDA"),
    ("fecam", f"{_FIELD}.fecam:FeCAM"),
    ("klda", f"{_FIELD}.klda:KLDA"),
    ("klda_ensemble", f"{_FIELD}.klda:KLDAEnsemble"),
    ("randumb", f"{_FIELD}.randumb:RanDumb"),
    ("acil", f"{_FIELD}.acil:ACIL"),
    ("gacl", f"{_FIELD}.gacl:GACL"),
    ("ds_al", f"{_FIELD}.ds_al:DSAL"),
    ("loranpac", f"{_FIELD}.loranpac:LoRanPAC"),
)

HEADER = '''"""The built-in baselines' light index: GENERATED from their classes by
`python -m tosca_heads.method.baseline_index_writer`; do not edit (a test fails when it is stale).
Each row: the name, where the class lives (imported on first use), the first line of its
docstring, its `reference` and its `paper`."""

from __future__ import annotations

INDEX: tuple[dict[str, str | bool], ...] = (
'''


def description(cls: type) -> str:
    """What `tosca list` says of a baseline: the first line of its class's docstring."""
    return (cls.__doc__ or "").strip().partition("\n")[0]


def rows() -> list[dict[str, str | bool]]:
    """One row per built-in, read off its class (imports every built-in, torch with them)."""
    found = []
    for name, target in BUILT_INS:
        module, _, attribute = target.partition(":")
        cls = getattr(importlib.import_module(module), attribute)
        reference = getattr(cls, "reference", False)
        found.append(
            {
                "name": name,
                "target": target,
                "description": description(cls),
                "reference": reference if isinstance(reference, str) else bool(reference),
                "paper": str(getattr(cls, "paper", "") or ""),
            }
        )
    return found


def render() -> str:
    """The text of `baseline_index.py` as the classes say it now (ruff-format stable)."""
    body = "".join(
        "    {\n"
        + "".join(f"        {_literal(key)}: {_literal(value)},\n" for key, value in row.items())
        + "    },\n"
        for row in rows()
    )
    return HEADER + body + ")\n"


def _literal(value: str | bool) -> str:
    """A value as Python source in ruff's style: a text in double quotes (JSON's escapes are Python's)."""
    return json.dumps(value, ensure_ascii=False) if isinstance(value, str) else repr(value)


def main() -> None:
    with atomic.writing(INDEX_FILE) as out:
        out.write(render())
    print(f"wrote {INDEX_FILE} ({len(BUILT_INS)} built-in baselines)")


if __name__ == "__main__":
    main()
