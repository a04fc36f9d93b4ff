"""Find the Triton Inference Server that the `nvidia-pytriton` wheel ships (the `serve` extra), and
set up what its Python backend needs to run optcli's model.py in this Python environment.

The wheel holds `pytriton/tritonserver/bin/tritonserver`, the Python backend
(`backends/python/libtriton_python.so`), one backend stub per Python version
(`python_backend_stubs/3.X/triton_python_backend_stub`) and the server's shared libraries
(`nvidia_pytriton.libs`). PyTriton's own Python package is never imported (its proxy fails on
Python 3.11.7, pytriton#51); only these files are used:

- a private backend folder per server (symlinks: the Python backend plus the stub for this Python),
  so the installed wheel is never modified;
- LD_LIBRARY_PATH: first the folder of *this* interpreter's libpython, so the stub embeds the same
  Python build whose standard library it loads (the stub otherwise binds the system libpython3.X,
  and a 3.11.2 libpython under a 3.11.7 stdlib is what breaks `threading.RLock` in pytriton#51),
  then the wheel's libraries;
- PATH starting with this interpreter's folder, so the embedded Python finds this environment's
  site-packages, and PYTHONPATH with the folder that holds the running optcli, so the model runs
  the same optcli code as the command that started the server.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from optcli.errors import MissingDependencyError, UsageError

PACKAGE = "nvidia-pytriton"
_PURPOSE = "optcli serve (it ships the Triton Inference Server binary and its Python backend)"


@dataclass(frozen=True)
class BundledTriton:
    """The server files inside the installed wheel."""

    root: Path          # .../site-packages/pytriton/tritonserver

    @property
    def binary(self) -> Path:
        return self.root / "bin" / "tritonserver"

    @property
    def python_backend(self) -> Path:
        return self.root / "backends" / "python"

    @property
    def stub(self) -> Path:
        return self.root / "python_backend_stubs" / f"{sys.version_info.major}.{sys.version_info.minor}" \
            / "triton_python_backend_stub"

    @property
    def libs(self) -> Path:
        return self.root.parent.parent / "nvidia_pytriton.libs"

    def backend_dir(self, workdir: Path) -> Path:
        """`workdir/backends/python`: the wheel's Python backend with this Python's stub beside it."""
        folder = workdir / "backends" / "python"
        folder.mkdir(parents=True, exist_ok=True)
        for item in sorted(self.python_backend.iterdir()):
            if item.is_file():  # libtriton_python.so, triton_python_backend_utils.py (not a __pycache__)
                (folder / item.name).symlink_to(item)
        (folder / self.stub.name).symlink_to(self.stub)
        return folder.parent

    def environment(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The server's environment (see the module docstring for why each path is there)."""
        env = dict(os.environ if base is None else base)
        libdir = sysconfig.get_config_var("LIBDIR")
        libpython = sysconfig.get_config_var("LDLIBRARY")
        first = [libdir] if libdir and libpython and (Path(libdir) / libpython).exists() else []
        env["LD_LIBRARY_PATH"] = _join([*first, str(self.libs)], env.get("LD_LIBRARY_PATH"))
        env["PATH"] = _join([str(Path(sys.executable).parent)], env.get("PATH"))
        # The folder holding this optcli package (optcli/serve/bundled_triton.py -> its grandparent's parent).
        env["PYTHONPATH"] = _join([str(Path(__file__).resolve().parents[2])], env.get("PYTHONPATH"))
        return env


def _join(first: list[str], rest: str | None) -> str:
    return os.pathsep.join(first + ([rest] if rest else []))


def find_bundled_triton() -> BundledTriton:
    """The installed wheel's server, or MissingDependencyError naming the `serve` extra."""
    try:
        spec = importlib.util.find_spec("pytriton")  # locates the package without importing it
    except ImportError:
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(PACKAGE, "serve", _PURPOSE)
    triton = BundledTriton(Path(next(iter(spec.submodule_search_locations))) / "tritonserver")
    if not triton.binary.is_file() or not (triton.python_backend / "libtriton_python.so").is_file():
        raise UsageError(f"{PACKAGE} is installed but has no server binary at {triton.binary}",
                         hint="reinstall it: pip install --force-reinstall 'optcli[serve]' (Linux x86_64 only)")
    if not triton.stub.is_file():
        have = sorted(p.name for p in triton.stub.parent.parent.iterdir()) if triton.stub.parent.parent.is_dir() else []
        raise UsageError(f"{PACKAGE} has no Python backend stub for Python "
                         f"{sys.version_info.major}.{sys.version_info.minor}",
                         hint=f"run optcli serve from a Python it has a stub for ({', '.join(have) or 'none'})")
    return triton
