"""`optcli compare`: variants built through the pipeline (cached stages reused), one interleaved
measurement, Pareto set, recommendation, compare.json/compare.md, exit 3 when none is accurate enough."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import optcli
from measuring_models import run_cli
from optcli.backends.registry import is_installed as installed
from optcli.errors import EXIT_ACCURACY, AccuracyError
from optcli.loaded_model import resolve_artifact

QUICK = ["--runs", "5", "--min-seconds", "0.05", "--max-seconds", "0.5"]
QUICK_API = {"runs": 5, "min_seconds": 0.05, "max_seconds": 0.5, "warmup_seconds": 0.0}
# With OpenVINO installed, build-cpu ends every CPU variant: it measures onnxruntime against OpenVINO
# and its choice (a copy in NN-build/) is the variant's artifact, its check the accuracy.
OPENVINO = installed("openvino")


def _stage_status(report: Path) -> dict[str, str]:
    return {s["name"]: s["status"] for s in json.loads(report.read_text())["stages"]}


def test_compare_fp32_against_no_fusion(mlp_onnx: Path, tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    proc = run_cli("compare", str(mlp_onnx), "--variants", "fp32,nofuse", "--variant", "nofuse:fuse.enabled=false",
                   "--variant", "raw:simplify.enabled=false,fuse.enabled=false", "--out", str(out), "--json", *QUICK)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [v["name"] for v in data["variants"]] == ["fp32", "nofuse", "raw"]
    assert data["recommended"] in ("fp32", "nofuse", "raw") and data["pareto"]
    assert data["tolerance"] == {"cosine": 0.99} and data["settings"]["order"] == ["fp32", "nofuse", "raw"]
    raw = data["variants"][2]
    if OPENVINO:
        assert "-build/" in raw["artifact"] and raw["accuracy_source"] == "build stage"
    else:                           # no stage ran: the artifact is the input model, exact by definition
        assert Path(raw["artifact"]) == mlp_onnx and raw["accuracy_source"] == "the input model itself"
    for v in data["variants"]:
        assert v["status"] == "ok" and v["precision"] == "fp32" and v["meets_tolerance"] is True
        assert v["latency_b1"]["batch"] == 1 and v["latency_b8"]["batch"] == 8 and v["throughput_b8"] > 0
        assert v["p50_ci_ms"][0] <= v["latency_b1"]["p50"] <= v["p50_ci_ms"][1]
        assert v["accuracy"]["cosine_mean"] > 0.999 and v["size_bytes"] > 0
    by_name = {v["name"]: v for v in data["variants"]}
    last = "05-build" if OPENVINO else "03-fuse"
    assert last in by_name["fp32"]["artifact"] and "fuse" not in Path(by_name["nofuse"]["artifact"]).parent.name
    # Each variant in its own folder; the second reused the first one's simplify stage.
    assert _stage_status(out / "nofuse" / "report.json")["simplify"] == "cached"
    folders = sorted(p.name for p in (out / "nofuse").iterdir() if p.is_dir() and not p.name.endswith("-cache"))
    assert folders == (["02-simplify", "04-build"] if OPENVINO else ["02-simplify"])   # no 03-fuse linked in
    assert json.loads((out / "compare.json").read_text())["recommended"] == data["recommended"]
    md = (out / "compare.md").read_text()
    assert f"**Recommended: `{data['recommended']}`**" in md and "| nofuse" in md and "| fp32" in md


def test_compare_exits_3_when_no_variant_is_accurate_enough(mlp_onnx: Path, tmp_path: Path) -> None:
    calib = tmp_path / "calib"
    calib.mkdir()
    np.savez(calib / "c.npz", x=np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32))
    out = tmp_path / "cmp"
    proc = run_cli("compare", str(mlp_onnx), "--variants", "int8nf",
                   "--variant", "int8nf:precision=int8,quantize.fallback=false",
                   "--calib", str(calib), "--tolerance", "max-abs=1e-9", "--out", str(out), *QUICK)
    assert proc.returncode == EXIT_ACCURACY, proc.stderr
    assert "error: no variant meets the tolerance" in proc.stderr and "Traceback" not in proc.stderr
    data = json.loads((out / "compare.json").read_text())
    (v,) = data["variants"]
    # Its own stage gate refused it, yet it was measured: the table shows what the accuracy costs.
    assert v["status"] == "gate-failed" and v["precision"] == "int8" and v["latency_b1"] is not None
    assert v["meets_tolerance"] is False and v["verdict"].startswith("misses: output 'y': max abs error")
    assert data["recommended"] is None
    with pytest.raises(AccuracyError) as info:
        optcli.compare(mlp_onnx, "int8nf", define=["int8nf:precision=int8,quantize.fallback=false"], calib=calib,
                       tolerance="max-abs=1e-9", out=out, **QUICK_API)
    assert info.value.result.variants[0].status == "gate-failed"


@pytest.mark.slow
def test_compare_precisions_of_a_pytorch_model(cnn_pt2: Path, calib_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "cmp"
    result = optcli.compare(cnn_pt2, "fp32,fp16,int8", calib=calib_dir, out=out, check=False, **QUICK_API)
    by_name = {v.name: v for v in result.variants}
    for name in ("fp16", "int8"):
        if by_name[name].precision != name:
            pytest.skip(f"the pipeline built {by_name[name].precision} for {name}: no {name} stage here")
    assert all(v.status == "ok" for v in result.variants), [v.error for v in result.variants]
    int8_source = "build stage" if OPENVINO else "quantize-int8 stage"
    assert by_name["int8"].accuracy_source == int8_source and by_name["int8"].accuracy["samples"] > 0
    assert by_name["fp16"].accuracy_source == "quantize-fp16 stage"
    # (no size ordering: on a model this tiny the Q/DQ nodes outweigh the int8 weights they save)
    assert all(v.size_bytes > 0 and Path(v.artifact).is_file() for v in result.variants)
    # fp16 runs with the runner options its stage recorded (an onnxruntime optimizer turned off).
    assert resolve_artifact(by_name["fp16"].artifact).runner_options == {"disabled_optimizers": ["NchwcTransformer"]}
    assert by_name["fp16"].latency_b1["settings"]["disabled_optimizers"] == ["NchwcTransformer"]
    # The export ran once: the other variants found it in their folders, cached.
    for name in ("fp16", "int8"):
        assert _stage_status(out / name / "report.json")["export"] == "cached"
    assert result.recommended in by_name and result.recommended in result.pareto
    # compare's runners are set up as `optcli bench` sets up batch x concurrency 1.
    bench = optcli.bench(by_name["fp32"].artifact, batch=1, runs=5, min_seconds=0.0, max_seconds=0.3)
    settings = dict(bench.points[0].latency.settings)
    settings.pop("concurrency")
    assert by_name["fp32"].latency_b1["settings"] == settings
    from optcli.plots import plot_compare

    plot_compare(result, tmp_path / "cmp.png")
    assert (tmp_path / "cmp.png").read_bytes()[:4] == b"\x89PNG"


def test_measured_accuracy_against_the_fp32_variant(mlp_onnx: Path, tmp_path: Path) -> None:
    from optcli.comparison.workflow import _measured_accuracy

    same = _measured_accuracy(resolve_artifact(mlp_onnx), resolve_artifact(mlp_onnx))
    assert same["cosine_mean"] == pytest.approx(1.0) and same["max_abs_err"] == 0.0 and same["samples"] == 8
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(mlp_onnx))     # the same network with its last weights perturbed
    w2 = model.graph.initializer[2]
    w2.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w2) * 1.5 + 0.3, "w2"))
    onnx.save(model, str(tmp_path / "other.onnx"))
    other = _measured_accuracy(resolve_artifact(tmp_path / "other.onnx"), resolve_artifact(mlp_onnx))
    assert other["max_abs_err"] > 0.1 and other["reference"] == "fp32 variant"
