"""Fold NNCF's weight statistics in numpy before OpenVINO compiles its statistics model.

NNCF (3.x, OpenVINO backend) collects a weight's min / abs-max the way it collects an activation's: it
adds ReduceMin / Abs -> ReduceMax nodes on the weight Constant to a copy of the model and compiles that
copy. OpenVINO then constant-folds those reductions with its reference kernels while compiling: 3.5 s of
a 3.9 s compile on BERT-base (`OV_ENABLE_PROFILE_PASS`: ov::pass::ConstantFolding 3502 ms), a third of
`nncf.quantize`'s time there. numpy computes the same reductions in 0.1 s. The values are exact (min,
max and abs round nothing), so the quantized IR is byte-identical (tests/unit/test_nncf_weight_statistics.py).

The hook wraps the engine NNCF builds for a statistics pass (`nncf.openvino.engine.OVNativeEngine`) for
the duration of one quantize call. Where NNCF has no such class, nothing is wrapped and NNCF runs as is.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

_REDUCTIONS = {"ReduceMax": "max", "ReduceMin": "min"}
_LOCK = threading.Lock()  # the wrapper is installed on a class: one quantize call at a time


def _constant(output: Any) -> Any | None:
    """The numpy value of `output` where it comes from a Constant, or |Constant| through an Abs."""
    import numpy as np

    node = output.get_node()
    kind = node.get_type_name()
    if kind == "Constant":
        return node.get_data()
    if kind == "Abs":
        source = node.input_value(0).get_node()
        if source.get_type_name() == "Constant":
            return np.abs(source.get_data())
    return None


def fold_constant_reductions(model: Any) -> int:
    """Replace every ReduceMin / ReduceMax of a Constant (or of Abs of a Constant) in `model` with a
    Constant of its value, keeping the output's tensor names (NNCF reads its statistics by them).
    Returns how many reductions were folded."""
    import numpy as np
    from openvino import opset13

    folded = 0
    for node in model.get_ordered_ops():
        reduce = _REDUCTIONS.get(node.get_type_name())
        if reduce is None or node.get_input_size() != 2:
            continue
        axes_node = node.input_value(1).get_node()
        if axes_node.get_type_name() != "Constant":
            continue
        data = _constant(node.input_value(0))
        if data is None:
            continue
        axes = tuple(int(a) for a in np.atleast_1d(axes_node.get_data()))
        keep_dims = bool(node.get_attributes().get("keep_dims", False))
        value = getattr(np, reduce)(data, axis=axes, keepdims=keep_dims).astype(data.dtype, copy=False)
        constant = opset13.constant(np.ascontiguousarray(value))
        constant.set_friendly_name(node.get_friendly_name())
        out = node.output(0)
        names = out.get_names()
        for consumer in list(out.get_target_inputs()):
            consumer.replace_source_output(constant.output(0))
        out.get_tensor().set_names(set())
        constant.output(0).get_tensor().set_names(names)
        folded += 1
    return folded


@contextlib.contextmanager
def folded_weight_statistics() -> Iterator[dict[str, int]]:
    """While active, every statistics model NNCF compiles has its constant reductions folded first.
    Yields a dict whose "folded" counts them (0 where NNCF has no engine to wrap)."""
    counts = {"folded": 0}
    try:
        from nncf.openvino.engine import OVNativeEngine
    except ImportError:
        yield counts
        return
    with _LOCK:
        original = OVNativeEngine.__init__

        def init(self: Any, model: Any, *args: Any, **kwargs: Any) -> None:
            counts["folded"] += fold_constant_reductions(model)
            original(self, model, *args, **kwargs)

        OVNativeEngine.__init__ = init
        try:
            yield counts
        finally:
            OVNativeEngine.__init__ = original
