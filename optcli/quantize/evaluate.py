"""Run ONNX models on sample sets and compare against the FP32 reference (the accuracy gate's data)."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from optcli.accuracy import compare_outputs, sequence_mask
from optcli.accuracy_summary import AccuracySummary
from optcli.calibration.dataset import SampleSet

Outputs = tuple[list[np.ndarray], list[str]]  # a model's outputs over a sample set, and their names
EVAL_BATCH = 32
LENGTH_BATCH = 8


def run_model(path: Path, samples: SampleSet, extra_outputs: list[str] | None = None,
              runner_options: Mapping[str, object] | None = None, pool: Any = None) -> Outputs:
    """Outputs (concatenated over batches) and their names; `extra_outputs` exposes inner tensors. With
    the run's `pool` (optcli/runtime/pool.py) the session is borrowed from it and given back."""
    from optcli.backends.registry import ONNX
    from optcli.runtime.pool import RunnerPool, session_options

    target = path
    if extra_outputs:
        target = expose_tensors(path, extra_outputs)
    options = session_options(ONNX, None, "all", None if runner_options is None else dict(runner_options))
    pool = pool if pool is not None and target == path else RunnerPool(max_idle=0)
    runner = pool.borrow(target, ONNX, **options)
    try:
        return runner_outputs(runner, samples), [o.name for o in runner.outputs]
    finally:
        pool.release(runner)
        if target != path:
            target.unlink(missing_ok=True)


def reference_outputs(memo: dict[str, Outputs], path: Path, model_sha: str, samples: SampleSet,
                      pool: Any = None, threads: int | None = None) -> Outputs:
    """run_model of the FP32 model, once per (model, samples) in a run: the INT8 stage and the CPU build
    judge against the same FP32 outputs on the same held-out set. `memo` is the run's state.fp32_outputs;
    the session comes from the run's `pool` at the measurements' setting (`threads`: [bench] threads)."""
    cache = memo
    key = f"{model_sha}:{samples.digest()}"
    if key not in cache:
        cache[key] = run_model(path, samples, runner_options={"threads": threads}, pool=pool)
    return cache[key]


def remember_reference(memo: dict[str, Outputs], model_sha: str, samples: SampleSet, outputs: Outputs) -> None:
    """What reference_outputs will answer for (model, samples): outputs a stage computed as run_model
    does, on the run's pool at the measurements' setting (the unpad proof's run of its rewrite)."""
    memo[f"{model_sha}:{samples.digest()}"] = outputs


def fixed_batch(runner: Any) -> int | None:
    """The batch a static-batch model takes (dim 0 of its first input), or None when dim 0 is dynamic."""
    dim = runner.inputs[0].shape[0] if runner.inputs and runner.inputs[0].shape else None
    return dim if isinstance(dim, int) and dim > 0 else None


def length_order(samples: SampleSet) -> np.ndarray | None:
    """Sample indices by valid length (the attention mask's extent), or None for samples without one."""
    from optcli.length_groups import row_extents

    mask = sequence_mask(samples.arrays)
    if mask is None or len(mask) <= LENGTH_BATCH:
        return None
    return np.argsort(row_extents(mask), kind="stable")


def runner_outputs(runner: Any, samples: SampleSet) -> list[np.ndarray]:
    """All outputs of `runner` over `samples`, in sample order, per output. A static-batch model gets
    batches of exactly its size: the last one padded by repeating its first sample, and the padding's
    outputs dropped. Padded text runs in batches of LENGTH_BATCH rows of similar length: a graph with
    the unpad rewrite computes a batch up to its longest row (BERT-base's FP32 reference on 32 held-out
    rows at batch 32 paid the full 128 positions for every row)."""
    fixed = fixed_batch(runner)
    order = None if fixed else length_order(samples)
    if order is not None:
        outs = _in_batches(runner, samples.take(order), LENGTH_BATCH, None)
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        return [o[inverse] for o in outs]
    return _in_batches(runner, samples, fixed or EVAL_BATCH, fixed)


def _in_batches(runner: Any, samples: SampleSet, size: int, fixed: int | None) -> list[np.ndarray]:
    chunks = []
    for b in samples.batches(size):
        n = len(next(iter(b.values())))
        if n < size and fixed:
            b = {k: np.concatenate([v, np.repeat(v[:1], size - n, axis=0)]) for k, v in b.items()}
        outs = runner.run_normalized(runner.normalize(b))
        chunks.append([np.asarray(o)[:n] for o in outs])
    return [_concatenate([c[i] for c in chunks]) for i in range(len(chunks[0]))]


def _concatenate(parts: list[np.ndarray]) -> np.ndarray:
    """Batches joined on axis 0. An inner tensor of an unpadded graph (the fallback exposes them) has each
    batch's computed length, not the padded one: shorter batches are zero-filled at the end of those axes.
    Two runs of one sample set batch alike, so an FP32 and an INT8 run fill the same positions."""
    if len({p.shape[1:] for p in parts}) == 1:
        return np.concatenate(parts)
    full = [max(dims) for dims in zip(*(p.shape[1:] for p in parts))]
    return np.concatenate([np.pad(p, [(0, 0)] + [(0, f - d) for f, d in zip(full, p.shape[1:])]) for p in parts])


def expose_tensors(path: Path, tensors: list[str]) -> Path:
    """A copy of the model with `tensors` added as graph outputs of their own element type (float where
    unknown; an INT8 graph with an FP16 base has FP16 tensors inside), beside the model."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)  # the copy sits beside `path`: same weights file
    have = {o.name for o in model.graph.output}
    types = _element_types(model)
    for t in tensors:
        if t not in have:
            model.graph.output.append(onnx.helper.make_tensor_value_info(t, types.get(t, onnx.TensorProto.FLOAT), None))
    out = path.with_name(path.stem + ".probe.onnx")
    onnx.save_model(model, str(out))
    return out


def evaluate(candidate: Path, reference_outputs: list[np.ndarray], samples: SampleSet,
             runner_options: Mapping[str, object] | None = None, pool: Any = None) -> AccuracySummary:
    """Accuracy of `candidate` on `samples` against the reference outputs (labels give top-1 accuracy);
    on a session from the run's `pool` where given (the stage's output: its row runs on it next)."""
    outs, names = run_model(candidate, samples, runner_options=runner_options, pool=pool)
    summary = compare_outputs(reference_outputs, outs, names, labels=samples.labels,
                              valid=sequence_mask(samples.arrays))
    summary["samples"] = len(samples)
    summary["data"] = samples.source
    return summary


def _element_types(model: Any) -> dict[str, int]:
    """Tensor name -> ONNX element type, from ONNX shape inference ({} where it fails)."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - inference is a help: the exposed outputs then say float
        return {}
    g = inferred.graph
    return {vi.name: vi.type.tensor_type.elem_type for vi in list(g.value_info) + list(g.output) + list(g.input)
            if vi.type.tensor_type.elem_type}
