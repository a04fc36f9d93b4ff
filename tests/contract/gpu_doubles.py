"""A pytest plugin (`-p gpu_doubles`, with tests/contract on sys.path) that runs tests/gpu against the
TensorRT double and the torch.cuda stand-in, as if an NVIDIA L4 with TensorRT 10.8 were here: the
probe says usable, `import tensorrt` gives the double, the runner and the build stage take the doubles.
It proves a GPU test reaches its assertions with the API used as the double models it; nothing about
real kernels, streams or timings. test_gpu_first_run.py uses it."""
from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

from fake_cuda import TorchShim
from fake_tensorrt import make_tensorrt


def pytest_configure(config: Any) -> None:
    import optcli.backends.tensorrt.engine_build as stage_module
    import optcli.backends.tensorrt.probe as probe
    import optcli.backends.tensorrt.runner as runner_module

    trt = make_tensorrt()
    shim = TorchShim(trt)
    status = probe.TensorRTStatus(True, gpu="NVIDIA L4", compute_capability="8.9", tensorrt_version=trt.__version__,
                                  torch_cuda="12.8", tensorrt_cuda="12")
    probe.tensorrt_status = lambda: status  # type: ignore[assignment]
    runner_module.require = lambda module, purpose: {"tensorrt": trt, "torch": shim}[module]  # type: ignore[assignment]
    stage_module.require = lambda module, purpose: trt  # type: ignore[assignment]
    sys.modules["tensorrt"] = trt
    os.environ["OPTCLI_CACHE_DIR"] = tempfile.mkdtemp(prefix="optcli-gpu-doubles-")
