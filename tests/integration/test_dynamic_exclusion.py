"""Dynamic INT8 keeps an excluded Gemm in float (onnxruntime renames Gemms before it checks names)."""
from __future__ import annotations

from pathlib import Path

from cpu_fixtures import mlp_onnx
from optcli.onnx_model import load_onnx, op_histogram
from optcli.quantize.flavour import resolve_flavour
from optcli.quantize.int8 import quantize


def test_excluding_a_gemm_keeps_it_float_in_dynamic_int8(tmp_path: Path) -> None:
    model = mlp_onnx(tmp_path / "mlp.onnx")
    flavour = resolve_flavour("dynamic", "cpu", is_encoder=False)
    everything = quantize(model, tmp_path / "all.onnx", flavour, None, "minmax", [])
    assert everything["integer_ops"] == 2
    one_left = quantize(model, tmp_path / "one.onnx", flavour, None, "minmax", ["fc2"])
    assert one_left["integer_ops"] == 1
    ops = op_histogram(load_onnx(tmp_path / "one.onnx", load_weights=False))
    assert ops.get("Gemm", 0) + ops.get("MatMul", 0) == 1  # fc2 stayed a float Gemm (or MatMul + Add)
