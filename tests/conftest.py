"""Shared fixtures: tiny PyTorch models and ONNX graphs built inline, saved in every format optcli takes.

Everything heavy (exporting, saving) is session-scoped and small: a conv+BN CNN on 3x16x16 images and
a one-block encoder over 8 tokens, so the whole suite stays fast on 2 CPU cores. Helpers that are not
fixtures live in compile_testkit.py.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from compile_testkit import (
    FAST_BENCH_TOML,
    MODELS_SOURCE,
    export_pt2,
    make_conv_bn_relu_add,
    make_foldable,
    make_matmul_add_relu,
)


def pytest_configure(config: pytest.Config) -> None:
    # 2 shared cores: keep torch and onnxruntime from oversubscribing them.
    os.environ.setdefault("OMP_NUM_THREADS", "2")


@pytest.fixture
def register_backend(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Register a backend the one way there is: its module (defining BACKEND) added to BACKEND_MODULES."""
    from optcli.backends import registry

    def register(module: str) -> None:
        monkeypatch.setattr(registry, "BACKEND_MODULES", (*registry.BACKEND_MODULES, module))
        registry.reload()

    yield register
    monkeypatch.undo()
    registry.reload()


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding tiny_models.py (importable: pickled modules need their class on the path)."""
    d = tmp_path_factory.mktemp("models")
    (d / "tiny_models.py").write_text(MODELS_SOURCE)
    return d


@pytest.fixture(scope="session")
def tiny_models(models_dir: Path) -> Any:
    """The tiny_models module, imported from the session folder."""
    sys.path.insert(0, str(models_dir))
    try:
        import tiny_models  # noqa: PLC0415

        return tiny_models
    finally:
        sys.path.remove(str(models_dir))


@pytest.fixture(scope="session")
def torch_mod() -> Any:
    torch = pytest.importorskip("torch")
    torch.set_num_threads(2)
    return torch


@pytest.fixture(scope="session")
def cnn_pt2(torch_mod: Any, tiny_models: Any, models_dir: Path) -> Path:
    """The CNN as a torch.export .pt2 with a dynamic batch (example batch 2)."""
    model, (x,) = tiny_models.make_cnn_with_example()
    return export_pt2(torch_mod, model, (x,), None, ["x"], models_dir / "cnn.pt2")


@pytest.fixture(scope="session")
def encoder_pt2(torch_mod: Any, tiny_models: Any, models_dir: Path) -> Path:
    """The encoder (int64 input_ids / attention_mask) as a .pt2 with a dynamic batch."""
    model, feeds = tiny_models.make_encoder_with_example()
    args = (feeds["input_ids"], feeds["attention_mask"])
    return export_pt2(torch_mod, model, args, None, ["input_ids", "attention_mask"], models_dir / "encoder.pt2")


@pytest.fixture(scope="session")
def cnn_torchscript(torch_mod: Any, tiny_models: Any, models_dir: Path) -> Path:
    """The CNN traced to TorchScript (needs --input x:1x3x16x16)."""
    model, (x,) = tiny_models.make_cnn_with_example()
    traced = torch_mod.jit.trace(model, (x,))
    path = models_dir / "cnn_ts.pt"
    torch_mod.jit.save(traced, str(path))
    return path


@pytest.fixture(scope="session")
def encoder_torchscript(torch_mod: Any, tiny_models: Any, models_dir: Path) -> Path:
    model, feeds = tiny_models.make_encoder_with_example()
    traced = torch_mod.jit.trace(model, (feeds["input_ids"], feeds["attention_mask"]))
    path = models_dir / "encoder_ts.pt"
    torch_mod.jit.save(traced, str(path))
    return path


@pytest.fixture(scope="session")
def factory_file(models_dir: Path) -> Path:
    """A .py file whose factories build the tiny models: use as f"{factory_file}:make_cnn_with_example"."""
    path = models_dir / "factories.py"
    path.write_text("from tiny_models import *  # noqa: F403\n")
    return path


@pytest.fixture(scope="session")
def cnn_state_dict(torch_mod: Any, tiny_models: Any, models_dir: Path) -> Path:
    path = models_dir / "cnn_state.pt"
    torch_mod.save(tiny_models.make_cnn().state_dict(), str(path))
    return path


@pytest.fixture(scope="session")
def cnn_pickle(torch_mod: Any, tiny_models: Any, models_dir: Path) -> Path:
    """A whole module pickled with torch.save: its class lives in tiny_models (in models_dir)."""
    path = models_dir / "cnn_pickled.pt"
    torch_mod.save(tiny_models.make_cnn(), str(path))
    return path


@pytest.fixture(scope="session")
def onnx_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx")


@pytest.fixture(scope="session")
def matmul_onnx(onnx_dir: Path) -> Path:
    return make_matmul_add_relu(onnx_dir / "mlp.onnx")


@pytest.fixture(scope="session")
def conv_onnx(onnx_dir: Path) -> Path:
    return make_conv_bn_relu_add(onnx_dir / "conv.onnx")


@pytest.fixture(scope="session")
def foldable_onnx(onnx_dir: Path) -> Path:
    return make_foldable(onnx_dir / "foldable.onnx")


@pytest.fixture(scope="session")
def fast_bench_toml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("config") / "optcli.toml"
    path.write_text(FAST_BENCH_TOML)
    return path

