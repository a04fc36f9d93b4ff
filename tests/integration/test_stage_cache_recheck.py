"""A stage-cache entry edited by hand (issue 30, item 6): a new artifact with its matching sha256 in
stage.json was trusted. The stages after it compared against it, so the report said cosine 1.000000 while
the final model's outputs were wrong.

The property tested: after any such edit, a rerun ships a model whose outputs are the user's model's (as
given on the command line), and every accuracy the report shows is measured against the user's model.
Whatever the record claims about its artifact (the old figures, none, figures as bad as the forgery's,
a deferred gate) the forged entry is rebuilt, and the report says why. An entry nobody touched is still
reused."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import optcli
from compile_testkit import make_mlp, read_report, run_main
from optcli.artifact import sha256_file

pytestmark = pytest.mark.slow

CLAIMS = ["as-built", "none", "as-bad-as-the-forgery", "gate-deferred"]


def _forge(stage_dir: Path, claim: str) -> None:
    """Replace the stage's ONNX with one whose outputs are wrong (a weight negated and scaled), and make
    its record consistent: the new sha256, and accuracy figures per `claim`."""
    import onnx
    from onnx import numpy_helper

    record_path = stage_dir / "stage.json"
    record = json.loads(record_path.read_text())
    path = stage_dir / record["artifact"]
    model = onnx.load(str(path))
    changed = 0
    for tensor in model.graph.initializer:
        value = numpy_helper.to_array(tensor)
        if value.ndim >= 2 and value.dtype == np.float32:
            value = value * -3.0
        elif value.ndim >= 2 and value.dtype == np.int8:  # an INT8 graph's weights
            value = np.clip(-value.astype(np.int16), -127, 127).astype(np.int8)
        else:
            continue
        tensor.CopyFrom(numpy_helper.from_array(value, tensor.name))
        changed += 1
    assert changed, "a weight to change"
    path.unlink()  # may be a hard link to another stage's file
    onnx.save(model, str(path))
    record["sha256"] = sha256_file(path)
    accuracy = record["accuracy"]
    if claim == "none":
        record["accuracy"] = None
    elif claim in ("as-bad-as-the-forgery", "gate-deferred"):
        bad = {"cosine_min": -1.0, "cosine_mean": -1.0, "max_abs_err": 1e9, "top1_agreement": 0.0}
        accuracy.update(bad)
        for entry in accuracy.get("outputs", {}).values():
            entry.update(bad)
        if claim == "gate-deferred":
            accuracy["gate_deferred_to"] = "build"
    record_path.write_text(json.dumps(record))


def _rerun(model: str, out: Path, *flags: str) -> dict[str, Any]:
    code, _, err = run_main("compile", model, "--out", str(out), "--no-bench", *flags)
    assert code == 0, err
    return read_report(out)


def _stage(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in report["stages"] if s["name"] == name)


def _final_outputs(out: Path, x: np.ndarray) -> np.ndarray:
    with optcli.load(out) as model:
        return np.asarray(model.predict(x)[model.outputs[0].name])


# -- a PyTorch model: the export stage's cached ONNX is forged ---------------------------------------

FP32 = ("--backend", "onnxruntime", "--target", "cpu")


@pytest.fixture(scope="module")
def torch_run(tmp_path_factory: pytest.TempPathFactory, cnn_pt2: Path) -> Path:
    out = tmp_path_factory.mktemp("recheck") / "cnn"
    _rerun(str(cnn_pt2), out, *FP32)
    return out


def test_an_untouched_cache_is_still_reused(torch_run: Path, cnn_pt2: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    shutil.copytree(torch_run, out)
    report = _rerun(str(cnn_pt2), out, *FP32)
    ran = {s["name"]: s["status"] for s in report["stages"] if s["status"] not in ("skipped",)}
    assert set(ran.values()) == {"cached"}, ran


@pytest.mark.parametrize("claim", CLAIMS[:3])
def test_a_forged_export_is_rebuilt_and_the_final_model_is_the_users(torch_run: Path, cnn_pt2: Path, tmp_path: Path,
                                                                    tiny_models: Any, torch_mod: Any,
                                                                    claim: str) -> None:
    out = tmp_path / "run"
    shutil.copytree(torch_run, out)
    _forge(next(out.glob("*-export")), claim)
    report = _rerun(str(cnn_pt2), out, *FP32)
    export = _stage(report, "export")
    assert export["status"] == "ok", export["status"]  # rebuilt, not "cached"
    assert "rebuilt" in export["details"]["cache_rejected"], export["details"]
    x = np.random.default_rng(3).standard_normal((5, 3, 16, 16)).astype(np.float32)
    with torch_mod.inference_mode():
        expected = tiny_models.make_cnn()(torch_mod.from_numpy(x)).numpy()
    np.testing.assert_allclose(_final_outputs(out, x), expected, rtol=1e-4, atol=1e-4)
    for stage in report["stages"]:
        if stage["accuracy"] is not None:  # every figure shown is against the user's model, and true
            assert stage["accuracy"]["cosine_min"] > 0.9999, (stage["name"], stage["accuracy"])


# -- an ONNX model with --int8: the quantize stage's cached artifact is forged -----------------------

@pytest.fixture(scope="module")
def int8_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("recheck-int8")
    model = make_mlp(folder / "mlp.onnx")
    rng = np.random.default_rng(0)
    (folder / "calib").mkdir()
    np.savez(folder / "calib" / "rows.npz", x=rng.standard_normal((96, 32)).astype(np.float32))
    return model, folder / "calib"


@pytest.fixture(scope="module")
def int8_run(tmp_path_factory: pytest.TempPathFactory, int8_model: tuple[Path, Path]) -> Path:
    model, calib = int8_model
    out = tmp_path_factory.mktemp("recheck-int8-run") / "mlp"
    _rerun(str(model), out, "--int8", "--calib", str(calib), *FP32)
    return out


def _user_onnx(model: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def test_an_untouched_int8_cache_is_still_reused(int8_run: Path, int8_model: tuple[Path, Path],
                                                 tmp_path: Path) -> None:
    model, calib = int8_model
    out = tmp_path / "run"
    shutil.copytree(int8_run, out)
    report = _rerun(str(model), out, "--int8", "--calib", str(calib), *FP32)
    assert _stage(report, "quantize-int8")["status"] == "cached"
    assert _stage(report, "build")["status"] in ("cached", "skipped")


@pytest.mark.parametrize("claim", CLAIMS)
def test_a_forged_int8_stage_is_rebuilt(int8_run: Path, int8_model: tuple[Path, Path], tmp_path: Path,
                                        claim: str) -> None:
    model, calib = int8_model
    out = tmp_path / "run"
    shutil.copytree(int8_run, out)
    _forge(next(out.glob("*-quantize-int8")), claim)
    report = _rerun(str(model), out, "--int8", "--calib", str(calib), *FP32)
    quant = _stage(report, "quantize-int8")
    assert quant["status"] == "ok" and "rebuilt" in quant["details"]["cache_rejected"], quant
    x = np.random.default_rng(3).standard_normal((8, 32)).astype(np.float32)
    expected, got = _user_onnx(model, x), _final_outputs(out, x)
    cosine = (expected * got).sum(1) / np.linalg.norm(expected, axis=1) / np.linalg.norm(got, axis=1)
    assert cosine.min() > 0.99, cosine


@pytest.mark.parametrize("stage_name", ["simplify", "fuse"])
def test_a_forged_float_stage_before_int8_is_rebuilt(int8_run: Path, int8_model: tuple[Path, Path], tmp_path: Path,
                                                     stage_name: str) -> None:
    """The INT8 stage's FP32 reference is the graph before it: a forged one there would have made a wrong
    INT8 model look exact. The forged float stage is rebuilt first, so the reference is the user's model."""
    model, calib = int8_model
    out = tmp_path / "run"
    shutil.copytree(int8_run, out)
    _forge(next(out.glob(f"*-{stage_name}")), "as-built")
    report = _rerun(str(model), out, "--int8", "--calib", str(calib), *FP32)
    assert "rebuilt" in _stage(report, stage_name)["details"].get("cache_rejected", ""), _stage(report, stage_name)
    x = np.random.default_rng(3).standard_normal((8, 32)).astype(np.float32)
    expected, got = _user_onnx(model, x), _final_outputs(out, x)
    cosine = (expected * got).sum(1) / np.linalg.norm(expected, axis=1) / np.linalg.norm(got, axis=1)
    assert cosine.min() > 0.99, cosine
