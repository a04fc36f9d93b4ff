"""Import heavy or optional dependencies on demand, with an error that names the extra to install."""
from __future__ import annotations

import importlib
from types import ModuleType

from optcli.errors import MissingDependencyError

# module name -> (pip package, optcli extra), for what is not a backend (a backend's descriptor names its
# package and extra: optcli/backends/registry.py).
_EXTRAS = {
    "onnxsim": ("onnxsim", "cpu"),
    "onnx": ("onnx", "cpu"),
    "matplotlib": ("matplotlib", "plot"),
    "cuda": ("cuda-python", "gpu"),
    "transformers": ("transformers", "hf"),
}


def _extra_of(top: str) -> tuple[str, str]:
    from optcli.backends.registry import all_backends

    for backend in all_backends():
        if backend.package == top:
            return top, backend.extra or "cpu"
    return _EXTRAS.get(top, (top, "cpu"))


def require(module: str, purpose: str) -> ModuleType:
    """Import `module` or raise MissingDependencyError naming the optcli extra that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        package, extra = _extra_of(top)
        if exc.name is not None and exc.name.split(".")[0] != top:
            # The package is there but one of *its* dependencies is broken: say that, not "install".
            raise MissingDependencyError(exc.name, extra, f"{purpose} (imported by {module})") from exc
        raise MissingDependencyError(package, extra, purpose) from exc
