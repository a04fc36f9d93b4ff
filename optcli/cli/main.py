"""`optcli` entry point: a lazy command group (subcommand modules load only when run) and the one
place where errors become one-line messages and exit codes."""
from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

from optcli.cli import signals
from optcli.errors import (
    EXIT_INTERRUPTED,
    EXIT_STAGE_FAILED,
    EXIT_TERMINATED,
    EXIT_USAGE,
    OptcliError,
    Terminated,
    disk_full,
)
from optcli.library_logs import root_logger_captured
from optcli.optional_imports import own_process
from optcli.version import __version__

# command name -> "module:attribute"; modules import their heavy dependencies inside functions.
COMMANDS = {
    "compile": "optcli.cli.compile_cmd:compile_cmd",
    "export-triton": "optcli.cli.export_triton_cmd:export_triton_cmd",
    "bench": "optcli.cli.bench_cmd:bench_cmd",
    "profile": "optcli.cli.profile_cmd:profile_cmd",
    "compare": "optcli.cli.compare_cmd:compare_cmd",
    "check": "optcli.cli.check_cmd:check_cmd",
    "debug-int8": "optcli.cli.debug_int8_cmd:debug_int8_cmd",
    "serve": "optcli.cli.serve_cmd:serve_cmd",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, attr = target.split(":")
        return getattr(importlib.import_module(module), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="optcli")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
def cli(debug: bool) -> None:
    """Compile and optimize PyTorch and ONNX models: export, simplify, fuse, quantize, build,
    benchmark, profile, compare and deploy.

    Exit codes: 0 ok, 1 a stage failed, 2 bad input or usage, 3 accuracy below tolerance,
    4 missing optional dependency, 5 benchmark regression, 130 interrupted (Ctrl-C),
    143 terminated (SIGTERM).
    """


def _print_error(message: str, hint: str | None) -> None:
    """`error: ...` and `hint: ...`, one line each, whatever the message holds (a file name with a newline)."""
    click.secho(f"error: {' '.join(str(message).splitlines())}", fg="red", err=True)
    if hint:
        click.echo(f"hint: {' '.join(str(hint).splitlines())}", err=True)


def _click_message(exc: click.ClickException) -> str:
    return " ".join(exc.format_message().split())


def _click_hint(exc: click.ClickException) -> str:
    ctx = getattr(exc, "ctx", None)
    return f"see `{ctx.command_path} --help`" if ctx is not None else "see `optcli --help`"


def main(argv: list[str] | None = None) -> None:
    """Console script: run the CLI, turn OptcliError into one line + hint + exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    # --debug anywhere on the line (also after the subcommand) shows tracebacks.
    debug = "--debug" in args or os.environ.get("OPTCLI_DEBUG") == "1"
    args = [a for a in args if a != "--debug"]
    before = os.environ.get("OPTCLI_DEBUG")
    if debug:  # commands that print an error recorded in a report print its traceback too
        os.environ["OPTCLI_DEBUG"] = "1"
    previous_handlers = signals.install()  # Ctrl-C and SIGTERM end a run like an error, never mid-import
    own_process()  # imports may leave out what this run does not need (optional_imports.py)
    try:
        # A library's logging.warning() would print to stderr ("WARNING:root:..."): kept off, --debug shows it.
        with root_logger_captured():
            code = cli.main(args=args, prog_name="optcli", standalone_mode=False)
    except OptcliError as exc:
        if debug:
            raise
        _print_error(exc.message, exc.hint)
        sys.exit(exc.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt) as exc:  # click wraps Ctrl-C in Abort
        terminated = isinstance(exc, Terminated) or isinstance(exc.__cause__, Terminated)
        click.echo("terminated" if terminated else "interrupted", err=True)
        sys.exit(EXIT_TERMINATED if terminated else EXIT_INTERRUPTED)
    except SystemExit as exc:  # commands end through exit_with (click's Exit): this one is a plugin's sys.exit
        _foreign_exit(exc, debug)
    except click.ClickException as exc:  # click's own checks (ranges, choices, missing args): optcli's lines
        _print_error(_click_message(exc), _click_hint(exc))
        sys.exit(EXIT_USAGE if isinstance(exc, click.UsageError) else exc.exit_code)
    except Exception as exc:  # a bug: keep it to one line unless --debug
        if debug:
            raise
        full = disk_full(exc)
        if full is not None:  # a full disk where no report could say it: still one line, exit 1
            _print_error(full.message, full.hint)
            sys.exit(full.exit_code)
        _print_error(f"internal error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                     "rerun with --debug for the traceback, and report it")
        sys.exit(EXIT_STAGE_FAILED)
    finally:
        signals.restore(previous_handlers)
        if before is None:
            os.environ.pop("OPTCLI_DEBUG", None)
        else:
            os.environ["OPTCLI_DEBUG"] = before
    sys.exit(code if isinstance(code, int) else 0)


def _foreign_exit(exc: SystemExit, debug: bool) -> None:
    """Code optcli called (a model's forward, a library) raised SystemExit: a failure of the run, never its
    exit code (a reader's SystemExit(0) once made a failed run exit 0; readers and factories are caught
    where they are called, optcli/errors.py foreign_exit)."""
    if debug:
        raise exc
    _print_error(f"internal error: SystemExit({exc.code!r}) raised by code optcli called "
                 "(a plugin, or the model's own code)",
                 "rerun with --debug for the traceback")
    sys.exit(EXIT_STAGE_FAILED)


def exit_with(code: int) -> Any:
    """Commands end through here so the code reaches main() (standalone_mode=False returns it)."""
    ctx = click.get_current_context()
    ctx.exit(code)
