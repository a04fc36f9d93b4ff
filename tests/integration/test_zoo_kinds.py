"""One family of each kind from the model zoo (benchmarks/zoo_models.py, reduced transformers configs and
plain torch) compiled as a user hands it over, FP32, and INT8 for a text encoder and a CNN; the whole zoo
(29 families, FP32 and INT8, every input form) is benchmarks/zoo.py -> docs/benchmarks/zoo.md."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compile_testkit import REPO, read_report, run_main

pytestmark = pytest.mark.slow
ZOO = REPO / "benchmarks" / "zoo_models.py"
ONE_PER_KIND = ["distilbert", "llama", "bart", "resnet", "deit", "segformer", "wav2vec2", "clip", "unet"]


@pytest.fixture(scope="module", autouse=True)
def _transformers() -> None:
    pytest.importorskip("transformers")


@pytest.mark.parametrize("family", ONE_PER_KIND)
def test_one_family_per_kind_compiles_fp32(family: str, tmp_path: Path) -> None:
    code, _, err = run_main("compile", f"{ZOO}:{family}", "--out", str(tmp_path / "o"), "--no-bench",
                            "--target", "cpu", "--backend", "onnxruntime")
    assert code == 0, err
    report = read_report(tmp_path / "o")
    export = next(s for s in report["stages"] if s["name"] == "export")
    assert export["status"] == "ok" and export["accuracy"]["cosine_min"] >= 0.999, export


@pytest.mark.parametrize("family, key, shape, ints", [
    ("distilbert", None, None, True), ("resnet", "pixel_values", (8, 3, 32, 32), False)])
def test_int8_within_tolerance(family: str, key: str | None, shape: tuple | None, ints: bool, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    for split, seed in (("calib", 0), ("eval", 1)):
        folder = tmp_path / split
        folder.mkdir()
        for i in range(4):
            r = np.random.default_rng(seed * 10 + i)
            if ints:
                ids = r.integers(3, 100, size=(8, 16)).astype(np.int64)
                np.savez(folder / f"{i}.npz", input_ids=ids, attention_mask=np.ones_like(ids))
            else:
                np.savez(folder / f"{i}.npz", **{key: r.standard_normal(shape).astype(np.float32)})
    del rng
    code, _, err = run_main("compile", f"{ZOO}:{family}", "--int8", "--calib", str(tmp_path / "calib"), "--eval",
                            str(tmp_path / "eval"), "--out", str(tmp_path / "o"), "--no-bench", "--target", "cpu")
    assert code == 0, err
    report = read_report(tmp_path / "o")
    assert report["final"]["precision"] == "int8"
