"""INT8 with an FP16 base, for TensorRT: the float parts of a Q/DQ graph in FP16, I/O kept FP32.

A strongly typed engine runs each layer in the type its ONNX gives it, so an FP32 graph with Q/DQ pairs
runs Conv/MatMul/Gemm in INT8 and everything between them (LayerNorm, Softmax, GELU, the residual
adds) in FP32: slower than FP16 on BERT (issue 29, F6). `trtexec --int8 --fp16` users expect INT8
where Q/DQ stands and FP16 elsewhere, which strong typing can only take from the graph: every float
tensor becomes FP16, the Q/DQ scales too, so each DequantizeLinear hands FP16 to its consumer with no
Cast between (what TensorRT fuses into an INT8 kernel). ONNX takes FP16 in Q/DQ from opset 19.
Calibration ranges were computed on the FP32 graph: casting them is what TensorRT itself would do.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from optcli.errors import StageError
from optcli.onnx_model import load_onnx, save_onnx
from optcli.optional_imports import require

QDQ_FP16_OPSET = 19  # QuantizeLinear/DequantizeLinear take and give float16 from opset 19 (onnx Operators.md)
# onnxruntime's CPU NCHWc layout transformer has crashed on FP16 graphs (as for the quantize-fp16 stage):
# the graph's own accuracy check and measurements on this CPU run without it.
RUNNER_OPTIONS = {"disabled_optimizers": ["NchwcTransformer"]}


def cast_float_parts_to_fp16(path: Path) -> None:
    """Rewrite the Q/DQ ONNX at `path` in place with its float parts in FP16 (see the module docstring)."""
    float16 = require("onnxruntime.transformers.float16", "INT8 with an FP16 base")
    model = load_onnx(path)
    try:
        converted = float16.convert_float_to_float16(model, keep_io_types=True)
        _at_least_opset(converted, QDQ_FP16_OPSET)
    except Exception as exc:  # noqa: BLE001 - the converter's or version converter's own failure
        raise StageError(f"casting the INT8 graph's float parts to FP16 failed: {type(exc).__name__}: "
                         f"{str(exc)[:200]}", hint="keep them FP32 with --no-fp16") from exc
    save_onnx(converted, path)


def _at_least_opset(model: Any, opset: int) -> None:
    """Raise the default-domain opset to `opset`: 18 -> 19 changed no op the exporters write in a way a
    graph of 18 depends on (19 only added types and modes), so the number is set; older graphs go
    through onnx's version converter (Reduce* axes became inputs in 18)."""
    entry = next((o for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if entry is None or entry.version >= opset:
        return
    if entry.version == opset - 1:
        entry.version = opset
        return
    import onnx

    converted = onnx.version_converter.convert_version(model, opset)
    model.CopyFrom(converted)
