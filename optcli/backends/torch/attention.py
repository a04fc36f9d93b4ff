"""Eager attention for an export that SDPA attention breaks.

torch 2.13's ONNX exporter keeps `scaled_dot_product_attention` whole while it decomposes the graph,
and with a symbolic batch the strides its fake kernel gives the output differ from those the graph was
traced with: a later `reshape` (traced as a view) then fails "Cannot view a tensor with shape
[s11, 16, 2, 16] and strides (512, 16, 256, 1)" (T5's and Swin's attention in transformers 5). The
eager implementation computes the same softmax(QK^T)V with plain matmuls and exports. transformers
models only; the implementation is switched for the export and switched back after it.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

SDPA = "sdpa"
EAGER = "eager"


def sdpa_model(*modules: Any) -> Any:
    """The first of `modules` that is a transformers model running SDPA attention, else None."""
    for module in modules:
        config = getattr(module, "config", None)
        if getattr(config, "_attn_implementation", None) == SDPA and hasattr(module, "set_attn_implementation"):
            return module
    return None


@contextlib.contextmanager
def eager_attention(model: Any) -> Iterator[None]:
    """`model` with eager attention inside the block, its own implementation again after it."""
    before = model.config._attn_implementation
    model.set_attn_implementation(EAGER)
    try:
        yield
    finally:
        model.set_attn_implementation(before)
