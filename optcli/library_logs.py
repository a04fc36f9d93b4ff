"""Keep libraries' log output (torch's deserializer logs a whole traceback as a warning) off the
terminal: records are captured so the one-line error can name the real cause; --debug shows them."""
from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator

# Loading or building a PyTorch model: transformers imports torchao, whose import logs through torch's
# own handlers (`W1127 ... torch/utils/_pytree.py:630] <enum 'KernelPreference'> is an Enum subclass ...`)
# and its own logger (`Failed to load .../torchao/_C_mxfp8...so`); transformers draws a progress bar.
MODEL_LOADING = ("torch", "torchao", "transformers", "huggingface_hub")


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


# Loggers whose records are data, not messages: torch's structured trace (TORCH_TRACE) writes compile
# artifacts through its own handler; captured, they would pile up in memory and never reach the trace.
_NOT_MESSAGES = frozenset({"torch.__trace"})


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
        if isinstance(lg, logging.Logger) and lg.handlers and any(key.startswith(n + ".") for n in names)
        and key not in _NOT_MESSAGES]
    for logger in loggers:
        saved.append((logger, logger.handlers[:], logger.propagate))
        logger.handlers = [capture]
        logger.propagate = False
    try:
        yield capture.records
    finally:
        for logger, handlers, propagate in saved:
            logger.handlers, logger.propagate = handlers, propagate


@contextlib.contextmanager
def quiet_model_loading() -> Iterator[list[logging.LogRecord]]:
    """Capture what loading a model logs (MODEL_LOADING) and turn transformers' progress bars off, for the
    duration; as captured_logs, --debug (OPTCLI_DEBUG=1) leaves both alone."""
    if os.environ.get("OPTCLI_DEBUG") == "1":
        yield []
        return
    with captured_logs(*MODEL_LOADING) as records, _progress_bars_off():
        yield records


@contextlib.contextmanager
def _progress_bars_off() -> Iterator[None]:
    """transformers reads HF_HUB_DISABLE_PROGRESS_BARS when it is imported, and has a switch once it is."""
    key = "HF_HUB_DISABLE_PROGRESS_BARS"
    saved = os.environ.get(key)
    os.environ[key] = "1"
    module = sys.modules.get("transformers.utils.logging")
    was_on = bool(module.is_progress_bar_enabled()) if module is not None else saved != "1"
    if module is not None:
        module.disable_progress_bar()
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = saved
        module = sys.modules.get("transformers.utils.logging")
        if module is not None and was_on:
            module.enable_progress_bar()


@contextlib.contextmanager
def root_logger_captured() -> Iterator[list[logging.LogRecord]]:
    """A library that logs with `logging.warning(...)` (onnxruntime's quantizer: "Axis 1 is out-of-range for
    weight '...LayerNorm.weight' with rank 1") configures the root logger to print to stderr when it has no
    handler. With this capturing handler there, nothing is configured and nothing printed (--debug: left
    alone); the root logger's level is not touched."""
    if os.environ.get("OPTCLI_DEBUG") == "1":
        yield []
        return
    root = logging.getLogger()
    capture = _Capture()
    saved = root.handlers[:]
    root.handlers = [capture]
    try:
        yield capture.records
    finally:
        root.handlers = saved


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
