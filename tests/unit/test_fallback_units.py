"""Fallback units and module names on graphs built inline with onnx.helper."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optcli.errors import UsageError
from optcli.plan.run_state import RunState
from optcli.quantize.flavour import TABLE
from optcli.quantize.module_names import module_path, node_modules, resolve_excludes
from optcli.quantize.units import compute_units


def _node(op: str, ins: list[str], outs: list[str], name: str, scopes: str | None = None, **attrs) -> onnx.NodeProto:
    n = helper.make_node(op, ins, outs, name=name, **attrs)
    if scopes:
        p = n.metadata_props.add()
        p.key, p.value = "pkg.torch.onnx.name_scopes", scopes
    return n


def test_torchscript_names_become_module_paths() -> None:
    n = _node("Relu", ["a"], ["b"], "/m/resnet/encoder/stages.1/layers.0/layer/layer.1/activation/Relu")
    assert module_path(n) == "m.resnet.encoder.stages.1.layers.0.layer.1.activation"
    assert module_path(_node("Conv", ["a"], ["b"], "/encoder/encoder.0/conv/Conv")) == "encoder.0.conv"
    assert module_path(_node("Gemm", ["a"], ["b"], "node_linear_1")) is None


def test_dynamo_name_scopes_win_over_the_node_name() -> None:
    n = _node("Conv", ["a"], ["b"], "node_conv2d", "['', 'encoder', 'encoder.0', 'encoder.0.conv', 'conv2d']")
    assert module_path(n) == "encoder.0.conv"


def test_metadata_dropped_by_a_rewrite_is_found_in_an_earlier_graph() -> None:
    early = helper.make_model(helper.make_graph(
        [_node("Relu", ["x"], ["y"], "node_relu", "['', 'body', 'body.act', 'relu']")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])]))
    late = onnx.ModelProto()
    late.CopyFrom(early)
    del late.graph.node[0].metadata_props[:]
    assert node_modules(late) == {}
    assert node_modules(late, early) == {"node_relu": "body.act"}


def test_exclude_patterns_take_node_names_module_paths_and_globs() -> None:
    nodes = ["n0", "n1", "n2", "n3"]
    modules = {"n0": "encoder.layer.10.attn", "n1": "encoder.layer.11.attn.q", "n2": "encoder.layer.11.ffn",
               "n3": "head"}
    assert resolve_excludes(["n3"], nodes, modules) == ["n3"]
    assert resolve_excludes(["encoder.layer.11"], nodes, modules) == ["n1", "n2"]
    assert resolve_excludes(["encoder.layer.11.*"], nodes, modules) == ["n1", "n2"]
    assert resolve_excludes(["*.attn*", "head"], nodes, modules) == ["n0", "n1", "n3"]
    for unknown in ("decoder.*", "encoder.layer.1"):  # a module path is not a string prefix
        with pytest.raises(UsageError, match="no node of that name"):
            resolve_excludes([unknown], nodes, modules)


@pytest.fixture
def cnn(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), "w2")
    wf = numpy_helper.from_array(rng.standard_normal((10, 8)).astype(np.float32), "wf")
    nodes = [_node("Conv", ["x", "w1"], ["c1"], "/body/conv1/Conv", pads=[1, 1, 1, 1]),
             _node("Relu", ["c1"], ["r1"], "/body/act1/Relu"),
             _node("Conv", ["r1", "w2"], ["c2"], "/body/conv2/Conv", pads=[1, 1, 1, 1]),
             _node("Add", ["c2", "r1"], ["s"], "/body/Add"),
             _node("GlobalAveragePool", ["s"], ["p"], "/pool/GlobalAveragePool"),
             _node("Flatten", ["p"], ["f"], "/Flatten"),
             _node("Gemm", ["f", "wf"], ["y"], "/head/Gemm", transB=1)]
    graph = helper.make_graph(nodes, "cnn",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])], [w1, w2, wf])
    path = tmp_path / "cnn.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_units_are_compute_ops_with_the_pass_through_ops_that_feed_them(cnn: Path) -> None:
    units, total = compute_units(cnn, TABLE["qdq-u8s8"])
    by_module = {u.module: u for u in units}
    assert [u.op_type for u in units] == ["Conv", "Conv", "Add", "GlobalAveragePool", "Gemm"]
    assert "body.act1" not in by_module, "a Relu is never a unit of its own"
    assert by_module["body.conv2"].nodes == ("/body/conv2/Conv", "/body/act1/Relu")
    assert by_module["head"].nodes == ("/head/Gemm", "/Flatten")
    assert by_module["body.conv1"].flops == 2 * 8 * 16 * 16 * 3 * 9
    assert by_module["body.conv2"].flops == 2 * 8 * 16 * 16 * 8 * 9
    assert by_module["head"].flops == 2 * 10 * 8
    assert total == pytest.approx(sum(u.flops for u in units))
    tensorrt_units, _ = compute_units(cnn, TABLE["qdq-s8s8"])
    assert [u.op_type for u in tensorrt_units] == ["Conv", "Conv", "Gemm"], "only what the flavour quantizes"
    assert tensorrt_units[1].nodes == ("/body/conv2/Conv",), "an unquantized Relu has no Q/DQ to remove"


@pytest.mark.parametrize("flavour", ["qdq-u8s8", "qdq-s8s8"])
def test_a_unit_kept_in_float_reads_float_inputs(cnn: Path, tmp_path: Path, flavour: str) -> None:
    """The class of bug behind 'excluding it changed nothing': ONNX Runtime quantizes a Conv's output
    too, so the next Conv's input Q/DQ survives nodes_to_exclude. A unit in float must read no
    DequantizeLinear at all (weights nor activations), and the rest must stay INT8."""
    from optcli.calibration.dataset import SampleSet
    from optcli.onnx_model import load_onnx
    from optcli.quantize.calibrate import compute_ranges
    from optcli.quantize.evaluate import run_model
    from optcli.quantize.fallback import Quantizer

    fl = TABLE[flavour]
    units, _ = compute_units(cnn, fl)
    x = np.random.default_rng(1).standard_normal((16, 3, 16, 16)).astype(np.float32)
    samples = SampleSet({"x": x}, None, "test", "npz")
    ranges, _ = compute_ranges(cnn, "sha", samples, "minmax", fl.activation_symmetric, fl.op_types, tmp_path / "c")
    qz = Quantizer(cnn, fl, ranges, "minmax", [], {u.node: u.nodes for u in units})
    out = tmp_path / "q.onnx"
    qz.write(out, ["/body/conv2/Conv"])
    graph = load_onnx(out).graph
    producer = {o: n for n in graph.node for o in n.output}
    conv2 = next(n for n in graph.node if n.name == "/body/conv2/Conv")
    assert all(producer.get(t) is None or producer[t].op_type != "DequantizeLinear" for t in conv2.input)
    conv1 = next(n for n in graph.node if n.name == "/body/conv1/Conv")
    assert all(producer[t].op_type == "DequantizeLinear" for t in conv1.input[:2]), "conv1 must stay INT8"
    outs, _ = run_model(out, samples)  # the rewired graph still runs
    assert outs[0].shape == (16, 10) and np.isfinite(outs[0]).all()


def test_seven_bit_weights_only_for_u8_activations_where_kernels_saturate(monkeypatch) -> None:
    """u8 x s8 kernels without VNNI saturate (digits CNN: cosine 0.69 with ORT's integer kernels, 0.9996
    with 7-bit weights); TensorRT's s8s8 and dynamic INT8 keep 8-bit weights."""
    from optcli.quantize import flavour

    for saturates in (True, False):
        monkeypatch.setattr(flavour, "u8s8_saturates", lambda s=saturates: s)
        assert flavour.reduce_range(flavour.TABLE["qdq-u8s8"]) is saturates
        assert flavour.reduce_range(flavour.TABLE["qdq-s8s8"]) is False
        assert flavour.reduce_range(flavour.TABLE["dynamic"]) is False
    monkeypatch.undo()
    flags = open("/proc/cpuinfo").read().split() if __import__("os").path.exists("/proc/cpuinfo") else []
    if flags and __import__("platform").machine() == "x86_64":
        assert flavour.u8s8_saturates() is not bool({"avx512_vnni", "avx_vnni", "amx_int8"} & set(flags))


def _text_graph(dim: str) -> onnx.ModelProto:
    """input_ids [batch, dim] -> Gather (embedding, 8 wide) -> MatMul 8x8 -> MatMul with its own transpose
    (attention scores: S x S, so its FLOPs grow with the square of the length)."""
    emb = numpy_helper.from_array(np.zeros((100, 8), np.float32), "emb")
    w = numpy_helper.from_array(np.zeros((8, 8), np.float32), "w")
    nodes = [_node("Gather", ["emb", "input_ids"], ["h"], "gather"), _node("MatMul", ["h", "w"], ["q"], "proj"),
             _node("Transpose", ["q"], ["qt"], "t", perm=[0, 2, 1]), _node("MatMul", ["q", "qt"], ["s"], "scores")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", dim])],
                          [helper.make_tensor_value_info("s", TensorProto.FLOAT, None)], [emb, w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("recorded", [None, 16, 64])
def test_flops_of_a_dynamic_sequence_are_taken_at_its_recorded_length(tmp_path: Path, recorded: int | None) -> None:
    """A symbolic sequence dim taken as 1 made every projection outweigh attention and dropped units
    under the FLOP-share floor (CI, BERT after the dynamic sequence axis landed)."""
    from optcli.quantize.units import node_flops
    from optcli.sequence_axis import DEFAULT_LENGTH, record_lengths

    model = _text_graph("sequence")
    if recorded:
        record_lengths(model, {"sequence": recorded})
    length = recorded or DEFAULT_LENGTH
    flops = node_flops(model)
    assert flops["proj"] == 2.0 * length * 8 * 8
    assert flops["scores"] == 2.0 * length * length * 8
    # an anonymous symbolic dim on a text input is a sequence too; the batch stays 1
    assert node_flops(_text_graph("s_0")) == node_flops(_text_graph("sequence"))


def _expand_to_computed_shape() -> onnx.ModelProto:
    """x (batch x 16 x 8) -> Expand of a mask to Shape(x) -> Mul -> MatMul: the exporter's attention-mask
    pattern. ONNX's own inference loses the Expand's shape, and every MatMul after it had no FLOPs."""
    w = numpy_helper.from_array(np.ones((8, 8), np.float32), "w")
    one = numpy_helper.from_array(np.ones((1, 1, 8), np.float32), "one")
    nodes = [helper.make_node("Shape", ["x"], ["xs"], name="shape"),
             helper.make_node("Expand", ["one", "xs"], ["ones"], name="expand"),
             helper.make_node("Mul", ["x", "ones"], ["masked"], name="mul"),
             helper.make_node("MatMul", ["masked", "w"], ["y"], name="proj")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16, 8])], [w, one])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_flops_follow_shapes_the_graph_computes() -> None:
    from optcli.quantize.units import node_flops

    assert node_flops(_expand_to_computed_shape())["proj"] == 2.0 * 16 * 8 * 8


def test_units_of_a_graph_without_static_shapes_take_flops_from_an_earlier_graph(tmp_path: Path) -> None:
    """The unpad rewrite slices to the batch's valid length: no shape is static after it."""
    from optcli.onnx_model import save_onnx

    early = _expand_to_computed_shape()
    late = _expand_to_computed_shape()  # x sliced to a length only the data decides, as unpad does
    late.graph.input.append(helper.make_tensor_value_info("n", TensorProto.INT64, [1]))
    late.graph.initializer.extend([numpy_helper.from_array(np.array([0], np.int64), "start"),
                                   numpy_helper.from_array(np.array([1], np.int64), "axis")])
    late.graph.node.insert(0, helper.make_node("Slice", ["x_in", "start", "n", "axis"], ["x"], name="cut"))
    late.graph.input[0].name = "x_in"
    save_onnx(early, tmp_path / "early.onnx")
    save_onnx(late, tmp_path / "late.onnx")
    units, total = compute_units(tmp_path / "late.onnx", TABLE["qdq-u8s8"], [tmp_path / "early.onnx"])
    proj = next(u for u in units if u.node == "proj")
    assert proj.flops == 2.0 * 16 * 8 * 8 and total >= proj.flops
    alone, _ = compute_units(tmp_path / "late.onnx", TABLE["qdq-u8s8"], [])
    assert next(u for u in alone if u.node == "proj").flops == 0.0  # what it was without the earlier graph


def test_user_excludes_reads_a_graph_file_only_where_there_are_patterns(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """An NNCF candidate asks for the node names of a hard-linked copy of the float graph, which graph_view
    (cached by path) parses again: 0.3 s of BERT-base's compile when no --exclude was given."""
    from types import SimpleNamespace

    import optcli.quantize.int8_with_fallback as fallback
    from compile_testkit import make_matmul_add_relu

    model = onnx.load(str(make_matmul_add_relu(tmp_path / "unnamed.onnx")))
    for i, node in enumerate(model.graph.node):
        node.name = f"{node.op_type}_{i}"
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    names = [n.name for n in model.graph.node]
    parsed: list[Path] = []
    real = fallback.graph_view
    monkeypatch.setattr(fallback, "graph_view", lambda p: parsed.append(p) or real(p))

    def ctx(patterns: list[str]) -> SimpleNamespace:
        return SimpleNamespace(config=SimpleNamespace(quantize=SimpleNamespace(exclude_nodes=patterns)),
                               state=RunState())

    assert fallback.user_excludes(ctx([]), path) == [] and not parsed
    assert fallback.user_excludes(ctx([names[0]]), path) == [names[0]] and parsed == [path]
