"""The model zoo (benchmarks/zoo_models.py: reduced transformers configs and plain torch, random weights)
compiled with `--target tensorrt-rtx`: each family's engine is built by TensorRT-RTX's builder, or the
builder refuses it for the reason listed here and in docs/tensorrt.md (issue 29, part 1). The whole zoo
at FP32 and INT8 is `python benchmarks/zoo.py --target tensorrt-rtx` (docs/benchmarks/zoo-tensorrt-rtx.md);
this test runs one family per kind under `slow`, and in the default run one CNN and the family the
builder refuses."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from compile_testkit import REPO, read_report, run_main

ZOO = REPO / "benchmarks" / "zoo_models.py"
# family -> what TensorRT-RTX 1.7.1's parser says, at FP32 and INT8 (the same node refuses both).
REFUSED = {"efficientnet": "node_avg_pool2d' (op AveragePool): Invalid Node - node_avg_pool2d"}
ONE_PER_KIND = ["distilbert", "llama", "bart", "resnet", "deit", "segformer", "wav2vec2", "clip", "unet"]


def calib_like_the_example(family: str, folder: Path) -> Path:
    """Calibration data drawn like the family's example inputs (benchmarks/zoo.py's rule)."""
    sys.path.insert(0, str(ZOO.parent))
    try:
        import zoo
        import zoo_models
    finally:
        sys.path.remove(str(ZOO.parent))
    model, example = getattr(zoo_models, family)()
    folder.mkdir(parents=True)
    np.savez(folder / "a.npz", **zoo._arrays(zoo._named(model, example), 8, 0))
    return folder


def compile_family(family: str, precision: str, tmp_path: Path) -> tuple[int, str, Path]:
    extra = [] if precision == "fp32" else ["--int8", "--calib", str(calib_like_the_example(family, tmp_path / "c"))]
    out = tmp_path / "out"
    code, _, err = run_main("compile", f"{ZOO}:{family}", "--target", "tensorrt-rtx", "--out", str(out), "--no-bench",
                            *extra)
    return code, err, out


def assert_built_or_refused_as_listed(family: str, code: int, err: str, out: Path) -> None:
    report = read_report(out)
    build = next(s for s in report["stages"] if s["name"] == "build")
    if family not in REFUSED:
        assert code == 0 and build["status"] == "ok" and build["details"]["builder"] == "TensorRT-RTX", err
        return
    failed = next(s for s in report["stages"] if s["status"] == "failed")
    assert code == 1 and REFUSED[family] in failed["reason"] and "TensorRT-RTX" in failed["reason"], err


@pytest.fixture(autouse=True)
def _transformers(rtx, engine_cache) -> None:
    pytest.importorskip("transformers")


@pytest.mark.parametrize("family", ["efficientnet"])
def test_the_refused_family_is_refused_for_the_listed_reason(family, tmp_path):
    assert_built_or_refused_as_listed(family, *compile_family(family, "fp32", tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("family", ONE_PER_KIND)
@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_one_family_per_kind(family, precision, tmp_path):
    assert_built_or_refused_as_listed(family, *compile_family(family, precision, tmp_path))
