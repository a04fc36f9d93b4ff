"""Which NVIDIA builder a TensorRT-family target uses: full TensorRT or TensorRT-RTX.

Both ship the same network API and the same ONNX parser (onnx-tensorrt); the builder code in this
folder takes the module as an argument and serves both. What differs is data, kept here:
- the Python module (`tensorrt`, `tensorrt_rtx_bindings`) and the optcli extra that installs it;
- whether a build needs a GPU: TensorRT's builder does (and can abort the process without one);
  TensorRT-RTX builds ahead of time on any machine, its runtime needs an RTX GPU;
- typing: TensorRT-RTX networks, like TensorRT 11.x ones, are always strongly typed.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from optcli.backends.registry import is_installed


@dataclass(frozen=True)
class Toolkit:
    """One NVIDIA builder: its module, its extra, and what it needs to build."""

    name: str                    # the backend and --target name
    label: str                   # how messages name it
    module: str                  # import name of its Python bindings
    extra: str                   # optcli[extra] installs it
    builds_without_gpu: bool     # a serialized engine can be built on a machine without a GPU

    def installed(self) -> bool:
        """Whether its bindings are findable (nothing is imported: --help stays fast)."""
        return is_installed(self.module)

    def load(self, purpose: str) -> ModuleType:
        """The bindings module, or MissingDependencyError naming the extra."""
        from optcli.optional_imports import require

        return require(self.module, purpose)


TENSORRT = Toolkit("tensorrt", "TensorRT", "tensorrt", "tensorrt", builds_without_gpu=False)
TENSORRT_RTX = Toolkit("tensorrt-rtx", "TensorRT-RTX", "tensorrt_rtx_bindings", "tensorrt-rtx",
                       builds_without_gpu=True)
# The order `optcli check` asks them in: full TensorRT first (the --target tensorrt users deploy on).
TOOLKITS = (TENSORRT, TENSORRT_RTX)


def by_name(name: str) -> Toolkit:
    return next(t for t in TOOLKITS if t.name == name)


def is_rtx(trt: Any) -> bool:
    """Whether `trt` is TensorRT-RTX's module (its version numbers restart at 1.x)."""
    return str(getattr(trt, "__name__", "")).startswith("tensorrt_rtx")


def always_strongly_typed(trt: Any) -> bool:
    """TensorRT 11.x and TensorRT-RTX networks are always strongly typed (no flag, no precision flags);
    10.x needs NetworkDefinitionCreationFlag.STRONGLY_TYPED."""
    return is_rtx(trt) or int(str(trt.__version__).split(".")[0]) >= 11


def toolkit_of(trt: Any) -> Toolkit:
    """The Toolkit whose module `trt` is."""
    return TENSORRT_RTX if is_rtx(trt) else TENSORRT
