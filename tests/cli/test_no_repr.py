"""No user-facing error prints a Python repr (issue 35): the detector the whole suite runs on every
UserError (tests/conftest.py, `user_errors_seen`), held to messages that must and must not pass."""

from __future__ import annotations

import pytest
from support.messages import python_repr

from tosca_foundation.errors import UserError

REPRS = [
    "run r holds out another validation split ({'fraction': 0.1, 'seed': 0}) than the baselines (none)",
    "run r uses stream {'init_cls': 2, 'increment': 2, 'order_seed': 1993}",
    "unknown flags {'x', 'y'}",
    "nothing in {}",
    "shape (3, 4) does not fit",
    "one of ('a', 'b')",
    "not sweepable: ['x']",
    "expected <class 'int'>, got text",
    "handle <tosca.Thing object at 0x7f00deadbeef> is closed",
    "validation ValidationConfig(fraction=0.1, seed=0) differs",
    "store PosixPath('/tmp/x') is gone",
    "got np.float64(0.5)",
    "header b'\\x00\\x01' is not safetensors",
    "magic b'PK' is not zarr",
    "cannot identify image file <_io.BytesIO object at 0x7fe2e108e110>",
    "keys dict_keys(['a']) missing",
]
WORDS = [
    "unknown --router 'lda2': use one of entropy, lda, ncm",
    "--val-seed must be an integer in [0, 2**32), got -1",
    "--val-fraction must be in [0, 0.5] (0: no validation split), got 0.7",
    "cannot read run config runs/x/config.json (PermissionError); it was edited or damaged",
    "run r was fitted with 10% of each class held out for validation (seed 0), the baselines asked for no "
    "validation split; leave out --val-fraction and --val-seed to take the run's",
    "class cat's (2 images) accuracy moves in steps of 50%",
    "split B0 Inc2 (5 tasks of 2 classes), class order seed 1993",
    "a 4 x 4 table of counts",
    "unsafe model name 'a b': a model name becomes a folder name",
    "SUITE.toml: name 'a|b' must be one printable line",
    "cannot read image x.jpg (UnidentifiedImageError: cannot identify image file)",
]


@pytest.mark.parametrize("message", REPRS)
def test_a_repr_is_found(message: str) -> None:
    assert python_repr(message) is not None


@pytest.mark.parametrize("message", WORDS)
def test_words_pass(message: str) -> None:
    assert python_repr(message) is None


def test_every_user_error_of_a_test_is_checked(user_errors_seen: list[str]) -> None:
    """The fixture sees a UserError made anywhere (not only one raised to the command line)."""
    UserError("a repr: {'fraction': 0.1}")
    assert user_errors_seen == ["a repr: {'fraction': 0.1}"]
    assert python_repr(user_errors_seen[0]) == "a dict or set: {'fraction':"
    user_errors_seen.clear()  # made on purpose here: the fixture would fail this test for it


def test_a_foreign_reason_loses_its_object_reprs() -> None:
    from tosca_foundation.text import reason

    class UnidentifiedImageError(OSError):
        pass

    said = reason(
        UnidentifiedImageError("cannot identify image file <_io.BytesIO object at 0x7fe2e108e110>\nmore")
    )
    assert said == "UnidentifiedImageError: cannot identify image file" and python_repr(said) is None


def test_an_exception_wrapped_as_its_repr_is_said_as_itself() -> None:
    """Dask hands a worker's error back as `Exception('ModuleNotFoundError("...")')`."""
    from tosca_foundation.text import reason

    said = reason(Exception("ModuleNotFoundError(\"No module named 'plugmod'\")"))
    assert said == "ModuleNotFoundError: No module named 'plugmod'" and python_repr(said) is None
    assert reason(ValueError("f(x) is not a number")) == "ValueError: f(x) is not a number"
