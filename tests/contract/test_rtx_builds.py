"""Every kind of graph optcli writes for a TensorRT target, parsed and built by NVIDIA's real builder
(TensorRT-RTX, no GPU needed), and each ONNX the run wrote also taken by the fake (issue 29, part 1).

`--target tensorrt` and `--target tensorrt-rtx` prepare the same graphs (the stages ask
registry.graph_needs(target), the same for both); only the builder at the end differs, so a tensorrt-rtx
compile is the real check of what --target tensorrt would hand TensorRT. The default run builds the mission's
example (the tiny CNN from a .pt2 with --int8 --calib) and a shape-tensor input; the slow run adds FP32 and FP16 of
the CNN, the encoder from a .pt2 (dynamic batch) in all three precisions, and the encoder ONNX with a
dynamic batch and sequence at FP32 and FP16 (its INT8 is the session run test_rtx_compile.py checks)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from compile_testkit import read_report, run_main
from fake_tensorrt import make_tensorrt
from optcli.backends.tensorrt.builder import build_engine
from optcli.backends.tensorrt.parser_check import parse_issues


def calib_for(root: Path, arrays: dict[str, Any]) -> Path:
    folder = root / "calib"
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "a.npz", **arrays)
    return folder


def compile_rtx(model: Path, out: Path, *extra: str) -> dict[str, Any]:
    """A tensorrt-rtx compile that must end in an engine the real builder built; every ONNX it wrote is
    taken by the real parser and by the fake."""
    code, _, err = run_main("compile", str(model), "--target", "tensorrt-rtx", "--out", str(out), "--no-bench", *extra)
    assert code == 0, err
    report = read_report(out)
    build = next(s for s in report["stages"] if s["name"] == "build")
    assert build["status"] == "ok" and build["details"]["builder"] == "TensorRT-RTX", build
    assert (out / report["final"]["artifact"]).stat().st_size == build["details"]["engine_bytes"] > 0
    import tensorrt_rtx_bindings as rtx

    for graph in sorted(out.glob("[0-9][0-9]-*/*.onnx")):
        assert parse_issues(rtx, graph, rounds=1) == [], graph
        assert parse_issues(make_tensorrt(), graph, rounds=1) == [], graph
    return report


def test_the_two_tensorrt_targets_prepare_the_same_graphs():
    import dataclasses

    from optcli.backends.registry import graph_needs

    def graph_facts(target: str) -> dict:  # what the graph stages read; not who builds or needs a device
        return {k: v for k, v in dataclasses.asdict(graph_needs(target)).items()
                if k not in ("label", "build_needs_device")}

    assert graph_facts("tensorrt") == graph_facts("tensorrt-rtx") != graph_facts("cpu") == graph_facts("auto")


def test_the_mission_example_int8_cnn_from_pt2(rtx, cnn_pt2, tmp_path, engine_cache):
    calib = calib_for(tmp_path, {"x": np.random.default_rng(0).standard_normal((32, 3, 16, 16)).astype(np.float32)})
    report = compile_rtx(cnn_pt2, tmp_path / "out", "--int8", "--calib", str(calib))
    q = next(s for s in report["stages"] if s["name"] == "quantize-int8")
    assert q["details"]["flavour"]["name"] == "qdq-s8s8" and q["details"]["flavour"]["bias"] == "float"
    assert next(s for s in report["stages"] if s["name"] == "build")["details"]["profiles"] == \
        ["x:1x3x16x16/1x3x16x16/32x3x16x16"]


def test_a_shape_tensor_input_builds_with_its_value_range(rtx, tmp_path):
    from onnx import TensorProto, helper

    m = helper.make_model(helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["A", "B"])]),
        opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "reshape.onnx"
    onnx.save(m, str(path))
    from optcli.backends.tensorrt.profiles import InputProfile

    built = build_engine(rtx, path, [InputProfile("x", (1, 6), (2, 6), (4, 6), (0,))], {}, None,
                         shape_values={"shape": ((1, 1), (2, 6), (24, 24))})
    assert built.engine_bytes and {i["name"] for i in built.inputs} == {"x", "shape"}


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_cnn_from_pt2(rtx, cnn_pt2, tmp_path, engine_cache, precision):
    compile_rtx(cnn_pt2, tmp_path / "out", *([] if precision == "fp32" else ["--fp16"]))


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_encoder_from_pt2(rtx, encoder_pt2, tmp_path, engine_cache, precision):
    rng = np.random.default_rng(0)
    extra = {"fp32": [], "fp16": ["--fp16"]}.get(precision)
    if extra is None:
        ids = rng.integers(0, 50, (32, 8)).astype(np.int64)
        extra = ["--int8", "--calib", str(calib_for(tmp_path, {"input_ids": ids, "attention_mask": np.ones_like(ids)}))]
    compile_rtx(encoder_pt2, tmp_path / "out", *extra)


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_encoder_onnx_with_dynamic_batch_and_sequence(rtx, rtx_encoder, tmp_path, engine_cache, precision):
    path, _ = rtx_encoder
    report = compile_rtx(path, tmp_path / "out", *([] if precision == "fp32" else ["--fp16"]))
    build = next(s for s in report["stages"] if s["name"] == "build")
    assert build["details"]["profiles"][0] == "input_ids:1x1/1x128/32x128"


def test_simplify_keeps_plain_onnx_ops_for_tensorrt(rtx, tmp_path, engine_cache):
    """onnxsim 0.8 fuses a hand-written attention block into com.microsoft Attention, which TensorRT's
    parser cannot import ("Q, K, and V inputs must have the same number of dimensions": swin and
    mobilevit in the zoo sweep). Its contrib-op passes are off for the TensorRT targets."""
    from compile_testkit import make_eager_attention

    path = make_eager_attention(tmp_path / "attention.onnx")
    report = compile_rtx(path, tmp_path / "out")
    simplify = next(s for s in report["stages"] if s["name"] == "simplify")
    graph = onnx.load(str(tmp_path / "out" / simplify["artifact"]), load_external_data=False)
    assert {n.domain for n in graph.graph.node} <= {"", "ai.onnx"}


def test_an_rtx_engine_is_checked_for_its_version_only(tmp_path: Path) -> None:
    """TensorRT-RTX engines run on any RTX GPU (compute 8.0+): the loader's metadata check compares only
    the TensorRT-RTX version, never the GPU or compute capability of the machine that built it (which
    has none). A merge once left this rule in a runner method nothing called."""
    import json

    from optcli.backends.tensorrt.engine_loader import check_metadata
    from optcli.backends.tensorrt.metadata import EngineMetadata
    from optcli.errors import UsageError

    trt = pytest.importorskip("tensorrt_rtx_bindings")
    engine = tmp_path / "model.engine"
    engine.write_bytes(b"")

    def write(version: str) -> None:
        meta = EngineMetadata(tensorrt_version=version, gpu=None, compute_capability=None, cache_key="k",
                              onnx_sha256="a", engine_sha256="b", engine_bytes=0, profiles=[], inputs=[],
                              outputs=[], options={}, build_seconds=0.0)
        (tmp_path / "model.engine.json").write_text(json.dumps(meta.to_json()))

    write(str(trt.__version__))
    assert check_metadata(trt, None, engine, 0).gpu is None  # no GPU query: torch is not even given
    write("0.0.1")
    with pytest.raises(UsageError, match="built with TensorRT-RTX 0.0.1"):
        check_metadata(trt, None, engine, 0)
