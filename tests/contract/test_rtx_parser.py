"""NVIDIA's real ONNX parser (TensorRT-RTX's, the same onnx-tensorrt code as TensorRT's) as the oracle:
`optcli check` asks it where it is installed and names what it refuses by node (issue 29, part 2); the
documented matrix no longer refuses what the installed parser imports (F3); a bad profile range is a
one-line usage error, not the bindings' RuntimeError (F10)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from compile_testkit import ort_default_int8, run_main
from optcli.backends.tensorrt.builder import build_engine
from optcli.backends.tensorrt.parser_check import parse_issues
from optcli.backends.tensorrt.preflight import check_file
from optcli.backends.tensorrt.profiles import InputProfile
from optcli.errors import UsageError
from parser_corpus import CORPUS, const, model, vi


def cnn_with_gemm(path: Path) -> Path:
    """Five convs and a Gemm head: onnxruntime's default INT8 gives six INT32 bias DequantizeLinear nodes."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(5):
        c_in = 3 if i == 0 else 8
        inits += [const(f"W{i}", rng.standard_normal((8, c_in, 3, 3)).astype(np.float32)),
                  const(f"B{i}", rng.standard_normal(8).astype(np.float32))]
        nodes += [helper.make_node("Conv", [x, f"W{i}", f"B{i}"], [f"c{i}"], pads=[1, 1, 1, 1], name=f"conv{i}"),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}")]
        x = f"r{i}"
    inits += [const("Wf", rng.standard_normal((4, 8)).astype(np.float32)), const("Bf", np.zeros(4, np.float32))]
    nodes += [helper.make_node("GlobalAveragePool", [x], ["g"], name="gap"),
              helper.make_node("Flatten", ["g"], ["f"], name="flat"),
              helper.make_node("Gemm", ["f", "Wf", "Bf"], ["y"], transB=1, name="fc")]
    onnx.save(model(nodes, [vi("x", shape=("N", 3, 16, 16))], [vi("y", shape=("N", 4))], inits), str(path))
    return path


def test_check_names_every_int32_bias_node_from_the_real_parser(rtx, tmp_path):
    """Done-when of part 2: the parser stops at the first node it refuses; optcli cuts it out and asks
    again, so each of the six INT32 bias nodes is named, with the parser's own rule."""
    default = ort_default_int8(cnn_with_gemm(tmp_path / "cnn.onnx"), tmp_path / "ort-default.onnx", (1, 3, 16, 16))
    code, out, err = run_main("check", str(default), "--target", "tensorrt", "--json")
    data = json.loads(out)
    assert code == 1, err
    assert data["oracle_kind"] == "parser" and data["oracle"] == f"TensorRT-RTX {rtx.__version__} ONNX parser"
    found = data["findings"]
    assert sorted(f["node_name"] for f in found) == sorted([f"B{i}_DequantizeLinear" for i in range(5)]
                                                           + ["Bf_DequantizeLinear"])
    assert all(f["rule"] == "parser" and "input has type Int32 but must have type" in f["reason"] for f in found)
    nodes = onnx.load(str(default)).graph.node
    assert all(nodes[f["node"]].name == f["node_name"] for f in found)  # indices of the user's graph
    assert "cudaError" not in out  # the no-GPU noise every error carries here is dropped
    code, out, _ = run_main("check", str(default))
    assert code == 1 and out.strip().endswith(f"(oracle: TensorRT-RTX {rtx.__version__} ONNX parser)")


def test_check_says_when_the_real_parser_could_not_answer_and_uses_the_matrix(rtx, tmp_path, monkeypatch):
    import optcli.backends.tensorrt.graph_check as graph_check
    from optcli.backends.tensorrt.toolkit import Toolkit

    broken = Toolkit("tensorrt", "TensorRT", "not_a_parser_module", "tensorrt", builds_without_gpu=False)
    monkeypatch.setattr(graph_check, "installed_toolkits", lambda: [broken])
    path = tmp_path / "u.onnx"
    onnx.save(CORPUS["unique_op"](), str(path))
    code, out, _ = run_main("check", str(path))
    assert code == 1 and "note: unknown parser module 'not_a_parser_module'" in out
    assert "(oracle: documented support matrix" in out and "Unique is not supported" in out


def test_optcli_own_rules_still_apply_when_the_parser_answers(rtx, tmp_path):
    # NonZero: TensorRT-RTX refuses it outright (no plugin); optcli's runner refuses data-dependent outputs.
    path = tmp_path / "nz.onnx"
    onnx.save(CORPUS["nonzero"](), str(path))
    code, out, _ = run_main("check", str(path), "--json")
    rules = sorted(f["rule"] for f in json.loads(out)["findings"])
    assert code == 1 and rules == ["data-dependent", "parser"]


@pytest.mark.parametrize("name", ["rmsnormalization_opset23", "swish_opset24", "relu_opset25"])
def test_the_matrix_takes_what_the_installed_parser_imports(rtx, tmp_path, name):
    """F3: the matrix's window was TensorRT 10.1's (opset 9..20, no newer ops): it refused these, which
    NVIDIA's parser imports. The window and the op list now follow the installed version."""
    path = tmp_path / f"{name}.onnx"
    onnx.save(CORPUS[name](), str(path))
    assert parse_issues(rtx, path, rounds=1) == []
    assert check_file(path, "tensorrt-rtx", str(rtx.__version__)) == []
    assert check_file(path) == []  # nothing installed: the newest known window
    assert check_file(path, "tensorrt", "10.8.0.43") != []  # 10.x documents neither


def shape_input_graph(path: Path) -> Path:
    """y = Reshape(x, s): `s` is a shape tensor (its values decide y's shape)."""
    m = model([helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape")],
              [vi("x", shape=(2, 6)), vi("s", TensorProto.INT64, (2,))], [vi("y", shape=("A", "B"))])
    onnx.save(m, str(path))
    return path


def test_a_bad_shape_value_range_is_a_usage_error_not_a_traceback(rtx, tmp_path):
    """F10: profile.set_shape_input raises RuntimeError for MIN > OPT (pyCore.cpp PY_ASSERT_RUNTIME_ERROR,
    TensorRT-RTX's too); nothing caught it, so the user saw a traceback."""
    path = shape_input_graph(tmp_path / "reshape.onnx")
    with pytest.raises(UsageError, match="bad profile values for input 's'") as info:
        build_engine(rtx, path, [], {}, None, shape_values={"s": ((4, 3), (2, 6), (12, 1))})
    assert "MIN <= OPT <= MAX" in info.value.message and "0 <= MIN <= OPT <= MAX" in info.value.hint
    built = build_engine(rtx, path, [], {}, None, shape_values={"s": ((1, 1), (2, 6), (12, 12))})
    assert built.engine_bytes and [i["name"] for i in built.inputs] == ["x", "s"]


def test_a_negative_profile_dim_is_a_usage_error_not_a_traceback(rtx, tmp_path):
    """F10 for set_shape: a negative dim raises RuntimeError in the bindings."""
    path = tmp_path / "mm.onnx"
    onnx.save(CORPUS["plain_matmul_relu"](), str(path))
    bad = InputProfile("x", (-1, 4), (2, 4), (8, 4), (0,))
    with pytest.raises(UsageError, match="bad profile shape for input 'x'"):
        build_engine(rtx, path, [bad], {}, None)


def test_the_stages_preflight_asks_the_real_parser_too(rtx, tmp_path):
    """RoBERTa's position ids are a CumSum over the INT64 mask: the matrix (10.1: CumSum takes floats)
    refused its INT8 graph in quantize-int8, which NVIDIA's parser imports (its FP32 graph built). The
    stages now ask the parser where it is installed (and the matrix learnt INT64 CumSum from it)."""
    from optcli.backends.tensorrt.graph_check import require_clean

    path = tmp_path / "cumsum.onnx"
    onnx.save(CORPUS["cumsum_int64"](), str(path))
    assert parse_issues(rtx, path, rounds=1) == []
    require_clean(path, "the INT8 ONNX")
    bad = tmp_path / "bias.onnx"
    onnx.save(CORPUS["qdq_int32_bias"](), str(bad))
    with pytest.raises(Exception, match=r"ONNX parser refuses \(TensorRT-RTX .* ONNX parser\): node 2 'bias_dq'"):
        require_clean(bad, "the INT8 ONNX")
