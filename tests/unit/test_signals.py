"""A SIGTERM (or Ctrl-C) that arrives during an import is delivered after it: raised inside a C
extension's module initialization, the exception left onnx's extension half made and the process
aborted or segfaulted (exit -6 / -11 instead of 143, the report left at `running`)."""
from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from optcli.cli import signals
from optcli.errors import Terminated

MODULE = """
import os, signal, time
os.kill(os.getpid(), signal.{name})
t = time.perf_counter()
while time.perf_counter() - t < 0.3:  # the handler runs here, mid-import, at least once
    pass
COMPLETE = True
"""


@pytest.mark.parametrize(("name", "exc_type"), [("SIGTERM", Terminated), ("SIGINT", KeyboardInterrupt)])
def test_a_signal_during_an_import_is_raised_after_it(name: str, exc_type: type, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    module = f"optcli_signal_probe_{name.lower()}"
    (tmp_path / f"{module}.py").write_text(MODULE.format(name=name))
    monkeypatch.syspath_prepend(str(tmp_path))
    previous = signals.install()
    try:
        with pytest.raises(exc_type):
            __import__(module)  # the import completes ...
            deadline = time.perf_counter() + 5
            while time.perf_counter() < deadline:  # ... and the signal is raised right after
                time.sleep(0.01)
        assert sys.modules[module].COMPLETE  # not a half-made module
    finally:
        signals.restore(previous)
        sys.modules.pop(module, None)


def test_outside_an_import_the_signal_raises_at_once() -> None:
    previous = signals.install()
    try:
        t = time.perf_counter()
        with pytest.raises(Terminated):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        assert time.perf_counter() - t < 1
    finally:
        signals.restore(previous)
    assert signal.getsignal(signal.SIGTERM) is previous[signal.SIGTERM]
