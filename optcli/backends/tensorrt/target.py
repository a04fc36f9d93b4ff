"""`--target tensorrt`: usable here only with an NVIDIA GPU and TensorRT (probed in a child process)."""
from __future__ import annotations


def check_target() -> str:
    """What TensorRT runs on here (a summary for the report), or TensorRTUnavailableError (exit 4) naming
    what is missing and how to install it, before any stage runs."""
    from optcli.backends.tensorrt.probe import TensorRTUnavailableError, tensorrt_status

    status = tensorrt_status()
    if not status.usable:
        raise TensorRTUnavailableError(status)
    return status.summary()
