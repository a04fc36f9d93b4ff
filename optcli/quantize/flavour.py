"""Which INT8 graph to produce, per target and model: where the Q/DQ pairs sit decides the speed.

| flavour      | activations            | weights                    | used for                                  |
| qdq-s8s8     | int8 symmetric, zp 0   | int8 symmetric per-channel | TensorRT: the only Q/DQ it accepts        |
| qdq-u8s8     | uint8 asymmetric       | int8 symmetric per-channel | ONNX Runtime CPU, CNNs (VNNI u8 x s8)     |
| dynamic      | uint8, ranges at run   | int8 per-channel           | ONNX Runtime CPU, transformer encoders    |
"""
from __future__ import annotations

from dataclasses import dataclass

from optcli.backends.registry import graph_needs
from optcli.errors import UsageError

FLAVOURS = ("qdq-s8s8", "qdq-u8s8", "dynamic")
# Ops whose inputs get Q/DQ pairs. Quantizing only the heavy ops was both faster and more accurate
# than ORT's default "everything" on this CPU (see docs/benchmarks/cpu.md).
QDQ_OPS = ("Conv", "MatMul", "Gemm")
# On ONNX Runtime's CPU, also quantizing the cheap ops between convs keeps whole chains in INT8
# (no dequantize/requantize between them): digits_cnn went from 1.53x to 1.83x over FP32 at batch 1
# and 1.71x to 2.20x at batch 8, cosine 0.99964 -> 0.99981. The same list made s8s8 slower (1.38x).
CPU_QDQ_OPS = ("Conv", "MatMul", "Gemm", "MaxPool", "GlobalAveragePool", "Relu", "Add", "Flatten", "Reshape")
DYNAMIC_OPS = ("MatMul", "Gemm", "Attention")


@dataclass(frozen=True)
class Flavour:
    name: str
    static: bool
    activation_symmetric: bool
    activation_signed: bool
    op_types: tuple[str, ...]
    # onnxruntime's quantize_static writes Conv/Gemm biases as INT32 DequantizeLinear inputs, which
    # TensorRT's parser refuses (DequantizeLinear takes INT8/FP8/INT4: onnx-tensorrt operators.md;
    # NVIDIA/TensorRT#4542); TensorRT fuses a float bias into the INT8 kernel itself. On ONNX Runtime's
    # CPU it made no difference on a 5-conv CNN (docs/quantize.md), so the CPU flavours keep ORT's default.
    quantize_bias: bool = True

    def to_json(self) -> dict:
        return {"name": self.name, "static": self.static, "activations": ("int8" if self.activation_signed else "uint8")
                + (" symmetric" if self.activation_symmetric else " asymmetric"),
                "weights": "int8 symmetric per-channel", "op_types": list(self.op_types),
                "bias": "int32 Q/DQ" if self.quantize_bias else "float"}


TABLE = {
    "qdq-s8s8": Flavour("qdq-s8s8", True, True, True, QDQ_OPS, quantize_bias=False),
    "qdq-u8s8": Flavour("qdq-u8s8", True, False, False, CPU_QDQ_OPS),
    "dynamic": Flavour("dynamic", False, False, False, DYNAMIC_OPS),
}


def resolve_flavour(requested: str, target: str, is_encoder: bool) -> Flavour:
    """`auto`: a target whose builder takes only some flavours (its descriptor's int8_flavours: TensorRT's
    s8/s8 Q/DQ) gets the first of them, `qdq` its first static one; on a CPU, encoders get dynamic INT8 and
    the rest u8/s8 Q/DQ."""
    needs = graph_needs(target)
    taken = needs.int8_flavours
    static = [name for name in taken if TABLE[name].static]
    if requested == "auto" and taken:
        return TABLE[taken[0]]
    if requested == "qdq" and static:
        return TABLE[static[0]]
    if requested == "auto":
        return TABLE["dynamic" if is_encoder else "qdq-u8s8"]
    if requested == "qdq" and not taken:
        return TABLE["qdq-u8s8"]
    if requested not in TABLE and requested != "qdq":
        raise UsageError(f"unknown INT8 flavour {requested!r}", hint=f"use auto, qdq, or one of {', '.join(FLAVOURS)}")
    if taken and requested not in taken:
        raise UsageError(f"INT8 flavour {requested} does not build into {needs.label}",
                         hint=f"{needs.label} takes {', '.join(taken)} only: use --int8-flavour {taken[0]} (or auto)")
    return TABLE[requested]


def u8s8_saturates() -> bool:
    """Whether this CPU's u8 x s8 integer kernels saturate: x86 without VNNI multiplies with VPMADDUBSW,
    which sums two u8*s8 products into an int16 that overflows. ONNX Runtime's docs prescribe reduce_range
    (7-bit weights) there, NNCF its overflow fix. Measured on an AVX2-only AMD EPYC: the digits CNN's
    qdq-u8s8 graph gave mean cosine 0.69 with ORT's integer kernels (0.9999 with optimizations off, i.e.
    the same Q/DQ in float), and 0.9996 with 7-bit weights. The CPU's capability set: optcli/cpu/isa.py."""
    from optcli.cpu.isa import detect

    return detect().u8s8_saturates


def reduce_range(flavour: Flavour) -> bool:
    """7-bit weights for the ONNX Runtime CPU flavour (u8 activations) where its kernels would saturate."""
    return flavour.static and not flavour.activation_signed and u8s8_saturates()
