""" "Did you mean": the registered name closest to a mistyped one (a router, a dataset, a backbone,
a preset, a baseline), so the one line that refuses a name also says which one was meant."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: object, known: Iterable[str]) -> str:
    """' (did you mean 'entropy'?)', or '' when no registered name is close."""
    close = difflib.get_close_matches(str(name).lower(), [str(k) for k in known], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
