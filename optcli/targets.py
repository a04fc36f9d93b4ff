"""Which target a run builds for: cpu, or a backend's own target (tensorrt where an NVIDIA GPU and TensorRT
both work; tensorrt-rtx wherever TensorRT-RTX's builder is installed)."""
from __future__ import annotations


def tensorrt_available() -> tuple[bool, str]:
    """(usable, reason). Cheap checks first; the builder itself is probed in a subprocess
    (optcli.backends.tensorrt.probe), because a builder without a usable GPU can abort the process."""
    from optcli.backends.tensorrt.probe import tensorrt_status

    status = tensorrt_status()
    return status.usable, status.summary()


def resolve_target(requested: str) -> tuple[str, str]:
    """The target to build for and why: `auto` picks tensorrt when usable, else cpu.

    A backend's target (tensorrt, tensorrt-rtx) where it is not usable raises its error (exit code 4)
    naming what is missing and how to install it, before any stage runs.
    """
    from optcli.backends.registry import for_target, load_object

    backend = for_target(requested)
    if backend is not None and backend.target_check:
        return requested, load_object(backend.target_check)()
    if requested != "auto":
        return requested, f"asked for {requested}"
    ok, reason = tensorrt_available()
    return ("tensorrt", reason) if ok else ("cpu", reason)
