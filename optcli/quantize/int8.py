"""Produce an INT8 ONNX: static Q/DQ from cached calibration ranges, or ONNX Runtime's dynamic INT8."""
from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
from pathlib import Path

from optcli.errors import StageError
from optcli.library_logs import captured_logs, root_logger_captured
from optcli.onnx_model import (
    copy_external_data,
    external_data_files,
    graph_view,
    is_large,
    load_onnx,
    save_onnx,
    sort_topologically,
)
from optcli.optional_imports import require
from optcli.quantize.flavour import Flavour, reduce_range


def name_nodes(src: Path, dst: Path) -> list[str]:
    """Copy the model giving every node a unique name (exclusion works by node name); external weights
    are copied, not loaded. A graph whose nodes are already named, unique and in order (exporters' and
    onnxruntime's are) is linked, not rewritten: re-serializing BERT-base cost 2 s per copy."""
    view = graph_view(src)
    names = [n.name for n in view.graph.node]
    if all(names) and len(set(names)) == len(names) and not sort_topologically(view.graph) \
            and not external_data_files(src):
        dst.unlink(missing_ok=True)
        try:
            os.link(src, dst)  # save_onnx unlinks before it writes: a write to dst never reaches src
        except OSError:
            shutil.copyfile(src, dst)
        return names
    model = load_onnx(src, load_weights=False)
    copy_external_data(model, src, dst)
    seen: set[str] = set()
    for i, node in enumerate(model.graph.node):
        if not node.name or node.name in seen:
            node.name = f"{node.op_type}_{i}"
        seen.add(node.name)
    save_onnx(model, dst)
    return [n.name for n in model.graph.node]


def candidate_nodes(model_path: Path, flavour: Flavour) -> list[str]:
    """Nodes the flavour would quantize, in graph order."""
    model = graph_view(model_path)
    return [n.name for n in model.graph.node if n.op_type in flavour.op_types]


def quantize(src: Path, dst: Path, flavour: Flavour, ranges: Path | None, method: str,
             exclude: list[str]) -> dict[str, int]:
    """Write the INT8 model for `flavour` to `dst`, keeping `exclude` nodes in float."""
    q = require("onnxruntime.quantization", "INT8 quantization")
    logging.getLogger("onnxruntime").setLevel(logging.ERROR)
    try:
        large = is_large(src)  # the INT8 model is ~4x smaller, but ORT builds it before it knows
        # quantize_static warns through the root logger (logging.warning): captured, kept for --debug.
        with contextlib.redirect_stdout(io.StringIO()), captured_logs("onnxruntime"), root_logger_captured():
            if flavour.static:
                q.quantize_static(
                    str(src), str(dst), calibration_data_reader=None, quant_format=q.QuantFormat.QDQ,
                    op_types_to_quantize=list(flavour.op_types), per_channel=True,
                    reduce_range=reduce_range(flavour),
                    activation_type=q.QuantType.QInt8 if flavour.activation_signed else q.QuantType.QUInt8,
                    weight_type=q.QuantType.QInt8, nodes_to_exclude=list(exclude), use_external_data_format=large,
                    calibrate_method={"minmax": q.CalibrationMethod.MinMax, "entropy": q.CalibrationMethod.Entropy,
                                      "percentile": q.CalibrationMethod.Percentile}[method],
                    calibration_cache_path=str(ranges),
                    extra_options={"ActivationSymmetric": flavour.activation_symmetric, "WeightSymmetric": True,
                                   "QuantizeBias": flavour.quantize_bias})
            else:
                # quantize_dynamic first rewrites each Gemm as a MatMul named `<name>_MatMul` (+ an Add)
                # and only then checks nodes_to_exclude: without the renamed twin, excluding a Gemm
                # silently does nothing (onnxruntime 1.31).
                excluded = list(exclude) + [f"{n}_MatMul" for n in exclude]
                q.quantize_dynamic(str(src), str(dst), op_types_to_quantize=list(flavour.op_types),
                                   per_channel=False, reduce_range=False, weight_type=q.QuantType.QInt8,
                                   nodes_to_exclude=excluded, use_external_data_format=large,
                                   extra_options={"MatMulConstBOnly": True})
    except Exception as exc:
        first = str(exc).splitlines()[0][:200] if str(exc) else ""
        raise StageError(f"INT8 quantization failed: {type(exc).__name__}: {first}",
                         hint="exclude the failing node with --exclude NODE, or its op type with --exclude-op") from exc
    return int8_op_counts(dst)


def int8_op_counts(path: Path) -> dict[str, int]:
    """What really runs in INT8: activation Q/DQ pairs and integer ops (a node left 'quantizable'
    may get none, e.g. a lone Relu)."""
    model = graph_view(path)
    ops = [n.op_type for n in model.graph.node]
    return {"quantize_linear": ops.count("QuantizeLinear"), "dequantize_linear": ops.count("DequantizeLinear"),
            "dynamic_quantize": sum(o.startswith("DynamicQuantize") for o in ops),
            "integer_ops": sum(o in ("MatMulInteger", "ConvInteger", "QAttention", "DynamicQuantizeMatMul")
                               for o in ops)}
