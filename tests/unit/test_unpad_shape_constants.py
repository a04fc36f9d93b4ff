"""The class of issue 31's bug: a graph exported at a fixed length S computes shapes, lengths and indices
from constants that hold S, through arithmetic of any kind (Concat, Where/Equal, Gather of a shape
vector, Mul, ...). The unpad rewrite must re-express every such tensor from the runtime length L, or
the body fails at L (onnxruntime: "Expand node ... invalid expand shape") or reads the wrong positions.

Each construct below is built by hand with onnx.helper, the way exporters leave it, into a tiny
masked encoder; the rewritten graph must run at the bucketed L and equal the original on every valid
position (onnxruntime)."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from compile_testkit import masked_self_attention
from optcli.accuracy import compare_outputs, sequence_mask
from optcli.onnx_model import load_onnx, save_onnx
from optcli.unpad.graph import find_plan, rewrite

ort = pytest.importorskip("onnxruntime")
S, H, V, BUCKET = 32, 8, 50, 8
_rng = np.random.default_rng(3)


def const(name: str, value: Any, dtype: Any = np.int64) -> Any:
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def batch_dim() -> list[Any]:
    """`batch1`: [batch] from the input's shape (dynamic in every export)."""
    return [helper.make_node("Shape", ["input_ids"], ["ids_shape"]),
            helper.make_node("Gather", ["ids_shape", "zero"], ["batch"], axis=0),
            helper.make_node("Unsqueeze", ["batch", "ax0"], ["batch1"])]


# Each construct: (nodes, initializers) turning `tok` (batch x S x H) into `x`.
def token_type_buffer() -> tuple[list[Any], list[Any]]:
    """transformers' token_type_ids buffer, TorchScript at a fixed length: buffer[:, :S] (folded to a
    [1, S] constant) expanded to a shape built from a constant S, through Equal/Where (the -1 check)."""
    nodes = [*batch_dim(),
             helper.make_node("Concat", ["batch1", "s_1d"], ["tt_shape"], axis=0),
             helper.make_node("Equal", ["tt_shape", "minus_ones"], ["is_neg"]),
             helper.make_node("Where", ["is_neg", "ones2", "tt_shape"], ["tt_target"]),
             helper.make_node("Expand", ["tt_buffer", "tt_target"], ["tt"]),
             helper.make_node("Gather", ["tt_emb", "tt"], ["tt_vec"]),
             helper.make_node("Add", ["tok", "tt_vec"], ["x"])]
    inits = [const("tt_buffer", _rng.integers(0, 2, (1, S))), const("minus_ones", [-1, -1]),
             const("ones2", [1, 1]), const("tt_emb", _rng.standard_normal((2, H)), np.float32)]
    return nodes, inits


def sliced_long_buffer() -> tuple[list[Any], list[Any]]:
    """A position buffer longer than S sliced to a constant end S (the raw export, before folding)."""
    nodes = [helper.make_node("Slice", ["pos_buffer", "zero_1d", "s_1d", "ax1"], ["pos"]),
             helper.make_node("Gather", ["pos_emb", "pos"], ["pos_vec"]),
             helper.make_node("Add", ["tok", "pos_vec"], ["x"])]
    return nodes, [const("pos_buffer", np.arange(64)[None]), const("pos_emb", _rng.standard_normal((64, H)),
                                                                      np.float32)]


def range_positions() -> tuple[list[Any], list[Any]]:
    """Position ids as Range(0, S, 1), S a scalar constant."""
    nodes = [helper.make_node("Range", ["zero", "s_scalar", "one_i"], ["pos"]),
             helper.make_node("Gather", ["pos_emb", "pos"], ["pos_vec"]),
             helper.make_node("Add", ["tok", "pos_vec"], ["x"])]
    return nodes, [const("pos_emb", _rng.standard_normal((64, H)), np.float32)]


def constant_of_shape() -> tuple[list[Any], list[Any]]:
    """A bias of ones made by ConstantOfShape of Concat(batch, S, H), scaled per position by Range."""
    nodes = [*batch_dim(),
             helper.make_node("Concat", ["batch1", "s_1d", "h_1d"], ["bias_shape"], axis=0),
             helper.make_node("ConstantOfShape", ["bias_shape"], ["ones"],
                              value=numpy_helper.from_array(np.array([0.5], np.float32))),
             helper.make_node("Add", ["tok", "ones"], ["x"])]
    return nodes, [const("h_1d", [H])]


def tile_to_sequence() -> tuple[list[Any], list[Any]]:
    """A learned vector tiled over the sequence: Tile(v, [1, S, 1])."""
    nodes = [helper.make_node("Tile", ["vec", "repeats"], ["tiled"]),
             helper.make_node("Add", ["tok", "tiled"], ["x"])]
    return nodes, [const("vec", _rng.standard_normal((1, 1, H)), np.float32), const("repeats", [1, S, 1])]


def gathered_shape_vector() -> tuple[list[Any], list[Any]]:
    """A Reshape target assembled from a Gather of a folded shape vector [1, S, H] (Shape of a folded
    constant, as onnxsim leaves it) and the batch."""
    nodes = [*batch_dim(),
             helper.make_node("Reshape", ["tok", "flat_shape"], ["flat"]),
             helper.make_node("Gather", ["shape_vec", "one_i"], ["s_from_vec"], axis=0),
             helper.make_node("Unsqueeze", ["s_from_vec", "ax0"], ["s_1"]),
             helper.make_node("Concat", ["batch1", "s_1", "h_1d"], ["back_shape"], axis=0),
             helper.make_node("Reshape", ["flat", "back_shape"], ["x"])]
    return nodes, [const("flat_shape", [-1, H]), const("shape_vec", [1, S, H]), const("h_1d", [H])]


def flattened_index_stride() -> tuple[list[Any], list[Any]]:
    """transformers' index-based mask functions: a flattened [batch * S] tensor read at b * S + j (S a
    constant stride, j a folded [1, S] arange). Here it reads the ids back: a wrong stride reads another
    row's tokens."""
    nodes = [*batch_dim(),
             helper.make_node("Cast", ["input_ids"], ["ids_f"], to=TensorProto.FLOAT),
             helper.make_node("Reshape", ["ids_f", "minus_one"], ["ids_flat"]),
             helper.make_node("Range", ["zero", "batch", "one_i"], ["rows"]),
             helper.make_node("Unsqueeze", ["rows", "ax1"], ["rows2"]),
             helper.make_node("Mul", ["rows2", "s_1d"], ["row_start"]),
             helper.make_node("Add", ["row_start", "cols"], ["index"]),
             helper.make_node("Gather", ["ids_flat", "index"], ["ids_back"], axis=0),
             helper.make_node("Unsqueeze", ["ids_back", "ax_last"], ["ids3"]),
             helper.make_node("Mul", ["ids3", "scale"], ["ids_vec"]),
             helper.make_node("Add", ["tok", "ids_vec"], ["x"])]
    return nodes, [const("minus_one", [-1]), const("cols", np.arange(S)[None]), const("ax_last", [-1]),
                   const("scale", _rng.standard_normal((1, 1, H)) * 0.1, np.float32)]


def folded_position_matrix() -> tuple[list[Any], list[Any]]:
    """A position-by-position matrix folded to a constant without a batch dim (DeBERTa's relative
    position index [heads, S, S] under a fully static dynamo export; a causal [S, S] mix here)."""
    mix = np.tril(_rng.standard_normal((S, S))) * 0.1
    nodes = [helper.make_node("MatMul", ["mix", "tok"], ["mixed"]), helper.make_node("Add", ["tok", "mixed"], ["x"])]
    return nodes, [const("mix", mix, np.float32)]


CONSTRUCTS: dict[str, Callable[[], tuple[list[Any], list[Any]]]] = {
    "folded_position_matrix": folded_position_matrix,
    "token_type_buffer_expand_where": token_type_buffer, "slice_of_a_longer_buffer": sliced_long_buffer,
    "range_limit": range_positions, "constant_of_shape": constant_of_shape, "tile_repeats": tile_to_sequence,
    "reshape_from_gathered_shape_vector": gathered_shape_vector, "flattened_index_stride": flattened_index_stride}


def encoder(construct: Callable[[], tuple[list[Any], list[Any]]]) -> Any:
    nodes, inits = construct()
    inits += [const("emb", _rng.standard_normal((V, H)), np.float32),
              const("wq", _rng.standard_normal((H, H)) * 0.3, np.float32), const("one", 1.0, np.float32),
              const("big", -1e4, np.float32), const("ax1", [1]), const("ax0", [0]), const("zero", 0),
              const("zero_1d", [0]), const("one_i", 1), const("s_1d", [S]), const("s_scalar", S)]
    names = {t.name for t in inits}
    inits = [t for i, t in enumerate(inits) if t.name not in {u.name for u in inits[:i]}]
    assert len(names) == len(inits)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["emb", "input_ids"], ["tok"]), *nodes, *masked_self_attention(),
         helper.make_node("Identity", ["ctx"], ["hidden"])], "shape_constants",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", S]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", S])],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", S, H])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def feeds(lengths: list[int], length: int = S) -> dict[str, np.ndarray]:
    ids = np.random.default_rng(sum(lengths)).integers(1, V, (len(lengths), length))
    mask = (np.arange(length)[None, :] < np.array(lengths)[:, None]).astype(np.int64)
    return {"input_ids": np.where(mask == 1, ids, 0).astype(np.int64), "attention_mask": mask}


def run(path: Path, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, inputs)


def rewritten(model: Any, tmp_path: Path, pad: bool) -> Path:
    plan = find_plan(model, BUCKET)
    assert not isinstance(plan, str)
    plan.seq_axes = {"hidden": [1]}
    rewrite(model, plan, pad_outputs=pad)
    out = tmp_path / ("unpadded.onnx" if pad else "body.onnx")
    save_onnx(model, out)
    return out


@pytest.mark.parametrize("name", sorted(CONSTRUCTS))
def test_every_shape_computed_from_a_constant_s_follows_the_runtime_length(name: str, tmp_path: Path) -> None:
    original = tmp_path / "original.onnx"
    save_onnx(encoder(CONSTRUCTS[name]), original)
    body = rewritten(load_onnx(original), tmp_path, pad=False)
    for lengths, computed in (([3, 5], 8), ([9, 1, 4], 16), ([S], S)):
        assert run(body, feeds(lengths))[0].shape == (len(lengths), computed, H), name  # the body runs at L
    out = rewritten(load_onnx(original), tmp_path, pad=True)
    for lengths in ([5, 12, 1], [S, 3], [2]):
        inputs = feeds(lengths)
        ref, got = run(original, inputs), run(out, inputs)
        acc = compare_outputs(ref, got, ["hidden"], valid=sequence_mask(inputs))
        assert acc["max_abs_err"] < 1e-5, (name, lengths, acc)


def test_a_shape_the_rewrite_cannot_follow_is_refused_naming_the_node_and_the_constant(tmp_path: Path) -> None:
    """A length computed through an op outside the rule (Floor of a float S): the skip reason names the
    node that fails at a shorter length, its op, and the constant holding S behind it."""
    from optcli.onnx_model import int_bounds_onnx, io_specs
    from optcli.unpad.apply import rewrite_and_prove
    from optcli.unpad.verify import GraphRuns

    def floor_of_float_length() -> tuple[list[Any], list[Any]]:
        nodes = [*batch_dim(),
                 helper.make_node("Cast", ["s_1d"], ["s_f"], to=TensorProto.FLOAT),
                 helper.make_node("Floor", ["s_f"], ["s_floor"]),
                 helper.make_node("Cast", ["s_floor"], ["s_back"], to=TensorProto.INT64),
                 helper.make_node("Concat", ["batch1", "s_back", "h_1d"], ["target"], axis=0),
                 helper.make_node("Expand", ["half", "target"], ["halves"]),
                 helper.make_node("Add", ["tok", "halves"], ["x"], name="add_halves")]
        return nodes, [const("h_1d", [H]), const("half", [0.5], np.float32)]

    path = tmp_path / "floor.onnx"
    save_onnx(encoder(floor_of_float_length), path)
    with GraphRuns() as runs:
        reason = rewrite_and_prove(path, tmp_path / "out.onnx", inputs=io_specs(load_onnx(path))[0],
                                   int_high=int_bounds_onnx(path), bucket=BUCKET, runs=runs, details={})
    assert reason is not None and reason.startswith("node 'add_halves' (Add) does not run at a shorter length"), reason
    assert "s_1d [1]" in reason and f"S={S}" in reason, reason
