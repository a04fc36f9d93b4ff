"""The inductor backend (torch AOTInductor on the CPU): the package build, its cache, the runner,
`optcli.load`, PT2E INT8, and `--backend inductor` end to end. Compiling a package costs tens of
seconds (a C++ build), so this module compiles ONE package (module fixture) into a cache shared by
every test here: the CLI run of the same model is then a cache hit."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from compile_testkit import run_main

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def inductor_cache(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """OPTCLI_CACHE_DIR pointed at a fresh folder for this module (the package cache lives there)."""
    root = tmp_path_factory.mktemp("optcli-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPTCLI_CACHE_DIR", str(root))
        yield root


def _loaded(path: Path) -> tuple[Any, list[Any]]:
    from optcli.backends.torch.loader import detect, load_torch
    from optcli.tensor_spec import with_batch

    tm = load_torch(detect(str(path)), [])
    return tm, with_batch(tm.inputs, "batch")  # as the pipeline names dim 0


@pytest.fixture(scope="module")
def package(cnn_pt2: Path, inductor_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The tiny CNN compiled once: (package path, build info)."""
    from optcli.backends.inductor.cache import PackageCache
    from optcli.backends.inductor.package import build_package

    tm, inputs = _loaded(cnn_pt2)
    out = tmp_path_factory.mktemp("aoti") / "model.pt2"
    info = build_package(tm, inputs, out, cache=PackageCache())
    return out, info


def _eager(cnn_pt2: Path, x: np.ndarray) -> np.ndarray:
    import torch

    with torch.inference_mode():
        return torch.export.load(str(cnn_pt2)).module()(torch.from_numpy(x)).numpy()


def test_package_is_built_with_freezing_and_cached(package: tuple[Path, dict], cnn_pt2: Path) -> None:
    import zipfile

    from optcli.artifact import sha256_file
    from optcli.backends.inductor.cache import PackageCache
    from optcli.backends.inductor.package import build_package

    path, info = package
    assert info["inductor_configs"]["freezing"] is True
    with zipfile.ZipFile(path) as zf:  # frozen weights are pre-packed for oneDNN's fused convolution
        wrapper = next(zf.read(n).decode() for n in zf.namelist() if n.endswith(".wrapper.cpp"))
    assert "mkldnn__convolution_pointwise" in wrapper
    assert info["cache"]["status"] == "miss" and info["compile_seconds"] > 0
    tm, inputs = _loaded(cnn_pt2)
    again = path.with_name("again.pt2")
    second = build_package(tm, inputs, again, cache=PackageCache())
    assert second["cache"]["status"] == "hit" and second["compile_seconds"] == 0.0
    assert sha256_file(again) == sha256_file(path)


def test_a_corrupt_cache_entry_is_removed_not_used(package: tuple[Path, dict]) -> None:
    from optcli.backends.inductor.cache import PACKAGE_FILE, PackageCache

    cache = PackageCache()
    entries = [p.parent for p in cache.root.rglob(PACKAGE_FILE)]
    assert entries, "the fixture's build stored nothing"
    scratch = cache.root / "scratch"
    shutil.copytree(entries[0], scratch / "ab" / "ab-key")
    bad = PackageCache(scratch)
    (scratch / "ab" / "ab-key" / PACKAGE_FILE).write_bytes(b"truncated")
    assert bad.lookup("ab-key") == (None, "corrupt entry removed")
    assert not (scratch / "ab" / "ab-key").exists()


def test_runner_matches_eager_at_two_batches(package: tuple[Path, dict], cnn_pt2: Path) -> None:
    from optcli.backends.inductor.runner import InductorRunner

    with InductorRunner(package[0]) as runner:
        assert [s.name for s in runner.inputs] == ["x"] and runner.inputs[0].shape[0] == "batch"
        assert runner.settings["mode"] == "aot-inductor"
        for batch in (1, 5):
            x = np.random.default_rng(batch).standard_normal((batch, 3, 16, 16)).astype(np.float32)
            (name, got), = runner.predict({"x": x}).items()
            assert got.shape == (batch, 4)
            np.testing.assert_allclose(got, _eager(cnn_pt2, x), atol=1e-4, rtol=1e-4)


def test_runner_refuses_a_torch_export_archive(cnn_pt2: Path) -> None:
    from optcli.backends.inductor.files import format_of
    from optcli.backends.inductor.runner import InductorRunner
    from optcli.errors import UsageError

    assert format_of(cnn_pt2) is None
    with pytest.raises(UsageError, match="not an AOTInductor package"):
        InductorRunner(cnn_pt2)


def test_pt2e_int8_program_stays_close_to_fp32(cnn_pt2: Path) -> None:
    """PT2E through torchao without compiling: the quantized program runs (eagerly) near the float one."""
    import torch

    from optcli.backends.registry import is_installed

    if not is_installed("torchao"):
        pytest.skip("torchao is not installed (pip install 'optcli[inductor]')")

    from optcli.backends.inductor.int8 import quantize_program
    from optcli.backends.inductor.program import example_args
    from optcli.calibration.dataset import SampleSet

    tm, inputs = _loaded(cnn_pt2)
    rng = np.random.default_rng(0)
    calib = SampleSet({"x": rng.standard_normal((64, 3, 16, 16)).astype(np.float32)}, None, "random", "test")
    q = quantize_program(tm.exported_program, calib, inputs, example_args(inputs, {}, 8))
    targets = {str(n.target) for n in q.graph.nodes if n.op == "call_function"}
    assert any("quantize_per" in t for t in targets), targets
    x = rng.standard_normal((8, 3, 16, 16)).astype(np.float32)
    with torch.no_grad():
        got = q.module()(torch.from_numpy(x)).numpy()
    ref = _eager(cnn_pt2, x)
    cos = float((got * ref).sum() / (np.linalg.norm(got) * np.linalg.norm(ref)))
    assert cos > 0.99


def test_torchscript_is_refused_with_a_hint(cnn_torchscript: Path) -> None:
    from optcli.backends.inductor.program import exported_program
    from optcli.backends.torch.loader import detect, load_torch
    from optcli.errors import UsageError
    from optcli.tensor_spec import parse_input_spec

    tm = load_torch(detect(str(cnn_torchscript)), [parse_input_spec("x:1x3x16x16")])
    with pytest.raises(UsageError, match="TorchScript cannot be exported") as info:
        exported_program(tm, tm.inputs)
    assert "torch.export.save" in (info.value.hint or "")


@pytest.fixture(scope="module")
def compiled(package: tuple[Path, dict], cnn_pt2: Path, fast_bench_toml: Path,
             tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`optcli compile cnn.pt2 --backend inductor`: the fixture's package again, from the cache."""
    out = tmp_path_factory.mktemp("compile") / "out"
    code, _, err = run_main("compile", str(cnn_pt2), "--backend", "inductor", "--config", str(fast_bench_toml),
                            "--out", str(out))
    assert code == 0, err
    return out


def test_compile_backend_inductor_builds_a_gated_package(compiled: Path) -> None:
    report = json.loads((compiled / "report.json").read_text())
    assert report["status"] == "ok"
    assert report["final"]["format"] == "aoti" and report["final"]["backend"] == "inductor"
    build = next(s for s in report["stages"] if s["name"] == "build")
    cand = next(c for c in build["details"]["candidates"] if c["name"] == "inductor-fp32")
    assert cand["status"] == "passed" and cand["accuracy"]["cosine_mean"] > 0.9999
    assert cand["build"]["cache"]["status"] == "hit"  # the package fixture compiled it: no second compile
    skipped = {s["name"]: s["reason"] for s in report["stages"] if s["status"] == "skipped"}
    assert "no ONNX needed" in skipped["export"]


def test_load_opens_the_package_and_predicts_like_eager(compiled: Path, cnn_pt2: Path) -> None:
    import optcli

    x = np.random.default_rng(3).standard_normal((4, 3, 16, 16)).astype(np.float32)
    for target in (compiled, compiled / "report.json", compiled / json.loads(
            (compiled / "report.json").read_text())["final"]["artifact"]):
        with optcli.load(target) as model:
            assert model.backend == "inductor-cpu"
            (got,) = model.predict(x).values()
        np.testing.assert_allclose(got, _eager(cnn_pt2, x), atol=1e-4, rtol=1e-4)


def test_bench_and_profile_run_the_package(compiled: Path) -> None:
    import optcli

    bench = optcli.bench(compiled, batch=[1, 2], warmup_runs=1, warmup_seconds=0.0, runs=5, min_seconds=0.0,
                         max_seconds=0.5)
    assert [p["batch"] for p in bench.to_json()["points"]] == [1, 2]
    prof = optcli.profile(compiled, runs=5, warmup=1)
    assert prof.runtime == "inductor" and prof.layers
    from optcli.backends.inductor.profile import COMPILED

    assert COMPILED in [x.name for x in prof.layers]  # the generated kernels, not itemised
    assert abs(sum(x.share for x in prof.layers) - 1.0) < 1e-6


def test_backend_inductor_on_onnx_input_is_a_usage_error(conv_onnx: Path, tmp_path: Path) -> None:
    code, _, err = run_main("compile", str(conv_onnx), "--backend", "inductor", "--out", str(tmp_path / "out"))
    assert code == 2, err
    lines = [ln for ln in err.splitlines() if ln.startswith(("error:", "hint:"))]
    assert lines[0].startswith("error:") and "AOTInductor compiles PyTorch programs" in lines[0]
    assert lines[1].startswith("hint:")
    assert "Traceback" not in err


RUNNING_MAX = '''
import torch
from torch import nn


class RunningMax(nn.Module):
    """aten::cummax has no ONNX export, in either exporter."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 4)

    def forward(self, x):
        return self.fc(torch.cummax(x, dim=1).values)


def make():
    torch.manual_seed(0)
    return RunningMax().eval(), (torch.randn(2, 6),)
'''


@pytest.fixture(scope="module")
def no_onnx_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("no-onnx") / "running_max.py"
    path.write_text(RUNNING_MAX)
    return f"{path}:make"


def test_failed_export_offers_the_inductor_path(no_onnx_model: str, tmp_path: Path) -> None:
    code, _, err = run_main("compile", no_onnx_model, "--backend", "onnxruntime", "--out", str(tmp_path / "out"))
    assert code == 1, err
    error = next(ln for ln in err.splitlines() if ln.startswith("error:"))
    hint = next(ln for ln in err.splitlines() if ln.startswith("hint:"))
    assert "no exporter produced a correct ONNX" in error and "cummax" in error
    assert "--backend inductor" in hint


def test_auto_goes_on_without_onnx_through_inductor(no_onnx_model: str, fast_bench_toml: Path, tmp_path: Path,
                                                    inductor_cache: Path) -> None:
    import optcli

    out = tmp_path / "out"
    code, _, err = run_main("compile", no_onnx_model, "--config", str(fast_bench_toml), "--out", str(out))
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    export = report["stages"][0]
    assert export["name"] == "export" and export["status"] == "ok"
    assert "cummax" in export["details"]["onnx"] and "inductor" in export["details"]["without_onnx"]
    assert report["final"]["format"] == "aoti"
    build = next(s for s in report["stages"] if s["name"] == "build")
    reasons = {c["name"]: c.get("reason") for c in build["details"]["candidates"]}
    assert "has no ONNX" in reasons["onnxruntime-fp32"] and reasons["inductor-fp32"] is None
    assert build["accuracy"]["reference"] == "torch-fp32" and build["accuracy"]["cosine_mean"] > 0.9999
    x = np.random.default_rng(0).standard_normal((3, 6)).astype(np.float32)
    with optcli.load(out) as model:
        assert model.predict(x)[model.outputs[0].name].shape == (3, 4)
