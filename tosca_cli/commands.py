"""How a `tosca` command meets its user: options built from a request class's fields (see
tosca_foundation.options), and every mistake the user can fix as one line on stderr with exit
code 2, whether click finds it (a non-number for a number, an unknown option) or the code does
(UserError, a full or read-only disk, out of memory). Anything else is a bug and keeps its
traceback."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import signal
import sys
import threading
import typing
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import typer
from typer.core import TyperGroup

from tosca_cli.terminal import answers_only, as_json, err, error_line, plainly, say, speaking
from tosca_foundation import long_work
from tosca_foundation.errors import UserError
from tosca_foundation.files import os_error_line
from tosca_foundation.folders import check_outputs
from tosca_foundation.options import ExtraFlag
from tosca_foundation.text import ending_lines, printable

try:  # typer >= 0.20 carries its own copy of click
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover - older typer uses click itself
    from click import exceptions as click_errors  # type: ignore[no-redef]

F = TypeVar("F", bound=Callable[..., Any])


def flags_as_switches(command: Any) -> None:
    """Every on/off option of a command and its subcommands shown as a switch (`--fix`), not as an
    option taking a value (`--fix <bool>`, which click then refuses as `--fix true`)."""
    for param in getattr(command, "params", []):
        if getattr(param, "is_flag", False):
            param.metavar = ""
    if not getattr(command, "_switches", False):  # --help is made when asked for: its switch then
        original = command.get_help_option

        def help_option(ctx: Any) -> Any:
            option = original(ctx)
            if option is not None:
                option.metavar = ""
            return option

        command.get_help_option, command._switches = help_option, True
    for sub in getattr(command, "commands", {}).values():
        flags_as_switches(sub)


class Terminated(BaseException):
    """SIGTERM, raised where the command is (as Ctrl-C raises KeyboardInterrupt), so the command
    unwinds: a sweep's Dask cluster closes (each nanny's two multiprocessing queues, six semaphores
    per worker, were left to the resource tracker, which warned of them as leaked), loader workers
    stop, locks are released. A BaseException: no `except Exception` stops it."""


def _terminate(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
    raise Terminated


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """Within the block (the main thread of a command), SIGTERM raises `Terminated`."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class OneLineUsageErrors(TyperGroup):
    """A malformed command line is one line on stderr and exit 2, instead of click's usage box;
    SIGTERM ends a command as an interrupt does (`Terminated`): one line, exit 143; text the
    terminal cannot encode is shown escaped (`plainly`)."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        flags_as_switches(self)
        return super().make_context(*args, **kwargs)

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            with plainly(), sigterm_unwinds(), speaking():
                code = super().main(*args, standalone_mode=False, **kwargs)
        except Terminated:
            say("terminated (SIGTERM): what was finished is kept; the same command resumes", err)
            long_work.leave(128 + signal.SIGTERM)
        except click_errors.NoArgsIsHelpError as exc:  # `tosca` alone: the help
            exc.show()
            sys.exit(exc.exit_code)
        except click_errors.ClickException as exc:
            where = getattr(getattr(exc, "ctx", None), "command_path", None)
            hint = f" (see `{where} --help`)" if where else ""
            error_line(f"{exc.format_message()}{hint}")
            sys.exit(exc.exit_code)
        except typer.Abort:
            say("aborted", err)
            sys.exit(1)
        if code == 128 + signal.SIGINT:  # typer turns KeyboardInterrupt into a silent Exit(130)
            say("interrupted (SIGINT): what was finished is kept; the same command resumes", err)
            long_work.leave(code)
        sys.exit(code if isinstance(code, int) else 0)


def user_errors(fn: F) -> F:
    """A mistake the user can fix is one line and exit code 2; anything else propagates. Stdout
    carries the command's answers alone (`answers_only`), and an exit raised by code outside tosca
    (tosca's own commands end with typer.Exit, never SystemExit) is said, never a silent exit. A
    command that succeeded ends with the lines told for its end (`text.tell_at_end`: where each
    tracker of `--log` put its runs and how to open them), on stderr, after its answer."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with answers_only(), ending_lines() as ending:
                answer = fn(*args, **kwargs)
                for line in ending():
                    say(line, err)
                return answer
        except UserError as exc:
            error_line(str(exc))
        except (SystemExit, GeneratorExit) as exc:
            code = f" {exc}" if str(exc) else ""
            error_line(
                f"the command was ended by code outside tosca ({type(exc).__name__}{code}: a plug-in?) before "
                "it finished; what it was writing is not done"
            )
        except OSError as exc:
            line = os_error_line(exc)
            if line is None:
                raise
            error_line(line)
        except MemoryError:
            error_line("out of memory: this machine cannot hold what the command asked for; ask for less")
        raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


def named_values(args: typing.Sequence[str]) -> dict[str, str]:
    """Options a command takes beyond its own (`tosca baselines`' --METHOD-NAME VALUE, declared by
    each baseline's class and checked there): NAME_IN_SNAKE_CASE -> the text given. Anything else is
    one line: a value without its option, an option without its value, one given twice."""
    found: dict[str, str] = {}
    tokens = list(args)
    while tokens:
        token = tokens.pop(0)
        if not token.startswith("--") or token == "--":
            raise UserError(f"unexpected argument {printable(token)!r}: options take the form --NAME VALUE")
        name, equals, value = token[2:].partition("=")
        if not equals:
            if not tokens:
                raise UserError(
                    f"no such option --{printable(name)}, or a baseline's own option without its value "
                    f"(--{printable(name)} VALUE)"
                )
            value = tokens.pop(0)
        key = name.replace("-", "_")
        if key in found:
            raise UserError(f"option --{printable(name)} is given twice")
        found[key] = value
    return found


def parameter(name: str, kind: Any, info: Any) -> inspect.Parameter:
    """An extra option of a command, beside its request's fields."""
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=kind)


def json_flag(help_text: str = "Print the answer as JSON.") -> inspect.Parameter:
    return parameter("as_json_", bool, typer.Option(False, "--json", help=help_text))


def answered(
    view: Callable[[Any], None],
    data: Callable[[Any], Any] = lambda answer: answer,
    help_text: str = "Print the answer as JSON.",
) -> Callable[[F], F]:
    """A command that returns its answer: with --json (`help_text`) it is printed as JSON
    (`data(answer)`), else `view(answer)` shows it."""

    def decorate(fn: F) -> F:
        signature = inspect.signature(fn, eval_str=True)
        everything = [*signature.parameters.values(), json_flag(help_text)]

        @functools.wraps(fn)
        def wrapper(*, as_json_: bool, **kwargs: Any) -> None:
            answer = fn(**kwargs)
            if as_json_:
                return as_json(data(answer))
            view(answer)

        wrapper.__signature__ = signature.replace(parameters=everything)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in everything}
        return wrapper  # type: ignore[return-value]

    return decorate


def _field_parameters(cls: type) -> tuple[list[inspect.Parameter], dict[str, Callable[[Any], Any]]]:
    """One option (or argument) per field of a request class that carries `option(...)`, and how to
    turn each value into the field's."""
    hints = typing.get_type_hints(cls)
    params, convert = [], {}
    for f in dataclasses.fields(cls):
        if "help" not in f.metadata:
            continue
        kind, meta = hints[f.name], f.metadata
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        default = ... if required else f.default if f.default is not dataclasses.MISSING else None
        if meta["comma"]:  # a tuple from one comma-separated value
            kind, default = str | None, None if default is None else ",".join(default)
            convert[f.name] = lambda v: (
                None if v is None else tuple(x.strip() for x in v.split(",") if x.strip())
            )
        elif typing.get_origin(kind) is tuple:  # positional: any number of them
            kind, convert[f.name] = list[typing.get_args(kind)[0]], tuple
        if meta["argument"]:
            info = typer.Argument(default, help=meta["help"])
        else:
            info = typer.Option(default, *meta["names"], help=meta["help"])
        params.append(parameter(f.name, kind, info))
    return params, convert


def from_request(
    cls: type, *extra: inspect.Parameter, flags: typing.Sequence[ExtraFlag] = (), into: str | None = None
) -> Callable[[F], F]:
    """The command's options are `cls`'s fields, then `extra`, then `flags`; the command is called
    with `request=cls(...)` (the flags' values, by key, in its field `into`) and the extras by name,
    once every folder the request writes is known to be one it can make (`check_outputs`)."""

    def decorate(fn: F) -> F:
        params, convert = _field_parameters(cls)
        flag_params = [parameter(f.name, f.kind | None, typer.Option(f.default, help=f.help)) for f in flags]
        names = {p.name for p in params}

        @functools.wraps(fn)
        def wrapper(**kwargs: Any) -> Any:
            fields = {k: convert.get(k, lambda v: v)(kwargs.pop(k)) for k in list(kwargs) if k in names}
            if into is not None:
                fields[into] = {f.key or f.name: kwargs.pop(f.name) for f in flags}
            request = cls(**fields)
            check_outputs(request)  # before anything runs: every output flag of every command
            return fn(request=request, **kwargs)

        everything = [*params, *extra, *flag_params]
        wrapper.__signature__ = inspect.Signature(everything)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in everything}
        return wrapper  # type: ignore[return-value]

    return decorate
