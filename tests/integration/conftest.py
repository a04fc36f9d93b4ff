"""Fixtures the integration modules share: a finished run to tamper with (one compile per module)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from compile_testkit import run_main


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory, matmul_onnx: Path) -> Path:
    """One finished FP32 run (ONNX Runtime only, no latency work): copied per test before tampering."""
    out = tmp_path_factory.mktemp("runs") / "mlp"
    code, _, err = run_main("compile", str(matmul_onnx), "--out", str(out), "--no-bench", "--backend", "onnxruntime",
                            "--target", "cpu")
    assert code == 0, err
    return out


@pytest.fixture()
def run_copy(run_dir: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(run_dir, dst)
    return dst
