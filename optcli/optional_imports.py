"""Import heavy or optional dependencies on demand, with an error that names the extra to install."""
from __future__ import annotations

import importlib
from types import ModuleType

from optcli.errors import MissingDependencyError

# module name -> (pip package, optcli extra)
_EXTRAS = {
    "torch": ("torch", "cpu"),
    "onnxruntime": ("onnxruntime", "cpu"),
    "onnxsim": ("onnxsim", "cpu"),
    "onnx": ("onnx", "cpu"),
    "tensorrt": ("tensorrt", "tensorrt"),
    "openvino": ("openvino", "openvino"),
    "matplotlib": ("matplotlib", "plot"),
    "cuda": ("cuda-python", "gpu"),
    "transformers": ("transformers", "hf"),
}


def require(module: str, purpose: str) -> ModuleType:
    """Import `module` or raise MissingDependencyError naming the optcli extra that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        package, extra = _EXTRAS.get(top, (top, "cpu"))
        if exc.name is not None and exc.name.split(".")[0] != top:
            # The package is there but one of *its* dependencies is broken: say that, not "install".
            raise MissingDependencyError(exc.name, extra, f"{purpose} (imported by {module})") from exc
        raise MissingDependencyError(package, extra, purpose) from exc
