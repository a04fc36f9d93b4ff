"""Ctrl-C and SIGTERM end a run with an exception (KeyboardInterrupt, Terminated): the report says
`interrupted`, partial folders are removed, the exit code is 130 or 143. Never inside an import: an
exception raised while a C extension's module initializes leaves it half made, and the process then
aborts or segfaults (onnx's extension, imported lazily by the export stage, did: SIGABRT or SIGSEGV on
about 1 SIGTERM in 15 in tests, with the report left at `running`). A signal that arrives during an
import is delivered again RETRY_SECONDS later, until the import is done."""
from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from optcli.errors import Interrupted, Terminated

RETRY_SECONDS = 0.05
_IMPORT_MACHINERY = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")


def importing(frame: FrameType | None) -> bool:
    """Whether `frame` runs inside an import (any frame below it is the import machinery's)."""
    while frame is not None:
        if frame.f_code.co_filename in _IMPORT_MACHINERY:
            return True
        frame = frame.f_back
    return False


def _deliver_later(signum: int) -> None:
    timer = threading.Timer(RETRY_SECONDS, os.kill, (os.getpid(), signum))
    timer.daemon = True
    timer.start()


def _raising(exc_type: type[BaseException]) -> Callable[[int, FrameType | None], None]:
    def handle(signum: int, frame: FrameType | None) -> None:
        if importing(frame):
            _deliver_later(signum)
            return
        raise exc_type()

    return handle


def install() -> dict[int, Any]:
    """Ctrl-C raises KeyboardInterrupt and SIGTERM Terminated, outside imports; returns the previous
    handlers for `restore` ({} where signals cannot be set: main() called from a worker thread)."""
    previous: dict[int, Any] = {}
    try:
        for signum, exc_type in ((signal.SIGINT, Interrupted), (signal.SIGTERM, Terminated)):
            previous[signum] = signal.signal(signum, _raising(exc_type))
    except ValueError:  # not the main thread: leave signals alone
        restore(previous)
        return {}
    return previous


def restore(previous: dict[int, Any]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
