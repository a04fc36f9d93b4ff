"""`optcli serve`: a real Triton Inference Server (the one the nvidia-pytriton wheel ships, the
`serve` extra) serving a compiled artifact through Triton's Python backend and optcli's runner.

bundled_triton.py finds the server in the wheel and sets up its environment; server.py writes the
repository (export-triton's Python-backend target) and runs the process; health.py talks to it;
triton_model.py is the model that runs inside Triton. Imports nothing heavy.
"""
from __future__ import annotations

from optcli.serve.server import ServeOptions, TritonServer

__all__ = ["ServeOptions", "TritonServer"]
