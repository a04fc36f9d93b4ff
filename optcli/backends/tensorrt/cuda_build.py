"""Which CUDA major the installed TensorRT was built for, and which optcli extra matches torch's.

An engine is tied to the TensorRT build that made it, and NVIDIA ships each TensorRT version once per
CUDA major (`tensorrt-cu12`, `tensorrt-cu13` on PyPI: each pulls `tensorrt_cuXX_libs` and
`tensorrt_cuXX_bindings`; NVIDIA/TensorRT python/packaging/tensorrt_build_backend). torch brings its
own CUDA runtime, possibly another major, in the same process; so the CUDA major an engine records
is TensorRT's (second review, F8). The module has no attribute that says it: the wheel's name does.
"""
from __future__ import annotations

import functools
import re
from typing import Any

# torch's CUDA major -> the optcli extra that installs the TensorRT build of that major (pyproject.toml).
EXTRAS = {"12": "tensorrt-cu12", "13": "tensorrt-cu13"}
_CU = re.compile(r"[-_]cu(\d+)(?:[-_]|$)")


def tensorrt_cuda_major(trt: Any) -> str | None:
    """The CUDA major of the wheel that installed the `trt` module ('12', '13'), or None where no
    distribution names it (a TensorRT tar or container build, or a test double)."""
    top = str(getattr(trt, "__name__", "")).split(".")[0]
    return _cuda_major_of(top) if top else None


@functools.lru_cache(maxsize=8)
def _cuda_major_of(top_level: str) -> str | None:
    from importlib.metadata import packages_distributions

    majors = {m.group(1) for dist in packages_distributions().get(top_level, [])
              if (m := _CU.search(dist.lower()))}
    return majors.pop() if len(majors) == 1 else None


def extra_for(torch_cuda: str | None) -> str:
    """The TensorRT extra to install beside a torch build of CUDA `torch_cuda` ('13.0' -> tensorrt-cu13);
    plain `tensorrt` (the CUDA major of optcli's locked GPU torch) where torch has no CUDA."""
    major = str(torch_cuda).split(".")[0] if torch_cuda else ""
    return EXTRAS.get(major, "tensorrt")
