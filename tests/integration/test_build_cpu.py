"""The build stage on the CPU through the real pipeline: candidates built, gated and measured, the choice,
--backend, skip reasons, and what happens without OpenVINO."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from cpu_fixtures import QUICK, mlp_onnx, npz_dir
from optcli import api
from optcli.backends.registry import is_installed as installed
from optcli.cli.main import main
from optcli.errors import AccuracyError, UsageError
from optcli.runtime import open_runner

needs_openvino = pytest.mark.skipif(not installed("openvino"), reason="needs the openvino extra")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return mlp_onnx(tmp_path_factory.mktemp("cpu") / "mlp.onnx")


def _compile(model: Path, out: Path, **options: object) -> api.RunReport:
    cpu = {**QUICK, **options.pop("cpu", {})}  # type: ignore[dict-item]
    return api.compile(model, out=out, target="cpu", bench=False, check=False, cpu=cpu, **options)


def _candidates(report: api.RunReport) -> dict[str, dict]:
    """The candidates of the two backends this file tests (AOTInductor's have tests of their own)."""
    return {c["name"]: c for c in report.stage("build").details["candidates"]
            if c["backend"] in ("onnxruntime", "openvino")}


@needs_openvino
def test_fp32_builds_both_backends_measures_them_and_keeps_a_passing_one(model: Path, tmp_path: Path) -> None:
    r = _compile(model, tmp_path / "o")
    assert r.status == "ok", r.error
    st = r.stage("build")
    cands = _candidates(r)
    assert set(cands) == {"onnxruntime-fp32", "openvino-fp32"}
    for c in cands.values():
        assert c["status"] == "passed" and c["accuracy"]["cosine_mean"] > 0.9999
        assert c["latency_ms"]["p50"] > 0 and len(c["latency_ms"]["p50_ci"]) == 2
    assert st.details["measurement"]["order"] == ["onnxruntime-fp32", "openvino-fp32"]
    assert st.details["chosen"] in cands and st.details["why"]
    from optcli.cli.render import final_lines  # the terminal names the winner and the reason

    assert f"  build chose {st.details['chosen']}: {st.details['why']}" in final_lines(r)
    assert cands["openvino-fp32"]["runner_options"] == {"precision": "fp32"}
    final = r.final
    assert final["format"] in ("onnx", "openvino")
    assert final["artifact"].endswith(("-build/model.onnx", "-build/model.xml"))
    # Whatever was chosen opens through the runner registry and matches the input model.
    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
    with open_runner(tmp_path / "o" / final["artifact"], final["format"], **final["runner_options"]) as got, \
            open_runner(model, "onnx") as want:
        np.testing.assert_allclose(got.predict(x)["y"], want.predict(x)["y"], rtol=1e-4, atol=1e-5)


@needs_openvino
def test_a_candidate_that_misses_the_tolerance_is_never_chosen(tmp_path: Path) -> None:
    # max-abs=0: only an exact copy passes. onnxruntime on its own input is exact; OpenVINO's FP32
    # kernels sum a 2048-long dot product in another order, so that candidate misses, however fast.
    wide = mlp_onnx(tmp_path / "wide.onnx", hidden=2048)
    r = _compile(wide, tmp_path / "o", max_abs=0.0, search="thorough")  # fast does not measure a miss
    assert r.status == "ok", r.error
    cands = _candidates(r)
    if cands["openvino-fp32"]["accuracy"]["max_abs_err"] == 0.0:
        pytest.skip("OpenVINO's FP32 is bitwise equal to onnxruntime's here: no candidate misses")
    assert cands["openvino-fp32"]["status"] == "failed" and "max abs error" in cands["openvino-fp32"]["reason"]
    assert "latency_ms" in cands["openvino-fp32"]  # measured anyway: the report shows what it would cost
    assert r.stage("build").details["chosen"] == "onnxruntime-fp32"
    assert r.final["format"] == "onnx"


@needs_openvino
def test_backend_openvino_forces_the_ir(model: Path, tmp_path: Path) -> None:
    r = _compile(model, tmp_path / "o", backend="openvino")
    assert r.status == "ok", r.error
    cands = _candidates(r)
    assert cands["onnxruntime-fp32"] == {"name": "onnxruntime-fp32", "backend": "onnxruntime", "precision": "fp32",
                                         "recipe": "input", "status": "skipped", "reason": "--backend openvino"}
    assert r.final["format"] == "openvino" and r.final["artifact"].endswith("-build/model.xml")
    stage_dir = (tmp_path / "o" / r.final["artifact"]).parent
    assert (stage_dir / "model.bin").is_file()
    assert not (stage_dir / "candidates").exists()  # only the chosen one is kept
    # Opened with no options at all, the IR runs at the precision recorded in it (OpenVINO's own
    # default on a BF16 CPU would be bf16).
    with open_runner(tmp_path / "o" / r.final["artifact"], "openvino") as runner:
        assert runner.settings["inference_precision"] == "f32"
    record = json.loads((stage_dir / "stage.json").read_text())
    assert record["artifact"] == "model.xml" and record["meta"]["runner_options"] == {"precision": "fp32"}
    # Cached on the second run: the IR's hash (xml + bin) still matches its record.
    again = _compile(model, tmp_path / "o", backend="openvino")
    assert again.stage("build").status == "cached"


def test_backend_onnxruntime_and_fp16_leave_nothing_to_choose(model: Path, tmp_path: Path) -> None:
    r = _compile(model, tmp_path / "o", backend="onnxruntime")
    st = r.stage("build")
    assert r.status == "ok" and st.status == "skipped"
    assert st.reason.startswith("nothing to choose: onnxruntime-fp32 runs the input as it is")
    assert r.final["artifact"].endswith("-fuse/model.onnx")
    fp16 = _compile(model, tmp_path / "h", fp16=True)
    st = fp16.stage("build")
    assert fp16.status == "ok" and st.status == "skipped" and "no FP16 arithmetic" in st.reason
    assert fp16.final["artifact"].endswith("-quantize-fp16/model.onnx")


def test_auto_without_openvino_uses_onnxruntime_only(model: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openvino", None)
    r = _compile(model, tmp_path / "o")
    st = r.stage("build")
    assert r.status == "ok" and st.status == "skipped"
    assert "openvino is not installed (pip install 'optcli[openvino]')" in st.reason
    assert r.final["format"] == "onnx"


def test_forcing_openvino_without_it_exits_4_naming_the_extra(model: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "openvino", None)
    with pytest.raises(SystemExit) as exit_info:
        main(["compile", str(model), "--target", "cpu", "--backend", "openvino", "--no-bench",
              "-o", str(tmp_path / "o")])
    assert exit_info.value.code == 4
    err = capsys.readouterr().err
    assert "openvino is not installed; it is needed for --backend openvino" in err
    assert "pip install 'optcli[openvino]'" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as exit_info:
        main(["compile", str(model), "--target", "cpu", "--bf16", "--no-bench", "-o", str(tmp_path / "o2")])
    assert exit_info.value.code == 4


def test_the_one_build_stage_does_the_work_the_plan_names_for_the_target(model: Path, tmp_path: Path) -> None:
    from optcli.backends.tensorrt.engine_build import EngineBuild
    from optcli.config import CompileConfig
    from optcli.cpu.build_search import CpuBuild
    from optcli.stages import StageContext
    from optcli.stages.build import BuildStage

    works = {}
    for target in ("cpu", "tensorrt", "tensorrt-rtx"):
        config = CompileConfig(model=str(model), target=target)
        stage = BuildStage(StageContext(config=config, source=None, inputs=[], target=target, out_dir=tmp_path))
        works[target] = type(stage.work)
        assert stage.name == "build" and stage.work.name == "build"
    assert works == {"cpu": CpuBuild, "tensorrt": EngineBuild, "tensorrt-rtx": EngineBuild}
    # Every build's config section is checked before the target is known: [cpu] with a TensorRT target is refused.
    config = CompileConfig(model=str(model), target="tensorrt", extra={"cpu": {"backend": "openvino"}})
    with pytest.raises(UsageError, match="picks a CPU backend, but the target is tensorrt"):
        BuildStage.enabled(config)
    config = CompileConfig(model=str(model), target="cpu", extra={"tensorrt": {"workspace": "lots"}})
    with pytest.raises(UsageError):
        BuildStage.enabled(config)


@needs_openvino
def test_bf16_is_gated_like_fp16(model: Path, tmp_path: Path) -> None:
    from optcli.backends.openvino.runner import cpu_supports_bf16

    if not cpu_supports_bf16():
        pytest.skip("this CPU has no BF16")
    r = _compile(model, tmp_path / "o", bf16=True)
    assert r.status == "ok", r.error
    assert r.final["format"] == "openvino" and r.final["precision"] == "bf16"
    with open_runner(tmp_path / "o" / r.final["artifact"], "openvino") as runner:
        assert runner.settings["inference_precision"] == "bf16"
    cands = _candidates(r)
    assert cands["onnxruntime-bf16"]["reason"] == "onnxruntime has no BF16 kernels for the CPU"
    assert r.stage("build").details["tolerance"] == {"cosine": 0.995}
    with pytest.raises(AccuracyError, match="build: output 'y'"):
        api.compile(model, out=tmp_path / "tight", target="cpu", bench=False, bf16=True, cosine=0.99999999,
                    cpu=QUICK)


@pytest.mark.slow
@needs_openvino
def test_int8_candidates_from_the_same_calibration_data(model: Path, tmp_path: Path) -> None:
    calib, evald = npz_dir(tmp_path, "calib", seed=1), npz_dir(tmp_path, "eval", n_files=2, seed=2)
    r = _compile(model, tmp_path / "o", int8=True, calib=calib, eval=evald, exclude_nodes=["fc2"])
    assert r.status == "ok", r.error
    cands = _candidates(r)
    assert set(cands) == {"onnxruntime-int8-qdq-u8s8", "openvino-int8-qdq-u8s8", "openvino-int8-nncf",
                          "openvino-int8-qdq-s8s8"} or "nncf is not installed" in cands["openvino-int8-nncf"]["reason"]
    chosen = r.stage("build").details["chosen"]
    assert cands[chosen]["status"] == "passed"
    for c in cands.values():
        if c["status"] != "skipped":
            assert c["accuracy"]["top1_accuracy"] >= 0  # labels in --eval: real top-1 for every candidate
    if cands["openvino-int8-nncf"]["status"] != "skipped":
        assert cands["openvino-int8-nncf"]["build"]["ignored_scope"] is True  # --exclude reached NNCF
        samples = r.stage("quantize-int8").details["calibration"]["samples"]
        assert cands["openvino-int8-nncf"]["build"]["calibration_samples"] == samples == 128
    s8s8 = cands["openvino-int8-qdq-s8s8"]["build"]
    assert s8s8["flavour"] == "int8-qdq-s8s8"
    # The quantize stage's own Q/DQ ran on onnxruntime at the accuracy it reported there.
    q = r.stage("quantize-int8").accuracy["cosine_mean"]
    assert cands["onnxruntime-int8-qdq-u8s8"]["accuracy"]["cosine_mean"] == pytest.approx(q, abs=1e-6)


@pytest.mark.slow
@needs_openvino
def test_dynamic_int8_is_not_converted_for_openvino(model: Path, tmp_path: Path) -> None:
    calib = npz_dir(tmp_path, "calib", seed=1)
    r = _compile(model, tmp_path / "o", int8=True, calib=calib, flavour="dynamic", cpu={"nncf": "off"})
    assert r.status == "ok", r.error
    cands = _candidates(r)
    assert "no INT8 kernels in OpenVINO" in cands["openvino-int8-dynamic"]["reason"]
    assert cands["openvino-int8-nncf"]["reason"] == '[cpu] nncf = "off"'
    assert cands["openvino-int8-qdq-s8s8"]["status"] in ("passed", "failed")
