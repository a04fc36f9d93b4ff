"""Which target a run builds for: cpu, or tensorrt where an NVIDIA GPU and TensorRT both work."""
from __future__ import annotations

import importlib.util

from optcli.environment import gpu_name


def tensorrt_available() -> tuple[bool, str]:
    """(usable, reason). Cheap checks only: the TensorRT build stage probes the builder in a subprocess."""
    if gpu_name() is None:
        return False, "no NVIDIA GPU found (nvidia-smi)"
    if importlib.util.find_spec("tensorrt") is None:
        return False, "TensorRT is not installed (pip install 'optcli[tensorrt]' on a GPU machine)"
    return True, "NVIDIA GPU and TensorRT found"


def resolve_target(requested: str) -> tuple[str, str]:
    """The target to build for and why: `auto` picks tensorrt when usable, else cpu."""
    if requested != "auto":
        return requested, f"asked for {requested}"
    ok, reason = tensorrt_available()
    return ("tensorrt", reason) if ok else ("cpu", reason)
