"""A BERT encoder as an ONNX graph written with onnx.helper: dynamic batch AND sequence, an attention
mask, no torch or transformers needed (the GPU machine may lack transformers, and an export can pin
a dim). Word and position embeddings, LayerNorm, multi-head self-attention with the additive mask,
a GELU feed-forward block, residuals: the ops a transformers BERT export gives TensorRT.

tests/contract/test_tensorrt_runtime_review.py builds it with TensorRT-RTX's real builder for the
profiles the GPU tests use, so a GPU run never starts from a graph TensorRT refuses.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

VOCAB, HIDDEN, HEADS, FFN, LAYERS, MAX_POS = 1000, 64, 4, 128, 2, 128
INPUTS = ("input_ids", "attention_mask")


class _Graph:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.count = 0

    def weight(self, name: str, shape: tuple[int, ...], scale: float = 0.08, value: float | None = None) -> str:
        data = np.full(shape, value, np.float32) if value is not None else \
            (self.rng.standard_normal(shape) * scale).astype(np.float32)
        self.inits.append(numpy_helper.from_array(data, name))
        return name

    def const(self, name: str, data: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(data, name))
        return name

    def op(self, op: str, inputs: list[str], **attrs: object) -> str:
        self.count += 1
        out = f"{op.lower()}_{self.count}"
        self.nodes.append(helper.make_node(op, inputs, [out], name=f"{op}_{self.count}", **attrs))
        return out

    def linear(self, x: str, prefix: str, n_in: int, n_out: int) -> str:
        return self.op("Add", [self.op("MatMul", [x, self.weight(f"{prefix}.w", (n_in, n_out))]),
                               self.weight(f"{prefix}.b", (n_out,), 0.02)])

    def layer_norm(self, x: str, prefix: str) -> str:
        return self.op("LayerNormalization", [x, self.weight(f"{prefix}.g", (HIDDEN,), value=1.0),
                                              self.weight(f"{prefix}.beta", (HIDDEN,), value=0.0)], axis=-1,
                       epsilon=1e-12)

    def heads(self, x: str, perm: list[int]) -> str:
        return self.op("Transpose", [self.op("Reshape", [x, "heads_shape"])], perm=perm)


def save_tiny_bert(path: Path, seed: int = 0) -> Path:
    """Write the encoder to `path`: inputs input_ids, attention_mask [batch, seq] int64; output
    last_hidden_state [batch, seq, HIDDEN] float32."""
    g = _Graph(seed)
    hd = HIDDEN // HEADS
    g.const("heads_shape", np.array([0, 0, HEADS, hd], np.int64))
    g.const("merge_shape", np.array([0, 0, HIDDEN], np.int64))
    g.const("axes_12", np.array([1, 2], np.int64))
    g.const("one", np.array(1.0, np.float32))
    g.const("neg_big", np.array(-10000.0, np.float32))
    g.const("scale", np.array(1.0 / np.sqrt(hd), np.float32))
    g.const("sqrt2", np.array(np.sqrt(2.0), np.float32))
    g.const("half", np.array(0.5, np.float32))
    g.const("zero_i", np.array(0, np.int64))
    g.const("one_i", np.array(1, np.int64))
    g.const("index_1", np.array(1, np.int64))
    words = g.op("Gather", [g.weight("word_emb", (VOCAB, HIDDEN), 0.5), "input_ids"])
    seq = g.op("Gather", [g.op("Shape", ["input_ids"]), "index_1"], axis=0)
    positions = g.op("Gather", [g.weight("pos_emb", (MAX_POS, HIDDEN), 0.5), g.op("Range", ["zero_i", seq, "one_i"])])
    x = g.layer_norm(g.op("Add", [words, positions]), "emb_ln")
    keep = g.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    mask = g.op("Unsqueeze", [g.op("Mul", [g.op("Sub", ["one", keep]), "neg_big"]), "axes_12"])  # [B,1,1,S]
    for i in range(LAYERS):
        p = f"layer{i}"
        q = g.heads(g.linear(x, f"{p}.q", HIDDEN, HIDDEN), [0, 2, 1, 3])
        k = g.heads(g.linear(x, f"{p}.k", HIDDEN, HIDDEN), [0, 2, 3, 1])
        v = g.heads(g.linear(x, f"{p}.v", HIDDEN, HIDDEN), [0, 2, 1, 3])
        scores = g.op("Add", [g.op("Mul", [g.op("MatMul", [q, k]), "scale"]), mask])
        context = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v])
        merged = g.op("Reshape", [g.op("Transpose", [context], perm=[0, 2, 1, 3]), "merge_shape"])
        x = g.layer_norm(g.op("Add", [g.linear(merged, f"{p}.o", HIDDEN, HIDDEN), x]), f"{p}.ln1")
        up = g.linear(x, f"{p}.up", HIDDEN, FFN)
        gelu = g.op("Mul", [g.op("Mul", [up, "half"]), g.op("Add", ["one", g.op("Erf", [g.op("Div", [up, "sqrt2"])])])])
        x = g.layer_norm(g.op("Add", [g.linear(gelu, f"{p}.down", FFN, HIDDEN), x]), f"{p}.ln2")
    g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="output"))
    graph = helper.make_graph(
        g.nodes, "tiny_bert",
        [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"]) for n in INPUTS],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", HIDDEN])],
        g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def tokens(batch: int, seq: int, seed: int) -> dict[str, np.ndarray]:
    """Random ids and a right-padded mask (each row keeps 1..seq tokens; the first row keeps all)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, VOCAB, (batch, seq), dtype=np.int64)
    lengths = rng.integers(1, seq + 1, batch)
    lengths[0] = seq
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int64)
    return {"input_ids": ids * mask, "attention_mask": mask}
