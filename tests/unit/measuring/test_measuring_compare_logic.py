"""Variant grammar, Pareto set and recommendation of `optcli compare` (no builds)."""
from __future__ import annotations

import pytest

from optcli.comparison.result import VariantResult, pareto_set, recommend
from optcli.comparison.variants import apply_variant, parse_variants
from optcli.config import CompileConfig
from optcli.errors import UsageError
from optcli.report import AccuracyResult, LatencyStats


def test_parse_precisions_and_defined_variants() -> None:
    vs = parse_variants("fp32,int8", ["dyn:precision=int8,quantize.flavour=dynamic", "nofuse:fuse.enabled=false"])
    assert [v.name for v in vs] == ["fp32", "int8", "dyn", "nofuse"]          # defined ones join the list
    assert vs[1].options == {"precision": "int8"} and vs[2].precision == "int8" and vs[3].precision == "fp32"


@pytest.mark.parametrize("names, define, message", [
    ("fp32,fp33", [], "unknown variant 'fp33'"),
    ("fp32,fp32", [], "listed twice"),
    ("", [], "no variants"),
    ("x", ["x"], "malformed --variant"),
    ("x", ["x:precision=int4"], "unknown precision 'int4'"),
    ("x", ["x:fuse.enabled"], "malformed option"),
])
def test_variant_errors(names, define, message) -> None:
    with pytest.raises(UsageError, match=message):
        parse_variants(names, define)


def test_apply_variant_sets_typed_fields() -> None:
    (v,) = parse_variants("v", ["v:precision=int8,fuse.enabled=off,export.opset=17,quantize.exclude_ops=Gemm|MatMul,"
                                "calib_samples=64"])
    config = CompileConfig(model="m.onnx")
    apply_variant(config, v)
    assert config.quantize.precision == "int8" and config.fuse.enabled is False and config.export.opset == 17
    assert config.quantize.exclude_ops == ["Gemm", "MatMul"] and config.quantize.calib_samples == 64
    (bad,) = parse_variants("b", ["b:fuse.enabled=maybe"])
    with pytest.raises(UsageError, match="not true/false"):
        apply_variant(CompileConfig(model="m.onnx"), bad)
    (unknown,) = parse_variants("u", ["u:warp.speed=9"])
    with pytest.raises(UsageError, match="unknown option 'warp.speed'"):
        apply_variant(CompileConfig(model="m.onnx"), unknown)


def _v(name: str, p50: float, b8: float, size: int, cos: float, ok: bool = True, ci: float = 0.01) -> VariantResult:
    r = VariantResult(name, "fp32", "ok", size_bytes=size, accuracy=AccuracyResult(cosine_mean=cos),
                      meets_tolerance=ok)
    r.latency_b1 = LatencyStats(p50=p50, mean=p50, batch=1)  # throughput 1000 / p50
    r.p50_ci_ms = (p50 - ci, p50 + ci)
    r.latency_b8 = LatencyStats(p50=b8, mean=b8, batch=8)  # throughput 8000 / b8
    r.p50_ci_b8_ms = (b8 - ci, b8 + ci)
    return r


def test_pareto_ignores_differences_inside_the_noise() -> None:
    fp32 = _v("fp32", 1.0, 5.0, 1000, 1.0)
    nofuse = _v("nofuse", 1.2, 5.5, 1003, 1.0)            # slower, 0.3% bigger: dominated by fp32
    int8 = _v("int8", 0.5, 2.0, 300, 0.995)               # fastest and smallest, less accurate: on the front
    twin = _v("twin", 1.005, 5.0, 1000, 1.0)              # same as fp32 within the CIs: also on the front
    assert pareto_set([fp32, nofuse, int8, twin]) == ["fp32", "int8", "twin"]


def test_recommend_fastest_within_tolerance_and_name_a_near_tie() -> None:
    fp32 = _v("fp32", 1.0, 5.0, 1000, 1.0)
    int8 = _v("int8", 0.5, 2.0, 300, 0.9, ok=False)
    fp16 = _v("fp16", 0.99, 4.0, 500, 0.9999)
    name, reason = recommend([fp32, int8, fp16])
    assert name == "fp16" and "within noise of fp32" in reason
    name, reason = recommend([int8])
    assert name is None and "misses the accuracy tolerance" in reason


def test_recommend_never_picks_a_variant_another_beats_beyond_noise() -> None:
    # fp32 has the lowest p50 by a jitter (the CIs overlap), but fp16 is faster beyond noise at
    # batch 8 and half the size: fp16 dominates fp32, so fp16 is recommended and it is on the front.
    # (CI caught this once: the fastest-p50 rule alone recommended a variant outside the Pareto set.)
    fp32 = _v("fp32", 1.00, 5.0, 1000, 1.0)
    fp16 = _v("fp16", 1.01, 4.0, 500, 1.0)
    int8 = _v("int8", 0.5, 2.0, 300, 0.9, ok=False)
    variants = [fp32, fp16, int8]
    name, reason = recommend(variants)
    assert name == "fp16" and name in pareto_set(variants) and "fp32" not in pareto_set(variants)
    assert "fp32 had the lowest p50" in reason and "within noise of fp32" in reason
