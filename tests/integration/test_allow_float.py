"""--allow-float: with --int8 on a CPU the build ships the FP32 graph where no INT8 candidate meets the
tolerance or the chosen INT8 is not faster than FP32 (issue 31: on an AVX2-only CPU a pretrained encoder's
INT8 ran 1.7x slower than its FP32 graph); without it the same runs keep INT8, or exit 3."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compile_testkit import one_error_line, run_main
from cpu_fixtures import QUICK, mlp_onnx, npz_dir
from optcli import api
from optcli.backends import registry
from optcli.backends.recipe import Candidate
from optcli.cpu.build_search import FLOAT_CHOICE, _float_instead
from optcli.cpu.int8_vs_fp32 import Versus
from optcli.errors import AccuracyError
from optcli.runtime import open_runner

UNREACHABLE = 0.99999999  # no INT8 graph of random weights reaches it


def _int8(model: Path, out: Path, calib: Path, **options: object) -> api.RunReport:
    options = {"check": True, **options}
    return api.compile(model, out=out, target="cpu", bench=False, int8=True, calib=calib,
                       fallback=False, cosine=UNREACHABLE, cpu=QUICK, **options)


def test_no_accurate_int8_ships_the_fp32_graph_only_when_allowed(tmp_path: Path) -> None:
    model = mlp_onnx(tmp_path / "mlp.onnx")
    calib = npz_dir(tmp_path, "calib", seed=1)
    with pytest.raises(AccuracyError):
        _int8(model, tmp_path / "strict", calib)
    # --no-fallback turns off the exclusion search only: the CPU build's other INT8 candidates still get their
    # turn (the quantize stage hands its gate over), and the run fails at the build's gate.
    strict = _int8(model, tmp_path / "strict2", calib, check=False)
    assert strict.exit_code == 3 and strict.stage("quantize-int8").status == "ok"
    assert strict.stage("build").status == "failed"
    if registry.is_installed("openvino"):
        tried = [c for c in strict.stage("build").details["candidates"] if c["backend"] == "openvino"
                 and c["status"] != "skipped"]
        assert tried, strict.stage("build").details["candidates"]
    r = _int8(model, tmp_path / "o", calib, allow_float=True)
    assert r.status == "ok", r.error
    assert (r.final["precision"], r.final["format"], r.final["backend"]) == ("fp32", "onnx", "onnxruntime")
    build = r.stage("build")
    assert build.details["chosen"] == FLOAT_CHOICE
    assert "--allow-float" in build.details["why"] and "no INT8 candidate met the tolerance" in build.details["why"]
    assert build.accuracy["cosine_mean"] == pytest.approx(1.0)
    # What shipped computes what the FP32 model computes, on inputs it never saw.
    x = {"x": np.random.default_rng(9).standard_normal((4, 16)).astype(np.float32)}
    with open_runner(tmp_path / "o" / r.final["artifact"], "onnx") as shipped, open_runner(model, "onnx") as fp32:
        np.testing.assert_allclose(shipped.predict(x)["y"], fp32.predict(x)["y"], rtol=1e-5, atol=1e-6)
    shipped = (tmp_path / "o" / r.final["artifact"]).parent
    assert not list(shipped.glob("*.xml")), "no INT8 candidate is left beside the shipped graph"


def _candidate(passed: bool) -> Candidate:
    c = Candidate("openvino-int8-nncf", "openvino", "int8", "nncf")
    c.accuracy = {"cosine_mean": 0.999}
    c.failure = None if passed else "output 'y': mean cosine 0.9 < tolerance 0.99"
    return c


@pytest.mark.parametrize(("passed", "int8_ms", "fp32_ms", "expected"), [
    (True, 5.0, 10.0, None),                                       # INT8 clearly faster: it stays
    (True, 9.9, 10.0, "INT8 was not faster"),                      # within the tie band: FP32 is simpler
    (True, 13.5, 8.0, "INT8 was not faster: openvino-int8-nncf 13.500 ms vs FP32 8.000 ms"),
    (False, 5.0, 10.0, "no INT8 candidate met the tolerance"),     # fast but inaccurate never ships
])
def test_the_float_choice_follows_the_measurement(passed: bool, int8_ms: float, fp32_ms: float,
                                                  expected: str | None) -> None:
    versus = Versus("openvino-int8-nncf", int8_ms, "FP32 ONNX on onnxruntime", fp32_ms, "AVX2 (no VNNI)", 5)
    reason = _float_instead(_candidate(passed), versus)
    assert reason == expected if expected is None else (reason is not None and reason.startswith(expected))


def test_allow_float_without_int8_is_one_usage_error(tmp_path: Path) -> None:
    model = mlp_onnx(tmp_path / "mlp.onnx")
    code, _, err = run_main("compile", str(model), "--out", str(tmp_path / "o"), "--allow-float")
    one_error_line(code, err, 2, "--allow-float goes with --int8")
    assert not (tmp_path / "o").exists()
