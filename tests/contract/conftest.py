"""Fixtures for tests against NVIDIA's real builder: TensorRT-RTX, which parses and builds without a GPU.

The builder is first probed in a child process: a TensorRT
builder that cannot work may abort the whole process instead of raising, and this one must survive
to report it. Tests skip with the reason only where the bindings are not installed (the test lock
installs them: `make dev`)."""
from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def rtx() -> Any:
    """The real `tensorrt_rtx_bindings` module, after a child process built a network with it."""
    import subprocess
    import sys

    from optcli.backends.tensorrt.toolkit import TENSORRT_RTX

    if not TENSORRT_RTX.installed():
        pytest.skip("TensorRT-RTX is not installed (pip install 'optcli[tensorrt-rtx]'; make dev does)")
    probe = subprocess.run([sys.executable, "-c", "import tensorrt_rtx_bindings as t; "
                            "t.Builder(t.Logger(t.Logger.ERROR)).create_network(0)"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.fail(f"TensorRT-RTX is installed but its builder does not work here: {probe.stderr[-300:]}")
    import tensorrt_rtx_bindings

    return tensorrt_rtx_bindings


@pytest.fixture
def engine_cache(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A private engine cache: nothing a test builds lands in ~/.cache."""
    monkeypatch.setenv("OPTCLI_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"

