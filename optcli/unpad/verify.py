"""Prove the unpad rewrite on data: which outputs carry the sequence axis, and that every output of
the rewritten graph equals the original's on the positions that hold tokens.

Nothing about the rewrite is assumed: right padding, a mask that gates attention and positions that
do not depend on the padded length all show up here as equal outputs, or the stage refuses.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from optcli.accuracy import compare_outputs
from optcli.backends.registry import ONNX
from optcli.runtime.pool import session_options
from optcli.tensor_spec import TensorSpec, random_inputs

# The rewrite changes which positions are computed, not how: the outputs must match as FP32 does.
EQUAL_COSINE = 0.99999
EQUAL_MAX_ABS_REL = 1e-4   # of the output's largest magnitude
# The proof runs both graphs at the padded length: its cost is the compile's (31 s of a BERT-base
# compile with 24 + 64 samples, issue 16). What it must show is that every valid length gives equal
# outputs, so the samples span the lengths rather than pile up: 12 random ones (1, the full length,
# and 10 between) and the held-out rows at evenly spaced ranks of their valid length.
SYNTHETIC_SAMPLES = 12
PROOF_BATCH = 4            # several lengths per batch: L is the batch's longest, rows are shorter
MAX_DATA_SAMPLES = 16


def spanning_rows(mask: np.ndarray, n: int = MAX_DATA_SAMPLES) -> np.ndarray:
    """Indices of up to `n` rows whose valid lengths span the data's: the shortest, the longest and
    evenly spaced ranks between, shortest first. In that order a proof batch holds rows of different but
    near lengths: the rewrite computes each batch to its longest row, so this costs less than the data's
    order (whose batches mostly reach near the padded length) and proves the same."""
    valid = (np.asarray(mask) != 0).sum(1)
    ranked = np.argsort(valid, kind="stable")
    if len(valid) <= n:
        return ranked
    return ranked[np.unique(np.linspace(0, len(valid) - 1, n).round().astype(int))]


def right_padded(mask: np.ndarray) -> bool:
    """Every row is ones then zeros (a row of all zeros counts)."""
    m = np.asarray(mask) != 0
    return bool((m[:, 1:] <= m[:, :-1]).all())


def synthetic_samples(specs: list[TensorSpec], mask: str, sequence_inputs: list[str], length: int,
                      int_high: dict[str, int], n: int = SYNTHETIC_SAMPLES, seed: int = 11,
                      lengths: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Right-padded random samples of `lengths` (default: 0..length, both ends included: a row of padding
    only, 1, the full length, and random lengths between), padded with id 0."""
    dims = {str(s.shape[1]): length for s in specs if s.name in sequence_inputs and not isinstance(s.shape[1], int)}
    feeds = random_inputs(specs, n, seed=seed, int_high=int_high, dims=dims)
    rng = np.random.default_rng(seed)
    if lengths is None:  # shortest first, as spanning_rows orders the data's
        lengths = np.sort(np.concatenate([[0, 1, length], rng.integers(1, length + 1, size=max(n - 3, 0))])[:n])
    valid = np.arange(length)[None, :] < lengths[:, None]
    for name in sequence_inputs:
        arr = feeds[name]
        keep = valid.reshape(valid.shape + (1,) * (arr.ndim - 2))
        feeds[name] = valid.astype(arr.dtype) if name == mask else np.where(keep, arr, 0).astype(arr.dtype)
    return feeds


class GraphRuns:
    """One onnxruntime session per graph for the whole analysis: the original graph runs for the probe,
    the synthetic proof and the held-out data (a BERT-base session costs seconds to create). With the
    run's `pool` (optcli/runtime/pool.py) the sessions are borrowed at the measurements' setting
    (optimization all, the bench threads): the user's model is already open for the reference, and the
    proven rewrite stays open for its stage row (its outputs on the held-out rows, run_samples, are
    the run's FP32 reference there)."""

    def __init__(self, pool: Any = None, threads: int | None = None) -> None:
        from optcli.runtime.pool import RunnerPool

        self._pool = pool if pool is not None else RunnerPool(max_idle=0)
        self._threads = threads
        self._runners: dict[Path, Any] = {}

    def run(self, path: Path, feeds: dict[str, np.ndarray], batch: int) -> tuple[list[np.ndarray], list[str]]:
        """Outputs on every row of `feeds`, `batch` rows a call; a graph exported at a fixed batch (a plain
        `torch.onnx.export` at batch 1) gets exactly its batch, the last call filled up by repeating a row."""
        from optcli.quantize.evaluate import fixed_batch

        runner = self._runner(path)
        batch = fixed_batch(runner) or batch
        n = len(next(iter(feeds.values())))
        chunks = []
        for i in range(0, n, batch):
            part = {k: v[i:i + batch] for k, v in feeds.items()}
            rows = len(next(iter(part.values())))
            if fixed_batch(runner) and rows < batch:
                part = {k: np.concatenate([v, np.repeat(v[:1], batch - rows, 0)]) for k, v in part.items()}
            chunks.append([np.asarray(o)[:rows] for o in runner.run_normalized(runner.normalize(part))])
        return [np.concatenate([c[j] for c in chunks]) for j in range(len(chunks[0]))], \
            [o.name for o in runner.outputs]

    def run_samples(self, path: Path, samples: Any) -> tuple[list[np.ndarray], list[str]]:
        """Outputs on every row of a SampleSet as run_model gives them (rows of similar length batched)."""
        from optcli.quantize.evaluate import runner_outputs

        runner = self._runner(path)
        return runner_outputs(runner, samples), [o.name for o in runner.outputs]

    def _runner(self, path: Path) -> Any:
        runner = self._runners.get(path)
        if runner is None:
            runner = self._runners[path] = self._pool.borrow(path, ONNX, **session_options(ONNX, self._threads))
        return runner

    def forget(self, path: Path) -> None:
        """Close the session of a graph that is about to be deleted."""
        runner = self._runners.pop(path, None)
        if runner is not None:
            self._pool.discard(runner)

    def close(self) -> None:
        """Give the sessions back to the pool (closed where it keeps none)."""
        for path in list(self._runners):
            self._pool.release(self._runners.pop(path))

    def __enter__(self) -> GraphRuns:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def sequence_axes(original: Path, body: Path, feeds: dict[str, np.ndarray], length: int,
                  valid_length: int, runs: GraphRuns | None = None) -> dict[str, list[int]] | str:
    """Run both graphs on one batch whose valid length is `valid_length` < `length`: the axes where the
    original has `length` and the body `valid_length` carry the sequence. Any other difference in
    shape means the body does not follow L: the reason, as a string."""
    if runs is None:
        with GraphRuns() as own:
            return sequence_axes(original, body, feeds, length, valid_length, own)
    try:
        ref, names = runs.run(original, feeds, len(next(iter(feeds.values()))))
        got, _ = runs.run(body, feeds, len(next(iter(feeds.values()))))
    except Exception as exc:  # onnxruntime raises its own types for shape errors
        return f"the graph does not run at a shorter length ({str(exc).strip().splitlines()[0][:200]})"
    axes: dict[str, list[int]] = {}
    for name, r, g in zip(names, ref, got):
        if r.ndim != g.ndim:
            return f"output {name!r} changes rank at a shorter length"
        found = [a for a, (x, y) in enumerate(zip(r.shape, g.shape)) if x != y]
        if any(r.shape[a] != length or g.shape[a] != valid_length for a in found):
            return f"output {name!r} has shape {list(g.shape)} at length {valid_length}, {list(r.shape)} at {length}"
        if found:
            axes[name] = found
    return axes


class ProofCheck(TypedDict):
    """One sample set the proof ran both graphs on, and the worst figures over their outputs."""

    data: str
    samples: int
    batch: int
    max_abs_err: float
    cosine_min: float
    mean_valid_length: float


class Proof(TypedDict):
    equal: bool
    reason: str | None
    checks: list[ProofCheck]


def prove(original: Path, rewritten: Path, samples: list[tuple[str, dict[str, np.ndarray], int]],
          mask: str, runs: GraphRuns | None = None,
          rewritten_outputs: dict[str, Callable[[], list[np.ndarray]]] | None = None) -> Proof:
    """Run both graphs on each (label, feeds, batch) and compare every output on the valid positions;
    returns {"equal": bool, "reason": str | None, "checks": [...]}. `rewritten_outputs` {label: fn}: the
    rewritten graph's outputs on that sample come from fn(), called only once the samples before it
    are proven."""
    if runs is None:
        with GraphRuns() as own:
            return prove(original, rewritten, samples, mask, own, rewritten_outputs)
    checks: list[ProofCheck] = []
    for label, feeds, batch in samples:
        try:
            ref, names = runs.run(original, feeds, batch)
            given = (rewritten_outputs or {}).get(label)
            got = given() if given is not None else runs.run(rewritten, feeds, batch)[0]
        except Exception as exc:
            return {"equal": False, "reason": f"the rewritten graph fails on {label}: {str(exc).splitlines()[0][:200]}",
                    "checks": checks}
        try:
            acc = compare_outputs(ref, got, names, valid=np.asarray(feeds[mask]) != 0)
        except ValueError as exc:  # an output's shape differs: the rewrite does not restore it
            return {"equal": False, "reason": f"the rewritten graph differs on {label}: {exc}", "checks": checks}
        worst = None
        for name, e in acc["outputs"].items():
            bound = EQUAL_MAX_ABS_REL * max(e["scale"], 1e-6)
            if not e["finite"] or e["cosine_min"] < EQUAL_COSINE or e["max_abs_err"] > bound:
                worst = (f"output {name!r} differs on valid positions of {label}: max abs error "
                         f"{e['max_abs_err']:.3g} (scale {e['scale']:.3g}), cosine {e['cosine_min']:.6f}")
                break
        checks.append({"data": label, "samples": len(next(iter(feeds.values()))), "batch": batch,
                       "max_abs_err": acc["max_abs_err"], "cosine_min": acc["cosine_min"],
                       "mean_valid_length": float((np.asarray(feeds[mask]) != 0).sum(1).mean())})
        if worst:
            return {"equal": False, "reason": worst, "checks": checks}
    return {"equal": True, "reason": None, "checks": checks}
