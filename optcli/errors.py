"""The errors optcli raises on purpose: each carries a one-line message, a hint and an exit code.

The CLI turns them into `error: ...` / `hint: ...` lines and the exit code; anything else is a bug
and shows a traceback only with --debug.
"""
from __future__ import annotations

import errno
import traceback

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


class DeviceUnavailableError(OptcliError):
    """The device asked for is not usable by the runtime installed (a CPU-only build, missing CUDA
    libraries): the same exit code as a missing dependency, with a hint naming what to install."""

    exit_code = EXIT_MISSING_DEPENDENCY


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised by the CLI's handler so a terminated run ends like Ctrl-C: the report says
    `interrupted`, no half-written folder stays behind, and the exit code is 143."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, raised by the CLI's handler: told apart from a KeyboardInterrupt that a plugin raises itself."""


def foreign_exit(exc: BaseException) -> bool:
    """Whether `exc`, raised inside code optcli called (a calibration reader, a model factory), is that
    code's own way out rather than the user's: SystemExit always; KeyboardInterrupt when the CLI's signal
    handlers are in place and no signal raised it. Such code must not decide the exit code (SystemExit(0)
    made a failed run exit 0). Without those handlers (the API) a Ctrl-C cannot be told apart: it stays one."""
    import signal

    if isinstance(exc, SystemExit):
        return True
    if not isinstance(exc, KeyboardInterrupt) or isinstance(exc, (Interrupted, Terminated)):
        return False
    try:
        handler = signal.getsignal(signal.SIGINT)
    except ValueError:  # not the main thread's interpreter state: assume the default handler
        return False
    return handler not in (signal.default_int_handler, signal.SIG_DFL, signal.SIG_IGN, None)


# A write that failed for want of room, as errno and the words a message uses. ENOSPC and EDQUOT: the disk
# or the user's quota is full; EFBIG: the file passed the process's size limit (ulimit -f).
_NO_ROOM = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
            errno.EFBIG: "file too large (EFBIG: past the file size limit, ulimit -f)"}
_NO_ROOM_TEXT = ("No space left on device", "Disk quota exceeded", "File too large")
_NO_ROOM_HINT = ("free space on the disk that holds the output folder (or raise its quota or file size limit), "
                 "or pass --out on another disk; then rerun")


def disk_full(exc: BaseException) -> StageError | None:
    """A full disk (or quota, or file size limit) anywhere in `exc`'s cause chain, as the one-line error a
    run ends with (exit 1, the report `failed`); None for any other failure. Libraries wrap the OSError
    (onnx, torch) or keep only its text (C++ writers)."""
    if not isinstance(exc, Exception):  # Ctrl-C or SIGTERM while handling one is still an interruption
        return None
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _NO_ROOM:
            where = f" while writing {current.filename}" if current.filename else ""
            found = StageError(f"{_NO_ROOM[current.errno]}{where}", hint=_NO_ROOM_HINT)
            found.__cause__ = exc
            return found
        text = str(current)
        if any(t in text for t in _NO_ROOM_TEXT):
            found = StageError(f"a write failed: {model_error_line(current)}", hint=_NO_ROOM_HINT)
            found.__cause__ = exc
            return found
        current = current.__cause__ or current.__context__
    return None


def model_error_line(exc: BaseException) -> str:
    """The line of a model's (or library's) exception that says what went wrong (TorchScript puts it last)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()] or [type(exc).__name__]
    line = lines[-1] if lines[0].startswith("The following operation failed in the TorchScript") else lines[0]
    return line.removeprefix("RuntimeError: ")[:300]


def traceback_text(exc: BaseException) -> str:
    """The formatted traceback (with its cause chain), capped so a report stays readable."""
    text = "".join(traceback.format_exception(exc))
    return text if len(text) <= 20000 else "...\n" + text[-20000:]


def error_record(exc: BaseException, stage: str | None) -> dict[str, str | int | None]:
    """How report.json records an error: {type, message, hint, exit_code, stage[, traceback]}. An error
    that is not optcli's own is a bug: exit 1, its traceback kept for --debug."""
    if isinstance(exc, Terminated):
        return {"type": "Terminated", "message": "terminated (SIGTERM)", "hint": None, "exit_code": EXIT_TERMINATED,
                "stage": stage}
    if isinstance(exc, KeyboardInterrupt):
        return {"type": "KeyboardInterrupt", "message": "interrupted by the user", "hint": None,
                "exit_code": EXIT_INTERRUPTED, "stage": stage}
    if not isinstance(exc, OptcliError):
        exc = disk_full(exc) or exc  # a full disk ends the run like a failed stage: not a bug
    if isinstance(exc, OptcliError):
        out: dict[str, str | int | None] = {"type": type(exc).__name__, "message": exc.message, "hint": exc.hint,
                                            "exit_code": exc.exit_code, "stage": stage}
        if exc.__cause__ is not None:  # a library's failure behind the one-line message: --debug prints it
            out["traceback"] = traceback_text(exc)
        return out
    return {"type": type(exc).__name__, "message": f"internal error: {type(exc).__name__}: {model_error_line(exc)}",
            "hint": "rerun with --debug", "exit_code": EXIT_STAGE_FAILED, "stage": stage,
            "traceback": traceback_text(exc)}


class ServeError(OptcliError):
    """`optcli serve`: the inference server could not start or stopped on its own."""

    exit_code = EXIT_STAGE_FAILED
