"""The exception types that mean "the user asked for something that cannot be done".

`UserError` is the one the command line catches: it prints the line and exits with code 2; any
other exception is a bug and keeps its traceback. A mistake in an argument is also one of Python's
own kinds, so a script catches it the way it catches any library's: a value outside what is valid
(an unknown name, a number out of range) is a `UserValueError`, a `ValueError`; an argument of the
wrong type, or a keyword no function takes, is a `UserTypeError`, a `TypeError`. Both are
`UserError`s, so `except UserError` still catches every user mistake, and the command line needs
no second base to catch.
"""


class UserError(Exception):
    """A mistake in the input (bad name, missing file, conflicting store).

    The CLI shows it as a single line and exits with code 2; any other exception is a bug
    and keeps its traceback.
    """


class UserValueError(UserError, ValueError):
    """A value outside what is valid: an unknown name (with the closest known one), a number out
    of range; the line names the argument as the caller spelled it (a flag, a Python parameter)."""


class UserTypeError(UserError, TypeError):
    """An argument of the wrong type, or a keyword argument no function takes (with the closest
    one it takes)."""
