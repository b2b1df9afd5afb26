"""What a user-facing message must not hold: a Python repr (a dict, a set, a tuple, a list of
quoted names, bytes, a class or object, a dataclass or path shown as Python writes it).

`python_repr(message)` names the first such fragment (None: the message is words). The autouse
fixture in tests/conftest.py runs it on every `UserError` made while a test runs, so each
bad-input case of the suite is also a check of how its refusal reads.

Left alone on purpose: a quoted name (`unknown --router 'x'`: a name shown inert, the house's way),
an interval (`[0, 2**32)`, `[0, 0.5]`), an exception's type name given as the reason a file could
not be read (`(PermissionError)`: a word a user can search for).
"""

from __future__ import annotations

import re

QUOTED = r"""(?:'[^'\n]*'|"[^"\n]*")"""
NUMBER = r"-?\d+(?:\.\d+)?(?:e-?\d+)?"
PATTERNS = {
    "a dict or set": re.compile(rf"\{{\s*(?:{QUOTED}|{NUMBER})\s*[:,}}]|\{{\}}"),
    "a tuple": re.compile(
        rf"\(\s*{QUOTED}\s*,|\(\s*{NUMBER}\s*,\s*{NUMBER}\s*(?:,\s*{NUMBER}\s*)*,?\s*\)|\(\s*{NUMBER}\s*,\s*\)"
    ),
    "a list of quoted values": re.compile(rf"\[\s*{QUOTED}\s*[,\]]"),
    "bytes": re.compile(r"""(?<![\w'"])b'(?:\\x[0-9a-fA-F]{2}|[^'\s\\])*'"""),
    "a class or object": re.compile(
        r"<(?:class|function|module|built-in|bound method) |<[\w.]+ object at 0x"
    ),
    "a Python object's repr": re.compile(
        r"\b(?:np|numpy|torch)\.\w+\(|"
        r"\b(?:[A-Z]\w*|tensor|array|dtype|device|dict_keys|dict_values|dict_items)"
        rf"\((?:\w+=|{QUOTED}|\[)"
    ),
}


def python_repr(message: str) -> str | None:
    """'a dict or set: {'fraction'' for the first repr in `message`; None when there is none."""
    for kind, pattern in PATTERNS.items():
        found = pattern.search(message)
        if found:
            return f"{kind}: {found.group(0)}"
    return None


def after_the_plan(output: str) -> list[str]:
    """The lines a command said, less a fit's plan (its protocol line first, then that line's
    warnings), said before the engine loads: a refusal found after it (the engine's memory check,
    the store's chunks, the run folder) must be the one line after the plan."""
    lines = [line for line in output.splitlines() if line.strip()]
    if lines and lines[0].startswith("protocol: "):
        lines = lines[1:]
        while lines and lines[0].startswith("warning: "):
            lines = lines[1:]
    return lines
