"""Tiny models built inline (no downloads) and a CLI runner, for the bench/profile/compare/load tests.

A module of its own (not conftest.py) so tests can import it by a name no other folder uses."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from optcli.backends.registry import Backend


def make_mlp_onnx(path: Path, batch: int | str = "batch") -> Path:
    """x[batch, 16] -> MatMul -> Add -> Relu -> MatMul -> y[batch, 4]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((32, 4)).astype(np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h0"], name="fc1"),
             helper.make_node("Add", ["h0", "b1"], ["h1"], name="bias1"),
             helper.make_node("Relu", ["h1"], ["h2"], name="act1"),
             helper.make_node("MatMul", ["h2", "w2"], ["y"], name="fc2")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])], [w1, b1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def make_embedding_onnx(path: Path, vocab: int = 7) -> Path:
    """ids[batch, 5] (int64) -> Gather(table[vocab, 3]) -> * mask[batch, 5, 1] -> ReduceSum -> y[batch, 3]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    table = numpy_helper.from_array(np.arange(vocab * 3, dtype=np.float32).reshape(vocab, 3), "table")
    axes = numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")
    unsq = numpy_helper.from_array(np.array([2], dtype=np.int64), "unsq")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["emb"], name="embed"),
             helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT, name="cast"),
             helper.make_node("Unsqueeze", ["maskf", "unsq"], ["mask3"], name="unsqueeze"),
             helper.make_node("Mul", ["emb", "mask3"], ["masked"], name="apply_mask"),
             helper.make_node("ReduceSum", ["masked", "axes"], ["y"], keepdims=0, name="pool")]
    graph = helper.make_graph(
        nodes, "embed",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 5]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])], [table, axes, unsq])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


CNN_SOURCE = '''
import torch
from torch import nn


class TinyCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        x = torch.relu(self.conv(x))
        x = nn.functional.max_pool2d(x, 2)
        return self.fc(x.flatten(1))
'''


def make_cnn_pt2(folder: Path) -> Path:
    """A tiny CNN saved with torch.export (dynamic batch), x[batch, 1, 8, 8] -> [batch, 3]."""
    import torch

    namespace: dict = {}
    exec(compile(CNN_SOURCE, "tiny_cnn", "exec"), namespace)
    torch.manual_seed(0)
    model = namespace["TinyCNN"]().eval()
    batch = torch.export.Dim("batch", min=1, max=64)
    ep = torch.export.export(model, (torch.randn(2, 1, 8, 8),), dynamic_shapes=({0: batch},))
    path = folder / "tiny_cnn.pt2"
    torch.export.save(ep, str(path))
    script = torch.jit.trace(model, torch.randn(2, 1, 8, 8))
    torch.jit.save(script, str(folder / "tiny_cnn.ts"))
    return path


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """`optcli ARGS` in a child process, as a user runs it."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-c", "from optcli.cli.main import main; main()", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=timeout, env=env)


# A test backend, registered by the tests that need it (the register_backend fixture): its "gpu-timed"
# artifacts are ONNX files run by GpuTimedOnnxRunner.
BACKEND = Backend(name="gpu-timed", label="GPU-timed ONNX", formats=("gpu-timed",),
                  runner="measuring_models:GpuTimedOnnxRunner", takes_optimization=True)


class GpuTimedOnnxRunner:
    """Stands in for a GPU runner's CUDA-event timer (`time_gpu`), which no machine here can run:
    a real onnxruntime runner plus a `time_gpu` that reports a fixed device time."""

    DEVICE_MS = 0.25

    def __new__(cls, path: Path, **options):
        from optcli.backends.onnxruntime.runner import OnnxRuntimeRunner

        class _Runner(OnnxRuntimeRunner):
            def time_gpu(self, feeds, runs: int = 100, warmup: int = 10) -> list[float]:
                self.normalize(feeds)
                return [cls.DEVICE_MS] * runs

        return _Runner(path, **options)
