"""Tiny models and helpers shared by the test_triton_*.py files (built inline, nothing downloaded)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf import text_format
from onnx import TensorProto, helper, numpy_helper

# tritonclient ships Triton's generated protobuf modules: the real ModelConfig message.
from tritonclient.grpc import model_config_pb2

# onnxruntime 1.31 refuses the IR version onnx 1.23 writes by default.
IR_VERSION = 8


def parse_config(text: str) -> Any:
    """Parse config.pbtxt into Triton's ModelConfig: an unknown field or a wrong type raises ParseError."""
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def _save(graph: Any, path: Path, opset: int = 17) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def conv_onnx(path: Path, batch: str | int = "batch") -> Path:
    """fp32 image model: x [batch,3,8,8] -> Conv -> Relu -> GlobalAveragePool -> Flatten -> logits [batch,4]."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(np.zeros(4, np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["logits"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 4])
    return _save(helper.make_graph(nodes, "conv", [x], [y], [w, b]), path)


def qdq_onnx(path: Path) -> Path:
    """INT8 Q/DQ model (TensorRT style): Q/DQ on the activation and the weight around a MatMul."""
    rng = np.random.default_rng(1)
    w_int8 = numpy_helper.from_array(rng.integers(-127, 127, (16, 8)).astype(np.int8), "w_q")
    inits = [w_int8,
             numpy_helper.from_array(np.array(0.05, np.float32), "x_scale"),
             numpy_helper.from_array(np.array(0, np.int8), "x_zp"),
             numpy_helper.from_array(np.array(0.01, np.float32), "w_scale"),
             numpy_helper.from_array(np.array(0, np.int8), "w_zp")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["x_q"]),
             helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zp"], ["x_dq"]),
             helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zp"], ["w_dq"]),
             helper.make_node("MatMul", ["x_dq", "w_dq"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])
    return _save(helper.make_graph(nodes, "qdq", [x], [y], inits), path)


def token_onnx(path: Path) -> Path:
    """Text-like model: input_ids int64 [batch, seq] -> Gather(embedding) -> ReduceMean -> pooled [batch, 8],
    plus a batch-only output `n` [batch] (Triton needs dims [1] with an empty reshape for it)."""
    emb = numpy_helper.from_array(np.random.default_rng(2).standard_normal((100, 8)).astype(np.float32), "emb")
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["e"]),
             helper.make_node("ReduceMean", ["e", "axes"], ["pooled"], keepdims=0),
             helper.make_node("ReduceSum", ["pooled", "axes"], ["n"], keepdims=0)]
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])
    pooled = helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", 8])
    n = helper.make_tensor_value_info("n", TensorProto.FLOAT, ["batch"])
    return _save(helper.make_graph(nodes, "tok", [ids], [pooled, n], [emb, axes]), path, opset=18)


def fake_engine(folder: Path, meta: dict[str, Any] | None = None, name: str = "model.engine") -> Path:
    """A stand-in engine: arbitrary bytes (config generation never reads them) plus model.engine.json."""
    folder.mkdir(parents=True, exist_ok=True)
    engine = folder / name
    engine.write_bytes(b"not a real TensorRT plan: only the metadata beside it is read")
    if meta is None:
        meta = engine_meta()
    (folder / "model.engine.json").write_text(json.dumps(meta), encoding="utf-8")
    return engine


def engine_meta(max_batch: int = 32, seq_dynamic: bool = False) -> dict[str, Any]:
    """Metadata in the documented shape (docs/deploy.md, 'Engine metadata')."""
    shape = [-1, 3, 224, 224] if not seq_dynamic else [-1, 3, -1, 224]
    return {
        "inputs": [{"name": "images", "dtype": "float16", "shape": shape,
                    "profile": {"min": [1, 3, 224, 224], "opt": [8, 3, 224, 224], "max": [max_batch, 3, 224, 224]}}],
        "outputs": [{"name": "scores", "dtype": "float16", "shape": [-1, 1000]}],
        "tensorrt_version": "10.13.0", "gpu": {"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"},
        "precision": "fp16",
    }


def write_report(run_dir: Path, artifact_rel: str, fmt: str = "onnx", target: str = "cpu",
                 precision: str = "fp32", status: str = "ok", model_inputs: list[dict] | None = None) -> Path:
    """A report.json in the schema optcli/report.py writes (only the keys export-triton reads are real)."""
    report = {"schema_version": 1, "optcli_version": "0.1.0", "status": status, "target": target,
              "model": {"path": "/src/resnet_tiny.pt2", "spec": "resnet_tiny.pt2", "format": "pt2",
                        "inputs": model_inputs or []},
              "environment": {}, "config": {"out": str(run_dir)}, "stages": [], "error": None, "seconds": 1.0,
              "final": None if status != "ok" else {"artifact": artifact_rel, "format": fmt, "precision": precision,
                                                     "backend": "onnxruntime" if fmt == "onnx" else "tensorrt"}}
    artifact = run_dir / artifact_rel
    if report["final"] and artifact.exists():  # optcli records the artifact's sha256; readers check it
        from optcli.artifact import sha256_file

        report["final"]["sha256"] = sha256_file(artifact)
    path = run_dir / "report.json"
    path.write_text(json.dumps(report), encoding="utf-8")
    return path


_NP = {1: np.bool_, 2: np.uint8, 6: np.int8, 8: np.int32, 9: np.int64, 10: np.float16, 11: np.float32}


def run_like_triton(model_dir: Path, version: int = 1) -> dict[str, tuple[int, ...]]:
    """Feed the ONNX model in a repository the tensors Triton would build from config.pbtxt (a full batch
    of max_batch_size with the warm-up dims) and check every output against the config's dims.

    The closest this machine gets to Triton loading the model: the config and the graph must agree on
    names, dtypes, ranks and the batch dim. Returns the output shapes.
    """
    import onnxruntime as ort

    cfg = parse_config((model_dir / "config.pbtxt").read_text())
    batch = [cfg.max_batch_size] if cfg.max_batch_size > 0 else []
    warm = cfg.model_warmup[-1].inputs
    feeds = {}
    for inp in cfg.input:
        dims = list(warm[inp.name].dims)
        shape = batch + ([] if inp.HasField("reshape") and not inp.reshape.shape else dims)
        feeds[inp.name] = np.zeros(shape, dtype=_NP[inp.data_type])
    path = model_dir / str(version) / "model.onnx"
    path = path / "model.onnx" if path.is_dir() else path
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    results = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))
    shapes = {}
    for out in cfg.output:
        got = results[out.name]
        assert got.dtype == _NP[out.data_type], (out.name, got.dtype)
        expected = batch + ([] if out.HasField("reshape") and not out.reshape.shape else list(out.dims))
        matches = len(got.shape) == len(expected) and all(
            e in (-1, g) for e, g in zip(expected, got.shape, strict=True))
        assert matches, (out.name, got.shape, expected)
        shapes[out.name] = tuple(got.shape)
    return shapes
