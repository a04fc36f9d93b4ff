"""Fixtures for tests against NVIDIA's real builder: TensorRT-RTX, which parses and builds without a GPU.

The builder is first probed in a child process (optcli.backends.tensorrt_rtx.target): a TensorRT
builder that cannot work may abort the whole process instead of raising, and this one must survive
to report it. Tests skip with the reason only where the bindings are not installed (the test lock
installs them: `make dev`)."""
from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def rtx() -> Any:
    """The real `tensorrt_rtx_bindings` module, after a child process built a network with it."""
    from optcli.backends.tensorrt.toolkit import TENSORRT_RTX
    from optcli.backends.tensorrt_rtx.target import builder_facts

    if not TENSORRT_RTX.installed():
        pytest.skip("TensorRT-RTX is not installed (pip install 'optcli[tensorrt-rtx]'; make dev does)")
    facts = builder_facts()
    if not facts.get("builder"):
        pytest.fail(f"TensorRT-RTX is installed but its builder does not work here: {facts.get('error')}")
    import tensorrt_rtx_bindings

    return tensorrt_rtx_bindings


@pytest.fixture
def engine_cache(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A private engine cache: nothing a test builds lands in ~/.cache."""
    monkeypatch.setenv("OPTCLI_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(scope="session")
def rtx_encoder(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """An encoder ONNX as a user hands it over: dynamic batch AND dynamic sequence (input_ids and
    attention_mask of shape batch x seq), with calibration data for --int8."""
    import numpy as np

    from compile_testkit import make_masked_encoder

    root = tmp_path_factory.mktemp("rtx-encoder")
    path = make_masked_encoder(root / "encoder.onnx", seq="seq")  # type: ignore[arg-type]
    calib = root / "calib"
    calib.mkdir()
    for i in range(2):
        ids = np.random.default_rng(i).integers(0, 50, (16, 128)).astype(np.int64)
        np.savez(calib / f"{i}.npz", input_ids=ids, attention_mask=np.ones_like(ids))
    return path, calib


@pytest.fixture(scope="session")
def rtx_encoder_int8(rtx: Any, rtx_encoder: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """`optcli compile encoder.onnx --target tensorrt-rtx --int8 --calib DIR` as typed (no --input), once per
    session: (exit code, stderr, output folder)."""
    from compile_testkit import run_main

    path, calib = rtx_encoder
    out = tmp_path_factory.mktemp("rtx-encoder-int8") / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPTCLI_CACHE_DIR", str(out.parent / "cache"))
        code, _, err = run_main("compile", str(path), "--target", "tensorrt-rtx", "--int8", "--calib", str(calib),
                                "--out", str(out), "--no-bench")
    return code, err, out
