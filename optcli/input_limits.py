"""The most an artifact's inputs take, and the one-line refusal of an input beyond it.

Two kinds of bound:
- a fixed dim (`batch x 128`, `1x3x224x224`): declared in the graph, every runner knows it;
- a dynamic dim that still has a ceiling: an unpadded artifact (docs/unpad.md) takes any sequence length
  up to the S it was exported at, because its position constants stay S long. Its graph declares dim 1
  symbolic, so nothing refused a longer input before the runtime did, deep inside (onnxruntime: "Add node
  ... broadcast", a raw message naming a node of the graph); likewise a dynamic-sequence export past its
  position table (max_position_embeddings). The unpad rewrite records S, and the export the position limit,
  for each sequence input in the graph's metadata under MAX_DIMS_KEY ({input: {axis: most}}); ONNX Runtime's
  session gives the metadata back, and OpenVINO's converter keeps it in the IR's rt_info under
  "framework".

The runner checks every call's inputs against both in normalize() (optcli/runtime/base.py), so
`optcli.load(...).predict`, `predict_async`, batching and `optcli serve` refuse such an input with a
UsageError before the runtime sees it.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from optcli.errors import UsageError
from optcli.tensor_spec import TensorSpec, format_shape

MAX_DIMS_KEY = "optcli.max_dims"
_MAX_RECORDED = 1 << 40

# input name -> {axis: the most that axis takes}, for dims the graph declares dynamic
MaxDims = dict[str, dict[int, int]]


def record_max_dims(model: Any, bounds: Mapping[str, Mapping[int, int]]) -> None:
    """Write the most each input's dynamic dims take ({"input_ids": {1: S}, ...}) into an ONNX model's metadata."""
    for prop in list(model.metadata_props):
        if prop.key == MAX_DIMS_KEY:
            model.metadata_props.remove(prop)
    entry = model.metadata_props.add()
    entry.key = MAX_DIMS_KEY
    entry.value = json.dumps({name: {str(a): int(n) for a, n in axes.items()} for name, axes in bounds.items()},
                             sort_keys=True)


def max_dims(metadata: Mapping[str, str], inputs: Sequence[TensorSpec]) -> MaxDims:
    """The bounds record_max_dims wrote, on the model's inputs' dynamic dims (sane integers only; a bound
    on a fixed dim, an unknown input or axis is dropped); {} where none."""
    text = metadata.get(MAX_DIMS_KEY, "")
    try:
        data = json.loads(text) if text else {}
    except (ValueError, RecursionError):
        return {}
    if not isinstance(data, dict):
        return {}
    specs = {s.name: s for s in inputs}
    out: MaxDims = {}
    for name, axes in data.items():
        spec = specs.get(name)
        if spec is None or not isinstance(axes, dict):
            continue
        for axis_text, most in axes.items():
            axis = int(axis_text) if isinstance(axis_text, str) and axis_text.isdigit() else -1
            if 0 <= axis < len(spec.shape) and not isinstance(spec.shape[axis], int) and type(most) is int \
                    and 1 <= most <= _MAX_RECORDED:
                out.setdefault(name, {})[axis] = most
    return out


def check_bounds(spec: TensorSpec, shape: tuple[int, ...], bounds: Mapping[int, int]) -> None:
    """Refuse an input whose dim is over the model's: a fixed dim of its spec, or a bound in `bounds`."""
    for axis, given in enumerate(shape):
        declared = spec.shape[axis] if axis < len(spec.shape) else None
        most = declared if isinstance(declared, int) and declared > 0 else bounds.get(axis)
        if most is not None and int(given) > most:
            raise too_large(spec, shape, axis, most, fixed=isinstance(declared, int))


def too_large(spec: TensorSpec, shape: tuple[int, ...], axis: int, most: int, fixed: bool) -> UsageError:
    """The one-line error for dim `axis` of an input over `most`, with the way out for that kind of dim."""
    given = int(shape[axis])
    takes = f"exactly {most} (a fixed dim)" if fixed else f"at most {most} (the positions its graph holds)"
    if axis == 0:
        return UsageError(f"input {spec.name!r} has a batch of {given} (shape {format_shape(shape)}); this artifact "
                          f"takes {takes}",
                          hint=f"split it into batches of {most}, or re-export with a dynamic batch "
                               "(no --static-batch)")
    if axis == 1 and len(shape) == 2 and spec.dtype.startswith(("int", "uint")):  # token ids, a mask, positions
        return UsageError(f"input {spec.name!r} is {given} long (shape {format_shape(shape)}); this artifact takes "
                          f"{takes}",
                          hint=f"truncate it to {most} (a tokenizer's max_length={most}), or re-export the model "
                               "with a longer fixed length or a dynamic sequence axis (up to its position table)")
    return UsageError(f"input {spec.name!r} has {given} on dim {axis} (shape {format_shape(shape)}); this artifact "
                      f"takes {takes} there",
                      hint=f"resize or crop it to {most}, or re-export the model with a larger fixed size or a "
                           f"dynamic dim {axis}")
