"""The one exception type that means "the user asked for something that cannot be done"."""


class UserError(Exception):
    """A mistake in the input (bad name, missing file, conflicting store).

    The CLI shows it as a single line and exits with code 2; any other exception is a bug
    and keeps its traceback.
    """
