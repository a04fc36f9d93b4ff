"""Tiny ONNX models and data for the CPU backend tests (onnx.helper, no export needed)."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def mlp_onnx(path: Path, seed: int = 0, hidden: int = 32) -> Path:
    """x[batch, 16] -> Gemm -> Relu -> Gemm -> y[batch, 10]; a dynamic batch dim."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((16, hidden)) / 4).astype(np.float32)
    b1 = (rng.standard_normal(hidden) / 10).astype(np.float32)
    w2 = (rng.standard_normal((hidden, 10)) / 4).astype(np.float32)
    b2 = np.zeros(10, np.float32)
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["y"], name="fc2")]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])],
        [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9  # onnx's newest IR version can be newer than onnxruntime reads
    onnx.checker.check_model(model)
    onnx.save_model(model, str(path))
    return path


def npz_dir(root: Path, name: str, n_files: int = 4, per_file: int = 32, seed: int = 0) -> Path:
    """A folder of .npz files with key `x` (shape [n, 16]) and labels."""
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(n_files):
        np.savez(d / f"part-{i}.npz", x=rng.standard_normal((per_file, 16)).astype(np.float32),
                 labels=rng.integers(0, 10, size=per_file).astype(np.int64))
    return d


# A short measurement: these tests check the choice's rules, not the speed of a 2-layer MLP.
QUICK = {"min_rounds": 2, "calls_per_round": 2, "min_seconds": 0.2, "max_seconds": 2.0, "block_ms": 10.0,
         "switch_ms": 2.0}
