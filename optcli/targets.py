"""Which target a run builds for: cpu, or tensorrt where an NVIDIA GPU and TensorRT both work."""
from __future__ import annotations


def tensorrt_available() -> tuple[bool, str]:
    """(usable, reason). Cheap checks first; the builder itself is probed in a subprocess
    (optcli.backends.tensorrt.probe), because a builder without a usable GPU can abort the process."""
    from optcli.backends.tensorrt.probe import tensorrt_status

    status = tensorrt_status()
    return status.usable, status.summary()


def resolve_target(requested: str) -> tuple[str, str]:
    """The target to build for and why: `auto` picks tensorrt when usable, else cpu.

    `tensorrt` where it is not usable raises TensorRTUnavailableError (exit code 4) naming what is
    missing and how to install it, before any stage runs.
    """
    if requested == "tensorrt":
        from optcli.backends.tensorrt.probe import TensorRTUnavailableError, tensorrt_status

        status = tensorrt_status()
        if not status.usable:
            raise TensorRTUnavailableError(status)
        return "tensorrt", status.summary()
    if requested != "auto":
        return requested, f"asked for {requested}"
    ok, reason = tensorrt_available()
    return ("tensorrt", reason) if ok else ("cpu", reason)
