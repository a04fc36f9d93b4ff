"""ONNX Runtime's offline graph optimizer: run a session once and keep the optimized graph it writes.
Models near protobuf's 2 GiB limit keep their weights in an external data file beside the graph."""
from __future__ import annotations

from pathlib import Path

from optcli.errors import StageError
from optcli.onnx_model import is_large
from optcli.optional_imports import require

LEVELS = ("basic", "extended")


def optimize_offline(src: Path, dst: Path, level: str, hint: str) -> None:
    """Write `src` optimized at `level` to `dst` (weights external where the model is large)."""
    ort = require("onnxruntime", "ONNX Runtime's graph optimizer")
    so = ort.SessionOptions()
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED if level == "extended"
                                   else ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)
    so.optimized_model_filepath = str(dst)
    so.log_severity_level = 3
    if is_large(src):
        # Without these, ORT tries to serialize the optimized model into one protobuf and fails at 2 GiB.
        so.add_session_config_entry("session.optimized_model_external_initializers_file_name", dst.name + ".data")
        so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    try:
        ort.InferenceSession(str(src), sess_options=so, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise StageError(f"onnxruntime's optimizer failed: {str(exc).strip().splitlines()[0][:240]}",
                         hint=hint) from exc
