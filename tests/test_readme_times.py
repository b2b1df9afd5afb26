"""Every time the README quotes says where it was measured: the machine (its cores and memory)
and how loaded it was (issue 49, point 6): a time alone reads as a promise for any machine. The
same for docs/demo.md, where the demo's times went when the README was made shorter (issue 57,
point 17)."""

from __future__ import annotations

import re

import pytest
from support import ROOT

# a measured time: "58 s", "1.7 s", "12.1 s", "2-4 min", "379 s", "6 minutes"; not an interval
# ("every 10 s") or a goal ("<= 60 s")
TIME = re.compile(r"(?<!every )(?<!<= )\b\d[\d,.]*(?:-\d[\d,.]*)? ?(?:ms|s|min|minutes|seconds|hours?)\b")
MACHINE = re.compile(r"\d-core .*?(?:VM|machine)", re.S)
MEMORY = re.compile(r"\d+ GiB")
LOAD = re.compile(r"\bquiet\b|load average|\bload\b|under other work|as loaded", re.I)


def _paragraphs(text: str) -> list[str]:
    """The README's prose paragraphs (a list item is one), code blocks left out."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return [p for p in re.split(r"\n\s*\n|\n(?=\d+\. |- )", prose) if p.strip()]


@pytest.mark.parametrize(("page", "least"), [("README.md", 3), ("docs/demo.md", 5)])
def test_every_time_in_the_readme_names_its_machine_and_load(page: str, least: int) -> None:
    """README: the demo's whole, the small suite, the tests; docs/demo.md: the demo's steps, its
    whole, the compiled step, the table's seconds, RanPAC's."""
    text = (ROOT / page).read_text(encoding="utf-8")
    timed = [p for p in _paragraphs(text) if TIME.search(p)]
    assert len(timed) >= least
    machine = " ".join(p for p in timed if MACHINE.search(p) and MEMORY.search(p))
    assert machine  # the machine said in full once at least: cores, memory
    for paragraph in timed:
        said = " ".join(paragraph.split())
        assert MACHINE.search(paragraph) or "that machine" in said or "same machine" in said, said
        assert LOAD.search(paragraph), said
