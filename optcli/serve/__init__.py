"""`optcli serve`: a real Triton Inference Server (the one the nvidia-pytriton wheel ships, the
`serve` extra) serving a compiled artifact through Triton's Python backend and optcli's runner.

bundled_triton.py finds the server in the wheel and sets up its environment; server.py writes the
repository (export-triton's Python-backend target) and runs the process; health.py talks to it;
http_guard.py is the HTTP port, a proxy that checks each request (request_check.py) before Triton
sees it; supervise.py restarts a server that died; leftovers.py owns the private folder and shared
memory and removes a dead server's; triton_model.py is the model that runs inside Triton. Imports
nothing heavy.
"""
from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

from optcli.serve.server import ServeOptions, TritonServer, start_server

__all__ = ["ServeOptions", "TritonServer"]


class _CallableModule(types.ModuleType):
    """Importing this package makes `optcli.serve` the package, not the API function `optcli.serve()`
    (Python sets a package's attribute to each submodule it imports): the first serve made every later
    `optcli.serve(...)` in the process fail with "'module' object is not callable". Calling the package
    is calling the API."""

    def __call__(self, artifact: str | Path, **options: Any) -> TritonServer:
        return start_server(artifact, **options)


sys.modules[__name__].__class__ = _CallableModule
