"""Runners: one per backend behind one interface (optcli.runtime.base.Runner)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from optcli.errors import UsageError
from optcli.runtime.base import Runner

__all__ = ["Runner", "open_runner", "runner_for_format"]

# format -> module path and class name; imported only when used.
_RUNNERS: dict[str, tuple[str, str]] = {
    "onnx": ("optcli.runtime.onnxruntime_runner", "OnnxRuntimeRunner"),
    "pt2": ("optcli.runtime.torch_runner", "TorchFileRunner"),
    "torchscript": ("optcli.runtime.torch_runner", "TorchFileRunner"),
}


def register_runner(fmt: str, module: str, cls: str) -> None:
    """Let a backend module add its runner for an artifact format (e.g. engine, openvino)."""
    _RUNNERS[fmt] = (module, cls)


def runner_for_format(fmt: str) -> type[Runner]:
    import importlib

    # Backends that register themselves live in these modules; import them on demand.
    for extra in ("optcli.runtime.tensorrt_runner", "optcli.runtime.openvino_runner"):
        if fmt not in _RUNNERS:
            try:
                importlib.import_module(extra)
            except ModuleNotFoundError as exc:
                if exc.name != extra:
                    raise
    if fmt not in _RUNNERS:
        raise UsageError(f"no runner for {fmt!r} artifacts", hint=f"runnable formats: {', '.join(sorted(_RUNNERS))}")
    module, cls = _RUNNERS[fmt]
    return getattr(importlib.import_module(module), cls)


def open_runner(path: str | Path, fmt: str, **options: Any) -> Runner:
    """Open a runner for the artifact at `path` of format `fmt`."""
    return runner_for_format(fmt)(path, **options)
