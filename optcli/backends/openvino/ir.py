"""Make OpenVINO IRs: ONNX -> IR with the precision recorded, and NNCF INT8 from calibration data.

Weights stay FP32 in the IR (`compress_to_fp16=False`): OpenVINO's save_model halves FP32 weights
to FP16 by default, which changes the numbers the accuracy gate measured.
"""
from __future__ import annotations

import contextlib
import io
import logging
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from optcli.backends.openvino.runner import MODEL_FILE, RT_INFO_PRECISION
from optcli.backends.openvino.weight_statistics import folded_weight_statistics
from optcli.calibration.dataset import SampleSet
from optcli.errors import StageError
from optcli.optional_imports import require, torch_if_own_process, with_hidden

if TYPE_CHECKING:
    import numpy as np

# ONNX op types -> the OpenVINO op types they become, for --exclude-op in NNCF's ignored scope.
OV_OP_TYPES = {"Conv": ["Convolution", "GroupConvolution"], "ConvTranspose": ["ConvolutionBackpropData"],
               "Gemm": ["MatMul"], "MatMul": ["MatMul"], "Add": ["Add"], "Mul": ["Multiply"]}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:240]


def save_ir(model: Any, folder: Path, precision: str, facts: dict[str, str]) -> Path:
    """Save `model` as folder/model.xml + model.bin with optcli's records in its rt_info."""
    ov = require("openvino", "writing OpenVINO models")
    model.set_rt_info(precision, RT_INFO_PRECISION)
    for key, value in facts.items():
        model.set_rt_info(str(value), ["optcli", key])
    folder.mkdir(parents=True, exist_ok=True)
    xml = folder / MODEL_FILE
    ov.save_model(model, str(xml), compress_to_fp16=False)
    return xml


def convert_onnx(onnx_path: Path, folder: Path, precision: str, facts: dict[str, str]
                 ) -> tuple[Path, dict[str, object]]:
    """ONNX -> IR; returns (model.xml, build facts)."""
    ov = require("openvino", "converting ONNX models to OpenVINO")
    t0 = time.perf_counter()
    try:
        model = ov.convert_model(str(onnx_path))
    except Exception as exc:  # OpenVINO's frontend raises OpConversionFailure and plain RuntimeErrors
        raise StageError(f"OpenVINO cannot convert {onnx_path.name}: {_first_line(exc)}",
                         hint="use --backend onnxruntime") from exc
    xml = save_ir(model, folder, precision, facts)
    return xml, {"from": onnx_path.name, "seconds": round(time.perf_counter() - t0, 3), "openvino": ov.__version__}


# Rows per NNCF statistics call. Batches of 8 (rows of similar length together, so an unpadded graph
# computes little padding) made NNCF's quantize 7-27% faster than one row at a time on ResNet-50, BERT-base
# and the pretrained MiniLM, with the same held-out cosine to 4 digits (docs/benchmarks/cpu.md, issue 16).
CALIBRATION_BATCH = 8


def _calibration_items(model: Any, names: list[str], calib: SampleSet) -> tuple[list[dict[str, np.ndarray]], int]:
    """NNCF's dataset items and their batch: CALIBRATION_BATCH rows where every input's first dim is
    dynamic (a model exported for batch 1 gets one row at a time), ordered by the attention mask's extent."""
    import numpy as np

    from optcli.accuracy import sequence_mask
    from optcli.length_groups import row_extents

    n = len(calib)
    shapes = [p.get_partial_shape() for p in model.inputs]
    if n <= CALIBRATION_BATCH or not all(s.rank.is_static and s.rank.get_length() > 0 and s[0].is_dynamic
                                         for s in shapes):
        return [{k: calib.arrays[k][i:i + 1] for k in names} for i in range(n)], 1
    mask = sequence_mask({k: calib.arrays[k] for k in names})
    order = np.argsort(row_extents(mask), kind="stable") if mask is not None else np.arange(n)
    return [{k: calib.arrays[k][order[i:i + CALIBRATION_BATCH]] for k in names}
            for i in range(0, n, CALIBRATION_BATCH)], CALIBRATION_BATCH


def _ignored_scope(nncf: Any, nodes: list[str], op_types: list[str]) -> Any:
    """The user's --exclude / --exclude-op as NNCF's ignored scope. OpenVINO names a converted node
    after the ONNX node, or `<name>/<part>` where one node became several (Gemm -> MatMul + Add)."""
    patterns = [f"^{re.escape(n)}(/.*)?$" for n in nodes]
    types = sorted({t for op in op_types for t in OV_OP_TYPES.get(op, [op])})
    if not patterns and not types:
        return None
    return nncf.IgnoredScope(patterns=patterns, types=types, validate=False)


def _quantize(nncf: Any, model: Any, items: list[dict[str, np.ndarray]], kwargs: dict[str, object]
              ) -> tuple[Any, int]:
    """nncf.quantize with torch hidden (an ov.Model never needs it), again without where NNCF did need it;
    (the quantized model, how many weight statistics were folded)."""
    def call() -> tuple[Any, int]:
        with folded_weight_statistics() as fold:
            return nncf.quantize(model, nncf.Dataset(items), **kwargs), fold["folded"]

    return with_hidden(torch_if_own_process(), call)


def nncf_int8(onnx_path: Path, folder: Path, calib: SampleSet, *, transformer: bool, exclude_nodes: list[str],
              exclude_ops: list[str], facts: dict[str, str], precision: str,
              overflow_fix: str | None = None) -> tuple[Path, dict[str, object]]:
    """NNCF post-training INT8 of the FP32 ONNX (as an IR) from the calibration samples, with NNCF's
    defaults except: every sample is used (subset_size), transformer encoders get
    model_type=TRANSFORMER (its SmoothQuant and placement; without it a pretrained sentence encoder
    fell to cosine 0.63 here), the user's exclusions become its ignored scope. `overflow_fix`
    (NNCF's OverflowFix value: enable | first_layer_only | disable; None: NNCF's default,
    first_layer_only) is for measurements (benchmarks/isa_int8.py): the recipes keep NNCF's default."""
    ov = require("openvino", "NNCF INT8 for OpenVINO")
    # NNCF imports torch where it is installed (its torch tensor functions at import, its backend check in
    # quantize: 0.9 s here) though an ov.Model never needs it; it does without it where it finds none.
    # Hidden in optcli's own process only: NNCF sets up its torch support once, and a program that
    # imported optcli may want it.
    nncf = require("nncf", "NNCF INT8 for OpenVINO", hide=torch_if_own_process())
    t0 = time.perf_counter()
    model = ov.convert_model(str(onnx_path))
    names = [p.get_any_name() for p in model.inputs]
    items, batch = _calibration_items(model, names, calib)
    kwargs: dict[str, object] = {"subset_size": len(items)}  # every item: NNCF counts items, not rows
    if transformer:
        kwargs["model_type"] = nncf.ModelType.TRANSFORMER
    scope = _ignored_scope(nncf, exclude_nodes, exclude_ops)
    if scope is not None:
        kwargs["ignored_scope"] = scope
    if overflow_fix is not None:
        from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, OverflowFix

        kwargs["advanced_parameters"] = AdvancedQuantizationParameters(overflow_fix=OverflowFix(overflow_fix))
    # NNCF logs at INFO and draws progress bars on stdout/stderr; a library stays quiet.
    logging.getLogger("nncf").setLevel(logging.ERROR)
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            quantized, folded = _quantize(nncf, model, items, kwargs)
    except Exception as exc:
        raise StageError(f"NNCF quantization failed: {type(exc).__name__}: {_first_line(exc)}",
                         hint="turn the NNCF candidate off with [cpu] nncf = \"off\"") from exc
    xml = save_ir(quantized, folder, precision, facts)
    ops = [op.get_type_name() for op in quantized.get_ordered_ops()]
    return xml, {"from": onnx_path.name, "seconds": round(time.perf_counter() - t0, 3), "nncf": nncf.__version__,
                 "model_type": "transformer" if transformer else "default", "calibration_samples": len(calib),
                 "overflow_fix": overflow_fix or "first_layer_only (NNCF's default)",
                 "calibration_batch": batch, "weight_statistics_folded": folded,
                 "fake_quantize": ops.count("FakeQuantize"), "ignored_scope": bool(scope)}
