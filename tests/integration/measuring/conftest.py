"""Session fixtures: the tiny models of measuring_models.py, built once."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from measuring_models import make_cnn_pt2, make_embedding_onnx, make_mlp_onnx


@pytest.fixture(scope="session")
def mlp_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_mlp_onnx(tmp_path_factory.mktemp("mlp") / "mlp.onnx")


@pytest.fixture(scope="session")
def embedding_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_embedding_onnx(tmp_path_factory.mktemp("embed") / "embed.onnx")


@pytest.fixture(scope="session")
def cnn_pt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_cnn_pt2(tmp_path_factory.mktemp("cnn"))


@pytest.fixture(scope="session")
def compiled_cnn(cnn_pt2: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """report.json of the tiny CNN compiled through the real pipeline (short stage benchmarks)."""
    import optcli

    out = tmp_path_factory.mktemp("compiled") / "cnn"
    optcli.compile(cnn_pt2, out=out, runs=3, warmup_seconds=0.0, min_seconds=0.0, max_seconds=0.2)
    return out / "report.json"


@pytest.fixture(scope="session")
def calib_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("calib")
    rng = np.random.default_rng(1)
    for i in range(3):
        np.savez(folder / f"part{i}.npz", x=rng.standard_normal((8, 1, 8, 8)).astype(np.float32))
    return folder
