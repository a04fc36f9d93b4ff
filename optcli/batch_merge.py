"""Stacking requests into one batch along dim 0 and splitting the outputs back: what the in-process
batcher (optcli/batching.py) and the model `optcli serve` runs inside Triton
(optcli/serve/triton_model.py) both do. Only requests whose inputs have the same non-batch shapes and
dtypes are stacked: nothing is padded."""
from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate
from typing import Any

import numpy as np

from optcli.errors import UsageError
from optcli.tensor_spec import TensorSpec


def batch_blocker(inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> str | None:
    """Why requests cannot be stacked along dim 0 (the first tensor whose dim 0 is fixed or missing), or None."""
    for kind, specs in (("input", inputs), ("output", outputs)):
        for s in specs:
            if not s.shape:
                return f"{kind} {s.name!r} is a scalar (no batch dim)"
            if isinstance(s.shape[0], int):
                return f"{kind} {s.name!r} has a fixed dim 0 of {s.shape[0]}"
    return None


def merge_key(feeds: dict[str, Any]) -> tuple[Any, ...] | None:
    """What must match for two requests to share a batch: every input's non-batch shape and dtype.
    None for a request whose inputs disagree on dim 0 (or a scalar input): it always runs alone."""
    key, size = [], None
    for name, value in feeds.items():
        shape = tuple(value.shape)
        if not shape or (size is not None and shape[0] != size):
            return None
        size = shape[0]
        key.append((name, shape[1:], value.dtype))
    return tuple(key)


def rows(feeds: dict[str, Any]) -> int:
    """The request's batch size (dim 0 of its first input)."""
    first = next(iter(feeds.values()))
    return int(first.shape[0]) if len(first.shape) else 1


def _concat(values: list[Any]) -> Any:
    if type(values[0]).__module__.startswith("torch"):
        import torch

        return torch.cat(values)
    return np.concatenate(values)


def merge(requests: list[dict[str, Any]]) -> dict[str, Any]:
    """One feed dict holding every request, stacked along dim 0 in order."""
    if len(requests) == 1:
        return requests[0]
    return {name: _concat([r[name] for r in requests]) for name in requests[0]}


def split(outputs: list[Any], sizes: list[int], names: list[str]) -> list[list[Any]]:
    """Per request, its rows of every output; an output whose dim 0 is not the batch is an error."""
    if len(sizes) == 1:
        return [outputs]
    total = sum(sizes)
    for name, out in zip(names, outputs):
        if not len(out.shape) or int(out.shape[0]) != total:
            got = out.shape[0] if len(out.shape) else "a scalar"
            raise UsageError(f"output {name!r} has dim 0 of {got} for a batch of {total}: it is not batch-major",
                             hint="load the model without batching")
    bounds = [0, *accumulate(sizes)]
    return [[out[a:b] for out in outputs] for a, b in zip(bounds[:-1], bounds[1:])]
