"""Import heavy or optional dependencies on demand, with an error that names the extra to install."""
from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from optcli.errors import MissingDependencyError

T = TypeVar("T")

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


# Set by the command line: this process is optcli's own, not a program that imported optcli. Only then
# may a package be imported with torch hidden when it sets up its torch support once, at import (NNCF's
# tensor functions): a host program could want that support complete later.
_OWN_PROCESS = False


def own_process() -> None:
    """Mark this process as optcli's own command line (see torch_if_own_process)."""
    global _OWN_PROCESS
    _OWN_PROCESS = True


def torch_if_own_process() -> tuple[str, ...]:
    """("torch",) to hide where this process is optcli's own, else ()."""
    return ("torch",) if _OWN_PROCESS else ()


class _Hidden(importlib.abc.MetaPathFinder):
    """Makes `names` (top-level packages) look absent to imports made on one thread: their spec has no
    loader and no origin, so `import` raises ImportError ("missing loader") and a probe of
    `importlib.util.find_spec(name).origin` sees nothing installed (NNCF's); other threads import as usual."""

    def __init__(self, names: Sequence[str], thread: int) -> None:
        self.names, self.thread = set(names), thread

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] in self.names and threading.get_ident() == self.thread:
            return importlib.machinery.ModuleSpec(fullname, None)
        return None


@contextlib.contextmanager
def hidden(names: Sequence[str]) -> Iterator[None]:
    """While active, imports on this thread find none of `names` that is not loaded yet."""
    absent = [n for n in names if n not in sys.modules]  # a loaded module is found in sys.modules anyway
    if not absent:
        yield
        return
    finder = _Hidden(absent, threading.get_ident())
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


def with_hidden(hide: Sequence[str], fn: Callable[[], T]) -> T:
    """fn() with `hide` hidden (see `hidden`), and fn() again with nothing hidden where it raised
    ImportError for one of them: it needs what was hidden after all."""
    try:
        with hidden(hide):
            return fn()
    except ImportError as exc:
        if not hide or (exc.name or "").split(".")[0] not in hide:
            raise
    return fn()


def require(module: str, purpose: str, hide: Sequence[str] = ()) -> ModuleType:
    """Import `module` or raise MissingDependencyError naming the optcli extra that provides it.
    `hide`: packages the import must not load where they are not loaded yet (an optional integration
    `module` probes for at import time and can do without); other threads still import them."""
    try:
        return with_hidden(hide, lambda: importlib.import_module(module))
    except ImportError as exc:
        top = module.split(".")[0]
        package, extra = _extra_of(top)
        if exc.name is not None and exc.name.split(".")[0] != top:
            # The package is there but one of *its* dependencies is broken: say that, not "install".
            raise MissingDependencyError(exc.name, extra, f"{purpose} (imported by {module})") from exc
        raise MissingDependencyError(package, extra, purpose) from exc


def without_package_init(module: str) -> ModuleType:
    """`module` (a file of absolute imports) loaded without running its package's __init__, where that
    package is not loaded yet: onnxruntime.tools' __init__ imports torch when it is installed (0.9 s,
    and 1.4 s of a 4.5 s compile of the sample CNN's ONNX with onnxsim's). Falls back to a plain import."""
    if module in sys.modules:
        return sys.modules[module]
    package, _, leaf = module.rpartition(".")
    alias = f"optcli._alone.{module}"
    if package in sys.modules or not package:
        return importlib.import_module(module)
    if alias in sys.modules:
        return sys.modules[alias]
    try:
        top, *rest = package.split(".")
        root = importlib.util.find_spec(top)
        locations = list(root.submodule_search_locations or []) if root else []
        spec = importlib.util.spec_from_file_location(alias, Path(locations[0], *rest, f"{leaf}.py"))
        loaded = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[alias] = loaded
        spec.loader.exec_module(loaded)  # type: ignore[union-attr]
        return loaded
    except Exception:  # noqa: BLE001 - a layout we do not know: import it the usual way
        sys.modules.pop(alias, None)
        return importlib.import_module(module)
