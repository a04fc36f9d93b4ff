"""Deployment: hand a compiled artifact to a serving system (Triton Inference Server today).

Imports nothing heavy: onnx is imported inside the functions that read ONNX files.
"""
from __future__ import annotations

from optcli.deploy.triton_config import TritonOptions, parse_dynamic_batching
from optcli.deploy.triton_repo import TritonExport, export_triton, sanitize_model_name

__all__ = ["TritonExport", "TritonOptions", "export_triton", "parse_dynamic_batching", "sanitize_model_name"]
