"""The process-wide TensorRT logger: keeps errors and warnings for optcli's messages, prints nothing."""
from __future__ import annotations

import weakref
from typing import Any

# Keyed by the tensorrt module itself (weakly: test doubles come and go, and an id() can be reused).
_LOGGERS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_KEEP = 200  # messages kept per severity: the logger lives as long as the process


def make_logger(trt: Any) -> Any:
    """The process-wide trt.ILogger that keeps errors and warnings (for stage reasons) instead of
    printing them.

    One per process, as Polygraphy does (polygraphy/backend/trt/util.py get_trt_logger): TensorRT
    keeps the first logger a Builder/Runtime registers as its global logger and sends later messages
    there, so a second logger would see none of them. Callers read only what arrived after
    `mark()`. INFO/VERBOSE messages return at once: a Python ILogger takes the GIL for every message
    (pyCore.cpp PyLogger::log), which cannot be avoided without TensorRT printing to stdout."""
    logger = _LOGGERS.get(trt)
    if logger is not None:
        return logger
    error_levels = (int(trt.Logger.INTERNAL_ERROR), int(trt.Logger.ERROR))
    warning_level = int(trt.Logger.WARNING)

    class _Logger(trt.ILogger):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.errors: list[str] = []
            self.warnings: list[str] = []
            self.seen_errors = 0
            self.seen_warnings = 0

        def log(self, severity: Any, msg: str) -> None:
            level = int(severity)
            if level in error_levels:
                self.errors.append(str(msg))
                self.seen_errors += 1
                del self.errors[:-_KEEP]
            elif level == warning_level:
                self.warnings.append(str(msg))
                self.seen_warnings += 1
                del self.warnings[:-_KEEP]

        def mark(self) -> tuple[int, int]:
            """Where the message counts stand now; pass it to last_errors/warnings_since."""
            return self.seen_errors, self.seen_warnings

        def last_errors(self, n: int = 2, since: tuple[int, int] | None = None) -> str:
            fresh = _tail(self.errors, self.seen_errors - since[0]) if since else self.errors
            return " | ".join(m.strip().splitlines()[0][:300] for m in fresh[-n:] if m.strip()) or "no error was logged"

        def warnings_since(self, since: tuple[int, int]) -> list[str]:
            return _tail(self.warnings, self.seen_warnings - since[1])

    logger = _LOGGERS[trt] = _Logger()
    return logger


def _tail(messages: list[str], fresh: int) -> list[str]:
    return messages[-fresh:] if fresh > 0 else []
