"""TensorRT-RTX runner: the TensorRT runner with TensorRT-RTX's bindings, on an RTX GPU only.

Without an RTX GPU it refuses at once, in one line (exit 4), before importing anything heavy: the
engine was built ahead of time and is fine, this machine just cannot run it. Never run on an RTX GPU
by its author (docs/tensorrt.md says what was verified). Its engines are portable across RTX GPUs, so the
metadata check (tensorrt/engine_loader.py) compares only the TensorRT-RTX version.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from optcli.backends.tensorrt.runner import TensorRTRunner
from optcli.backends.tensorrt.toolkit import TENSORRT_RTX
from optcli.backends.tensorrt_rtx.target import require_rtx_gpu


class TensorRTRTXRunner(TensorRTRunner):
    """Runs a TensorRT-RTX engine (`model.engine` built by `--target tensorrt-rtx`) on an RTX GPU."""

    backend = "tensorrt-rtx"
    toolkit = TENSORRT_RTX

    def __init__(self, path: str | Path, **options: Any) -> None:
        require_rtx_gpu(Path(path))
        super().__init__(path, **options)
