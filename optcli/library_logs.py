"""Keep libraries' log output (torch's deserializer logs a whole traceback as a warning) off the
terminal: records are captured so the one-line error can name the real cause; --debug shows them."""
from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def captured_logs(*names: str) -> Iterator[list[logging.LogRecord]]:
    """Route the named loggers' records into a list instead of their handlers (unless OPTCLI_DEBUG=1)."""
    records: list[logging.LogRecord] = []
    if os.environ.get("OPTCLI_DEBUG") == "1":
        yield records
        return
    capture = _Capture()
    saved = []
    # torch gives many sub-loggers handlers of their own (propagate off): route each of those too.
    loggers = [logging.getLogger(n) for n in names] + [
        lg for key, lg in logging.Logger.manager.loggerDict.items()
        if isinstance(lg, logging.Logger) and lg.handlers and any(key.startswith(n + ".") for n in names)]
    for logger in loggers:
        saved.append((logger, logger.handlers[:], logger.propagate))
        logger.handlers = [capture]
        logger.propagate = False
    try:
        yield capture.records
    finally:
        for logger, handlers, propagate in saved:
            logger.handlers, logger.propagate = handlers, propagate


def last_error_line(records: list[logging.LogRecord]) -> str | None:
    """The last line of the last logged exception or message: usually the innermost cause."""
    for record in reversed(records):
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        if lines:
            return lines[-1][:200]
    return None
