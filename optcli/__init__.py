"""optcli: compile, quantize, benchmark and deploy PyTorch and ONNX models.

    import optcli
    report = optcli.compile("model.pt2")            # what `optcli compile` does
    m = optcli.load("optcli-out/model")              # the run folder, its report.json, or any .onnx/.engine/.pt2
    out = m.predict({"x": array})

Importing optcli imports nothing heavy: torch and onnxruntime load when first used.
"""
from __future__ import annotations

from typing import Any

from optcli.version import __version__

_API = ("compile", "load", "bench", "profile", "compare", "export_triton", "debug_int8", "serve")


def __getattr__(name: str) -> Any:
    if name in _API:
        from optcli import api

        return getattr(api, name)
    raise AttributeError(f"module 'optcli' has no attribute {name!r}")


__all__ = ["__version__", *_API]
