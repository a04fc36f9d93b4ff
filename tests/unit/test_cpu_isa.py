"""The CPU's capability set (optcli/cpu/isa.py) and the decisions keyed on it, by injecting the set: with
VNNI today's order and recipes; without it (AVX2 only) the overflow-safe INT8 recipes and no assumption that
INT8 beats FP32. No hardware needed, except the probe's own test, which reads this machine."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from optcli.backends.onnxruntime.priors import INPUT as ORT_INPUT
from optcli.backends.openvino.priors import NNCF, NNCF_TRANSFORMER, S8S8
from optcli.cpu import isa
from optcli.cpu.int8_vs_fp32 import Versus, assumed_faster
from optcli.cpu.search_run import features
from optcli.quantize import flavour
from optcli.search.priors import FP32_BEST, Features, all_priors, predict
from optcli.search.search import effective_ratio

VNNI = isa.from_names({"avx2", "avx512", "vnni", "bf16"})
AVX2 = isa.from_names({"avx2"})
ARM = isa.from_names(set(), arch="aarch64")
ENCODER_OPS = {"MatMul": 36, "Softmax": 6, "LayerNormalization": 13}
CONV_OPS = {"Conv": 53, "Relu": 49}


def _features(cpu: isa.CpuIsa, ops: dict[str, int], encoder: bool, precision: str = "int8") -> Features:
    with isa.use(cpu):
        return features(precision, ops, encoder, 90 << 20, flavour.u8s8_saturates())


def test_the_probe_returns_a_well_formed_set_here() -> None:
    found = isa.probe()
    assert isinstance(found, isa.CpuIsa) and all(isinstance(getattr(found, n), bool) for n in isa.NAMES)
    j = found.to_json()
    assert set(isa.NAMES) <= set(j) and j["int8"] in ("vnni", "plain") and j["label"]
    assert set(j["sources"]) == set(isa.NAMES)
    assert set(j["sources"].values()) <= {"openvino", "torch", "/proc/cpuinfo", "unknown"}
    flags_line = next((ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("flags")), None) \
        if Path("/proc/cpuinfo").exists() else None
    if flags_line is not None and found.x86:  # the runtimes and the kernel agree on this machine
        flags = set(flags_line.split(":", 1)[1].split())
        assert found.avx2 == ("avx2" in flags)
        assert found.vnni == bool(flags & {"avx512_vnni", "avx_vnni", "amx_int8"})
        assert found.avx512 == ("avx512f" in flags)
    assert isa.probe() is found  # once per process


def test_the_probe_asks_torch_only_where_it_is_already_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    assert isa._torch() == {}


def test_an_injected_set_is_what_every_decision_reads() -> None:
    with isa.use(AVX2):
        assert isa.detect() is AVX2 and flavour.u8s8_saturates()
        with isa.use(VNNI):
            assert isa.detect() is VNNI and not flavour.u8s8_saturates()
        assert isa.detect() is AVX2
    assert isa.detect() is isa.probe()
    with pytest.raises(ValueError, match="unknown CPU capabilities"):
        isa.from_names({"avx2", "sse9"})


@pytest.mark.parametrize(("cpu", "int8", "label", "saturates"), [
    (VNNI, "vnni", "AVX-512 VNNI + BF16", False),
    (AVX2, "plain", "AVX2 (no VNNI)", True),
    (isa.from_names({"avx2", "avx512", "amx", "bf16"}), "vnni", "AVX-512 AMX + BF16", False),
    (ARM, "plain", "aarch64", False),  # no VPMADDUBSW: nothing saturates, no 7-bit weights
])
def test_the_set_names_its_int8_class(cpu: isa.CpuIsa, int8: str, label: str, saturates: bool) -> None:
    assert (cpu.int8, cpu.label, cpu.u8s8_saturates) == (int8, label, saturates)


def _order(feats: Features, keys: list[str]) -> list[str]:
    return sorted(keys, key=lambda k: (effective_ratio(predict(feats, k)), keys.index(k)))


def test_with_vnni_the_priors_keep_todays_order_and_assume_int8_wins() -> None:
    enc, cnn = _features(VNNI, ENCODER_OPS, True), _features(VNNI, CONV_OPS, False)
    assert enc.int8_isa == cnn.int8_isa == "vnni"
    assert _order(enc, [ORT_INPUT, S8S8, NNCF, NNCF_TRANSFORMER])[0] == NNCF_TRANSFORMER
    assert _order(cnn, [ORT_INPUT, S8S8, NNCF])[0] == NNCF
    assert assumed_faster(enc) and assumed_faster(cnn)  # nothing measured against FP32


def test_without_vnni_no_int8_win_over_fp32_is_assumed_without_evidence_from_such_a_cpu() -> None:
    for feats in (_features(AVX2, ENCODER_OPS, True), _features(AVX2, {"Gemm": 4}, False)):
        assert feats.int8_isa == "plain"
        assert not assumed_faster(feats)
        assert predict(feats, FP32_BEST).ratio <= 1.0
    # A large CNN's INT8 win was measured without VNNI (ResNet-50): that evidence, and only such, counts.
    cnn = _features(AVX2, CONV_OPS, False)
    assert assumed_faster(cnn)
    assert all(p.measured_on == "avx2" for p in all_priors() if p.key == FP32_BEST and p.int8_isa == "plain")
    assert assumed_faster(_features(AVX2, {"Gemm": 4}, False, precision="fp32"))  # only INT8 is compared


def test_every_prior_names_the_isa_it_was_measured_on_and_vnni_rows_widen_without_it() -> None:
    assert all(p.measured_on in ("vnni", "avx2") for p in all_priors())
    assert all(p.measured_on == "avx2" for p in all_priors() if p.int8_isa == "plain")
    vnni, plain = predict(_features(VNNI, CONV_OPS, False), NNCF), predict(_features(AVX2, CONV_OPS, False), NNCF)
    assert plain.ratio == vnni.ratio and plain.spread == 2 * vnni.spread and "(measured with VNNI)" in plain.evidence


@pytest.mark.parametrize(("cpu", "u8s8_7bit"), [(VNNI, False), (AVX2, True), (ARM, False)])
def test_int8_recipes_follow_the_isa(cpu: isa.CpuIsa, u8s8_7bit: bool) -> None:
    with isa.use(cpu):
        assert flavour.reduce_range(flavour.TABLE["qdq-u8s8"]) is u8s8_7bit
        # s8/s8 (TensorRT's and OpenVINO's re-quantized) and dynamic keep 8 bits: measured, no gain (docs)
        assert not flavour.reduce_range(flavour.TABLE["qdq-s8s8"])
        assert not flavour.reduce_range(flavour.TABLE["dynamic"])


def test_nncfs_overflow_fix_halves_the_weight_range(tmp_path: Path) -> None:
    """The recipe's value reaches NNCF: every MatMul weight of the IR fits 7 bits (|q| <= 64) with it, and
    uses the full int8 range with NNCF's default (its first-layer fix touches convolutions only)."""
    pytest.importorskip("nncf")
    ov = pytest.importorskip("openvino")
    from compile_testkit import make_mlp
    from optcli.backends.openvino import ir
    from optcli.calibration.dataset import SampleSet

    model = make_mlp(tmp_path / "mlp.onnx")
    calib = SampleSet({"x": np.random.default_rng(2).standard_normal((20, 32)).astype(np.float32)}, None, "t", "npz")
    widest = {}
    for fix in (None, "enable"):
        xml, facts = ir.nncf_int8(model, tmp_path / str(fix), calib, transformer=False, exclude_nodes=[],
                                  exclude_ops=[], facts={}, precision="int8", overflow_fix=fix)
        assert facts["overflow_fix"].startswith(fix or "first_layer_only")
        weights = [op.get_data() for op in ov.Core().read_model(xml).get_ordered_ops()
                   if op.get_type_name() == "Constant" and op.get_element_type() == ov.Type.i8]
        assert len(weights) == 2
        widest[fix] = max(int(np.abs(w.astype(np.int32)).max()) for w in weights)
    assert widest == {None: 127, "enable": 64}


@pytest.mark.parametrize(("int8_ms", "fp32_ms", "said"), [(10.0, 10.2, True), (12.0, 10.0, True), (7.0, 10.0, False)])
def test_the_report_says_in_one_line_where_int8_is_not_faster(int8_ms: float, fp32_ms: float, said: bool) -> None:
    v = Versus("openvino-int8-nncf", int8_ms, "FP32 ONNX on onnxruntime", fp32_ms, AVX2.label, 5)
    note = v.note()
    assert (note is not None) is said and v.to_json()["int8_faster"] is (not said)
    if note:
        assert "\n" not in note and "AVX2 (no VNNI)" in note and f"{int8_ms:.3f} ms" in note


def test_the_report_environment_records_the_capability_set() -> None:
    from optcli.environment import environment
    from optcli.report.markdown import _isa
    from optcli.report.records import EnvironmentInfo

    with isa.use(AVX2):
        env = environment()
    assert env["cpu_isa"]["vnni"] is False and env["cpu_isa"]["int8"] == "plain"
    record = EnvironmentInfo.from_json(env)
    assert _isa(record.cpu_isa) == ", AVX2 (no VNNI)" and _isa(None) == ""
    assert "cpu_isa" not in EnvironmentInfo.from_json({}).to_json()  # older reports stay as they were
