"""TensorRT-RTX runner: the TensorRT runner with TensorRT-RTX's bindings, on an RTX GPU only.

Without an RTX GPU it refuses at once, in one line (exit 4), before importing anything heavy: the
engine was built ahead of time and is fine, this machine just cannot run it. Never run on an RTX GPU
by its author (docs/tensorrt.md says what was verified).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from optcli.backends.tensorrt.metadata import EngineMetadata, read_metadata
from optcli.backends.tensorrt.runner import TensorRTRunner
from optcli.backends.tensorrt.toolkit import TENSORRT_RTX
from optcli.backends.tensorrt_rtx.target import require_rtx_gpu
from optcli.errors import UsageError


class TensorRTRTXRunner(TensorRTRunner):
    """Runs a TensorRT-RTX engine (`model.engine` built by `--target tensorrt-rtx`) on an RTX GPU."""

    backend = "tensorrt-rtx"
    toolkit = TENSORRT_RTX

    def __init__(self, path: str | Path, **options: Any) -> None:
        require_rtx_gpu(Path(path))
        super().__init__(path, **options)

    def _check_metadata(self) -> EngineMetadata | None:
        """TensorRT-RTX engines are portable across RTX GPUs (compute 8.0+ by default): only the
        TensorRT-RTX version must match."""
        meta_path = self.engine_path.with_name(self.engine_path.name + ".json")
        if not meta_path.is_file():
            return None
        try:
            meta = read_metadata(meta_path)
        except ValueError:
            return None
        here = str(self.trt.__version__)
        if meta.tensorrt_version != here:
            raise UsageError(f"{self.engine_path} was built with TensorRT-RTX {meta.tensorrt_version}, this machine "
                             f"has {here}", hint="rebuild it with optcli compile MODEL --target tensorrt-rtx")
        return meta
