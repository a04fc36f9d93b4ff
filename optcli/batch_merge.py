"""Stacking requests into one batch along dim 0 and splitting the outputs back: what the in-process
batcher (optcli/batching.py) and the model `optcli serve` runs inside Triton
(optcli/serve/triton_model.py) both do.

Requests share a batch when every input has the same non-batch shape and dtype, except along the
sequence axis of an encoder (optcli/sequence_axis.py: dim 1 of input_ids, attention_mask,
token_type_ids, position_ids, dynamic in the graph, with an attention mask among them). There a
PaddingPlan lets requests of different lengths share a batch: each is right-padded to the batch's
longest member (ids, token types and positions with 0, the mask with 0), so the model computes the
batch only up to that extent, and every output whose dim 1 is that padded length is cut back to the
request's own length (pooled outputs, without a sequence axis, come back as they are). Masked
positions do not change what an encoder computes at the valid ones, so each caller gets what it
would get alone (to float rounding).

How a gathered batch is cut into calls (PaddingPlan.grouping):
- "auto": requests sorted by length are split into the contiguous groups that minimise the padded work
  plus a call's own cost, counted as CALL_ROWS more rows at the group's length (a batch-1 call of an
  INT8 encoder on a CPU costs 1.5-2x its tokens' share of a well-filled batch: benchmarks/
  padding_serving.py). A 12-token request then never pays for a 120-token one, and requests of close
  lengths still share a call.
- "longest": one call, every request padded to the longest.
- "bucket": length_buckets' grouping (lengths rounded up to `bucket`, at most `max_groups` groups).
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING, TypeAlias, cast

import numpy as np

from optcli.errors import UsageError
from optcli.tensor_spec import TensorSpec

if TYPE_CHECKING:
    import torch

# What a runner's normalize() gives and its run_normalized() returns: numpy arrays, or torch tensors where
# the PyTorch runner keeps them on the device.
Tensor: TypeAlias = "np.ndarray | torch.Tensor"
Tensors: TypeAlias = "dict[str, Tensor]"   # by input (or output) name
RunBatch: TypeAlias = "Callable[[Tensors], Sequence[Tensor]]"


@dataclass(frozen=True)
class PaddingPlan:
    """Which inputs may be right-padded along dim 1, and which outputs may carry that axis back.

    `outputs`: names whose dim 1 is dynamic (or unknown): cut back where it equals the padded length.
    `grouping`: how a gathered batch is cut into calls: "auto", "longest" or "bucket" (module docstring)."""

    inputs: frozenset[str]
    outputs: frozenset[str]
    grouping: str = "auto"
    bucket: int = 16
    max_groups: int = 4


def padding_plan(inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec],
                 grouping: str = "auto", bucket: int = 16, max_groups: int = 4) -> PaddingPlan | None:
    """The plan for an encoder whose text inputs (one group, with a mask) have a dynamic dim 1; None
    where padding could change the answers (no mask, a fixed length, several sequence groups)."""
    from optcli.sequence_axis import GROUPS

    seq = {s.name: GROUPS[s.name] for s in inputs
           if s.name in GROUPS and len(s.shape) == 2 and not isinstance(s.shape[1], int)}
    if not seq or len(set(seq.values())) != 1 or not any("mask" in name for name in seq):
        return None
    outs = frozenset(s.name for s in outputs if not s.shape or (len(s.shape) >= 2 and not isinstance(s.shape[1], int)))
    return PaddingPlan(frozenset(seq), outs, grouping, bucket, max_groups)


def batch_blocker(inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> str | None:
    """Why requests cannot be stacked along dim 0 (the first tensor whose dim 0 is fixed or missing), or None."""
    for kind, specs in (("input", inputs), ("output", outputs)):
        for s in specs:
            if not s.shape:
                return f"{kind} {s.name!r} is a scalar (no batch dim)"
            if isinstance(s.shape[0], int):
                return f"{kind} {s.name!r} has a fixed dim 0 of {s.shape[0]}"
    return None


def length(feeds: Tensors, plan: PaddingPlan | None) -> int | None:
    """The request's sequence length (dim 1 of its sequence inputs), None where nothing is padded."""
    if plan is None:
        return None
    dims = {int(v.shape[1]) for n, v in feeds.items() if n in plan.inputs and len(v.shape) == 2}
    return dims.pop() if len(dims) == 1 else None


def merge_key(feeds: Tensors, plan: PaddingPlan | None = None) -> tuple[Hashable, ...] | None:
    """What must match for two requests to share a batch: every input's non-batch shape and dtype, but
    not the length of the sequence inputs under a plan. None for a request whose inputs disagree on
    dim 0 (or a scalar input): it always runs alone."""
    key: list[tuple[str, tuple[int | str, ...], Hashable]] = []
    size = None
    seq = length(feeds, plan)
    for name, value in feeds.items():
        shape: tuple[int | str, ...] = tuple(value.shape)
        if not shape or (size is not None and shape[0] != size):
            return None
        size = shape[0]
        if seq is not None and plan is not None and name in plan.inputs:
            shape = (shape[0], "any")
        key.append((name, shape[1:], value.dtype))
    return tuple(key)


def rows(feeds: Tensors) -> int:
    """The request's batch size (dim 0 of its first input)."""
    first = next(iter(feeds.values()))
    return int(first.shape[0]) if len(first.shape) else 1


def _concat(values: list[Tensor]) -> Tensor:
    if type(values[0]).__module__.startswith("torch"):
        import torch

        return torch.cat(cast("list[torch.Tensor]", values))
    return np.concatenate(cast("list[np.ndarray]", values))


def _pad(value: Tensor, width: int) -> Tensor:
    """`value` (batch x length) right-padded with 0 to `width`."""
    missing = width - int(value.shape[1])
    if not missing:
        return value
    if type(value).__module__.startswith("torch"):
        import torch

        return torch.nn.functional.pad(cast("torch.Tensor", value), (0, missing))
    return np.pad(value, ((0, 0), (0, missing)))


def merge(requests: list[Tensors], plan: PaddingPlan | None = None) -> Tensors:
    """One feed dict holding every request, stacked along dim 0 in order; under a plan the sequence
    inputs are right-padded to the longest request first."""
    if len(requests) == 1:
        return requests[0]
    lengths = [length(r, plan) for r in requests]
    if plan is None or None in lengths or len(set(lengths)) == 1:
        return {name: _concat([r[name] for r in requests]) for name in requests[0]}
    width = max(n for n in lengths if n is not None)
    return {name: _concat([_pad(r[name], width) if name in plan.inputs else r[name] for r in requests])
            for name in requests[0]}


def split(outputs: Sequence[Tensor], sizes: list[int], names: list[str], lengths: list[int | None] | None = None,
          plan: PaddingPlan | None = None) -> list[list[Tensor]]:
    """Per request, its rows of every output; an output whose dim 0 is not the batch is an error.
    With `lengths` (each request's, from length()) and a plan, outputs the plan names whose dim 1 is the
    batch's padded length are cut back to each request's own length."""
    if len(sizes) == 1:
        return [list(outputs)]
    total = sum(sizes)
    for name, out in zip(names, outputs):
        if not len(out.shape) or int(out.shape[0]) != total:
            got = out.shape[0] if len(out.shape) else "a scalar"
            raise UsageError(f"output {name!r} has dim 0 of {got} for a batch of {total}: it is not batch-major",
                             hint="load the model without batching")
    bounds = [0, *accumulate(sizes)]
    parts = [[out[a:b] for out in outputs] for a, b in zip(bounds[:-1], bounds[1:])]
    if plan is None or not lengths or None in lengths or len(set(lengths)) == 1:
        return parts
    width = max(n for n in lengths if n is not None)
    cut = [name in plan.outputs and len(out.shape) >= 2 and int(out.shape[1]) == width
           for name, out in zip(names, outputs)]
    return [[o[:, :n] if c else o for o, c in zip(part, cut)] for part, n in zip(parts, lengths)]


def call_groups(requests: list[Tensors], plan: PaddingPlan | None = None) -> list[list[int]]:
    """The calls a gathered batch runs as, by the plan's grouping: request indices per call."""
    lengths = [length(r, plan) for r in requests]
    if plan is None or plan.grouping == "longest" or len(requests) < 2 or None in lengths or len(set(lengths)) == 1:
        return [list(range(len(requests)))]
    known = [int(n) for n in lengths if n is not None]
    if plan.grouping == "bucket":
        from optcli.length_groups import BucketOptions, group_lengths

        options = BucketOptions(plan.bucket, plan.max_groups)
        return [[int(i) for i in g] for g in group_lengths(np.array(known), options)]
    return cheapest_groups(known, [rows(r) for r in requests])


def run_group(run: RunBatch, requests: list[Tensors], names: list[str],
              plan: PaddingPlan | None = None) -> list[list[Tensor]]:
    """Run requests that share a merge_key as one call; per request, its outputs (its rows, cut back to
    its own length)."""
    lengths = [length(r, plan) for r in requests]
    return split(run(merge(requests, plan)), [rows(r) for r in requests], names, lengths, plan)


def run_padded(run: RunBatch, requests: list[Tensors], names: list[str],
               plan: PaddingPlan | None = None) -> list[list[Tensor]]:
    """Run requests that share a merge_key as one batch, or as the few sub-batches of similar length
    the plan's grouping picks, one after another; per request, its outputs."""
    out: list[list[Tensor]] = [[] for _ in requests]
    for group in call_groups(requests, plan):
        for i, part in zip(group, run_group(run, [requests[i] for i in group], names, plan)):
            out[i] = part
    return out


def spread(groups: list[list[int]], requests: list[Tensors], plan: PaddingPlan | None, workers: int) -> list[list[int]]:
    """The calls cut further so `workers` sessions can share them: while there are fewer calls than
    workers, the costliest call (longest length x rows) with more than one request is cut in two, sorted
    by length, where the costlier half costs least. Each part computes only its own rows, so nothing is
    computed twice; the extra call's own overhead is less than a session left idle."""
    groups = [list(g) for g in groups]
    lengths = [length(r, plan) or 1 for r in requests]

    def cost(group: list[int]) -> int:
        return max(lengths[i] for i in group) * sum(rows(requests[i]) for i in group)

    while len(groups) < workers:
        splittable = [g for g in groups if len(g) > 1]
        if not splittable:
            break
        big = max(splittable, key=cost)
        order = sorted(big, key=lambda i: lengths[i])
        cut = min(range(1, len(order)), key=lambda c: max(cost(order[:c]), cost(order[c:])))
        at = groups.index(big)
        groups[at:at + 1] = [order[:cut], order[cut:]]
    return groups


CALL_ROWS = 1.0  # a call's own cost, in rows of its length (module docstring)


def cheapest_groups(lengths: list[int], sizes: list[int], call_rows: float = CALL_ROWS) -> list[list[int]]:
    """Indices per call, shortest first: requests sorted by length, cut into the contiguous runs that
    minimise the sum over calls of longest length x (rows + call_rows) (a 1-D partition, O(n^2))."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    best = [0.0] + [float("inf")] * len(order)
    cut = [0] * (len(order) + 1)
    for j in range(1, len(order) + 1):
        rows_in = 0
        for i in range(j, 0, -1):  # the call holds order[i-1 .. j-1]; its longest is order[j-1]
            rows_in += sizes[order[i - 1]]
            cost = best[i - 1] + lengths[order[j - 1]] * (rows_in + call_rows)
            if cost < best[j]:
                best[j], cut[j] = cost, i - 1
    groups: list[list[int]] = []
    j = len(order)
    while j:
        groups.append(order[cut[j]:j])
        j = cut[j]
    return groups[::-1]
