"""NNCF's weight statistics folded in numpy before OpenVINO compiles the statistics model (issue 16:
OpenVINO's reference constant folding was 3.5 s of BERT-base's 3.9 s statistics compile). The folded
values must be exact: the quantized IR is the same bytes with and without the fold."""
from __future__ import annotations

import filecmp
from pathlib import Path

import numpy as np
import pytest

from compile_testkit import make_mlp
from optcli.calibration.dataset import SampleSet

ov = pytest.importorskip("openvino")


def _reductions_model() -> object:
    """y = x @ W, with statistics like NNCF's: abs-max and min of W per column, max of x (an activation)."""
    from openvino import opset13 as ops

    rng = np.random.default_rng(0)
    x = ops.parameter([2, 4], np.float32, name="x")
    w = ops.constant(rng.standard_normal((4, 3)).astype(np.float32))
    y = ops.matmul(x, w, False, False, name="y")
    absmax = ops.reduce_max(ops.abs(w), np.array([0], np.int64), keep_dims=True, name="w_absmax")
    wmin = ops.reduce_min(w, np.array(-1, np.int64), keep_dims=False, name="w_min")
    xmax = ops.reduce_max(x, np.array([0, 1], np.int64), keep_dims=False, name="x_max")
    outputs = [y, absmax, wmin, xmax]
    for node, name in zip(outputs, ["y", "w_absmax", "w_min", "x_max"]):
        node.output(0).get_tensor().set_names({name})
    return ov.Model([ops.result(n) for n in outputs], [x], "stats")


def _run(model: object, x: np.ndarray) -> dict[str, np.ndarray]:
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": ov.Type.f32})
    return {next(iter(out.get_names())): value for out, value in compiled(x).items()}


def test_constant_reductions_become_constants_with_their_names_and_values() -> None:
    from optcli.backends.openvino.weight_statistics import fold_constant_reductions

    x = np.arange(8, dtype=np.float32).reshape(2, 4) - 3
    model = _reductions_model()
    before = _run(model, x)
    assert fold_constant_reductions(model) == 2  # W's two statistics; x's max is an activation's
    kinds = [op.get_type_name() for op in model.get_ordered_ops()]
    assert kinds.count("ReduceMax") == 1 and "ReduceMin" not in kinds and "Abs" not in kinds
    after = _run(model, x)
    assert set(after) == set(before) == {"y", "w_absmax", "w_min", "x_max"}
    for name, value in before.items():
        assert after[name].shape == value.shape and np.array_equal(after[name], value), name


@pytest.mark.parametrize("transformer", [False, True])
def test_nncf_int8_folds_weight_statistics_and_writes_the_same_ir(tmp_path: Path, transformer: bool,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("nncf")
    import contextlib

    from optcli.backends.openvino import ir

    model = make_mlp(tmp_path / "mlp.onnx")
    calib = SampleSet({"x": np.random.default_rng(2).standard_normal((20, 32)).astype(np.float32)}, None, "t", "npz")
    kwargs = dict(transformer=transformer, exclude_nodes=[], exclude_ops=[], facts={}, precision="int8")
    xml, facts = ir.nncf_int8(model, tmp_path / "folded", calib, **kwargs)
    # NNCF collected both weights' statistics through the folded reducers: an NNCF that stops building
    # its statistics engine this way fails here (the 3.5 s would be back), not silently.
    assert facts["weight_statistics_folded"] >= 2
    monkeypatch.setattr(ir, "folded_weight_statistics", lambda: contextlib.nullcontext({"folded": 0}))
    plain, plain_facts = ir.nncf_int8(model, tmp_path / "plain", calib, **kwargs)
    assert plain_facts["weight_statistics_folded"] == 0
    assert plain_facts["fake_quantize"] == facts["fake_quantize"] > 0
    assert filecmp.cmp(xml.with_suffix(".bin"), plain.with_suffix(".bin"), shallow=False)
