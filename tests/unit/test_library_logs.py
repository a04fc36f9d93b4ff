"""Libraries' log lines stay off the terminal unless --debug (issue 30, item 18): a library's
`logging.warning()` (onnxruntime's quantizer) and what importing torchao logs through torch's handlers.
Run in subprocesses: what reaches stderr is the question, and the root logger is process state."""
from __future__ import annotations

import subprocess
import sys

import pytest

from compile_testkit import cli_env

ROOT_WARNING = """
import logging
from optcli.library_logs import root_logger_captured
with root_logger_captured() as records:
    logging.warning("Axis 1 is out-of-range for weight 'x.LayerNorm.weight' with rank 1")  # as onnxruntime does
print(len(records), logging.getLogger().level, len(logging.getLogger().handlers))
logging.getLogger("after").warning("an application's own warning still prints")
"""

TORCHAO_IMPORT = """
from optcli.library_logs import quiet_model_loading
import torch
with quiet_model_loading() as records:
    import torchao  # noqa: F401
print(len(records) > 0)
"""


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(**env), timeout=300)


def test_a_librarys_root_warning_is_captured_and_the_root_logger_left_as_it_was() -> None:
    done = _run(ROOT_WARNING)
    assert done.returncode == 0, done.stderr
    assert "out-of-range" not in done.stderr and "WARNING:root" not in done.stderr, done.stderr
    assert done.stdout.split() == ["1", "30", "0"]  # captured; level WARNING and no handler left behind
    assert "an application's own warning still prints" in done.stderr
    debug = _run(ROOT_WARNING, OPTCLI_DEBUG="1")
    assert "Axis 1 is out-of-range" in debug.stderr  # --debug shows it


@pytest.mark.slow  # a fresh process importing torch and torchao: 10-30 s here
def test_importing_torchao_while_loading_a_model_prints_nothing() -> None:
    """transformers imports torchao, whose import logged `W1127 ... torch/utils/_pytree.py:630] ...` twice
    and `Failed to load .../torchao/_C_...so` on every HF-folder compile."""
    pytest.importorskip("torchao")
    done = _run(TORCHAO_IMPORT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True" and done.stderr.strip() == "", done.stderr


TRACE_HANDLER = """
import logging
import torch._logging._internal  # noqa: F401  (gives torch.__trace its handler, as TORCH_TRACE does)
from optcli.library_logs import captured_logs
trace = logging.getLogger("torch.__trace")
handler = logging.NullHandler()
trace.addHandler(handler)
with captured_logs("torch") as records:
    kept = handler in trace.handlers
    trace.debug("a structured-trace payload")
    logging.getLogger("torch._dynamo").addHandler(logging.NullHandler())
print(kept, len(records))
"""


def test_torchs_structured_trace_keeps_its_own_handler_while_torch_logs_are_captured() -> None:
    """torch.__trace carries TORCH_TRACE's compile artifacts, not messages: captured, they would stay in
    memory for the whole compile and never reach the trace file."""
    done = _run(TRACE_HANDLER)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "0"], done.stdout
