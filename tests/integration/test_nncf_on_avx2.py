"""NNCF's candidates on a CPU without VNNI build with NNCF's default overflow fix: 7-bit weights on every
MatMul lowered a pretrained encoder's cosine there (0.99582 -> 0.99467, docs/benchmarks/cpu.md), while
onnxruntime's u8/s8 Q/DQ keeps its 7-bit weights (a measured fix on the same CPU)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cpu_fixtures import QUICK, mlp_onnx, npz_dir
from optcli import api
from optcli.cpu import isa

pytest.importorskip("nncf")
ov = pytest.importorskip("openvino")

AVX2 = isa.from_names({"avx2"})


def _int8_weights_widest(xml: Path) -> int:
    weights = [op.get_data() for op in ov.Core().read_model(str(xml)).get_ordered_ops()
               if op.get_type_name() == "Constant" and op.get_element_type() == ov.Type.i8]
    assert weights, "no int8 weights in the IR"
    return max(int(np.abs(w.astype(np.int32)).max()) for w in weights)


def test_nncf_keeps_8_bit_weights_without_vnni_and_u8s8_keeps_7(tmp_path: Path) -> None:
    model = mlp_onnx(tmp_path / "mlp.onnx")
    calib = npz_dir(tmp_path, "calib", seed=1)
    with isa.use(AVX2):
        r = api.compile(model, out=tmp_path / "o", target="cpu", bench=False, check=False, int8=True, calib=calib,
                        cpu={**QUICK, "search": "thorough", "keep_candidates": True})
    assert r.status == "ok", r.error
    cands = {c["name"]: c for c in r.stage("build").details["candidates"]}
    nncf = cands["openvino-int8-nncf"]
    assert nncf["status"] in ("passed", "failed"), nncf.get("reason")
    assert nncf["build"]["overflow_fix"].startswith("first_layer_only")
    built = sorted((tmp_path / "o").rglob("*.xml"))
    nncf_irs = [x for x in built if "nncf" in str(x)]
    assert nncf_irs, built
    assert _int8_weights_widest(nncf_irs[0]) == 127
    assert r.stage("quantize-int8").details["flavour"]["weights_7bit"] is True
