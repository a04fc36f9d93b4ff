"""The errors optcli raises on purpose: each carries a one-line message, a hint and an exit code.

The CLI turns them into `error: ...` / `hint: ...` lines and the exit code; anything else is a bug
and shows a traceback only with --debug.
"""
from __future__ import annotations

# Exit codes (documented in docs/cli.md).
EXIT_OK = 0
EXIT_STAGE_FAILED = 1
EXIT_USAGE = 2
EXIT_ACCURACY = 3
EXIT_MISSING_DEPENDENCY = 4
EXIT_REGRESSION = 5
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143  # 128 + SIGTERM, as shells report it


class OptcliError(Exception):
    """Base class: a user-facing failure with a hint and an exit code."""

    exit_code = EXIT_STAGE_FAILED

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class UsageError(OptcliError):
    """Bad input from the user: a file, a flag value, a config key."""

    exit_code = EXIT_USAGE


class StageError(OptcliError):
    """A pipeline stage could not do its work."""

    exit_code = EXIT_STAGE_FAILED


class AccuracyError(OptcliError):
    """An artifact missed the accuracy tolerance against the FP32 reference."""

    exit_code = EXIT_ACCURACY


class RegressionError(OptcliError):
    """A benchmark regressed beyond the allowed bound against a saved baseline."""

    exit_code = EXIT_REGRESSION


class MissingDependencyError(OptcliError):
    """An optional dependency is not installed; the hint names the extra."""

    exit_code = EXIT_MISSING_DEPENDENCY

    def __init__(self, package: str, extra: str, purpose: str) -> None:
        super().__init__(
            f"{package} is not installed; it is needed for {purpose}",
            hint=f"pip install 'optcli[{extra}]'",
        )
        self.package = package
        self.extra = extra


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised by the CLI's handler so a terminated run ends like Ctrl-C: the report says
    `interrupted`, no half-written folder stays behind, and the exit code is 143."""
