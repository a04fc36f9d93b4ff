"""Run ONNX models on sample sets and compare against the FP32 reference (the accuracy gate's data)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from optcli.accuracy import compare_outputs
from optcli.calibration.dataset import SampleSet

EVAL_BATCH = 32


def run_model(path: Path, samples: SampleSet, extra_outputs: list[str] | None = None,
              runner_options: dict[str, Any] | None = None) -> tuple[list[np.ndarray], list[str]]:
    """Outputs (concatenated over batches) and their names; `extra_outputs` exposes inner tensors."""
    from optcli.runtime.onnxruntime_runner import OnnxRuntimeRunner

    target = path
    if extra_outputs:
        target = expose_tensors(path, extra_outputs)
    runner = OnnxRuntimeRunner(target, **(runner_options or {}))
    try:
        chunks = [runner.run_normalized(runner.normalize(b)) for b in samples.batches(EVAL_BATCH)]
        names = [o.name for o in runner.outputs]
    finally:
        runner.close()
        if target != path:
            target.unlink(missing_ok=True)
    return [np.concatenate([c[i] for c in chunks]) for i in range(len(names))], names


def expose_tensors(path: Path, tensors: list[str]) -> Path:
    """A copy of the model with `tensors` added as float graph outputs (beside the model)."""
    import onnx

    model = onnx.load(str(path))
    have = {o.name for o in model.graph.output}
    for t in tensors:
        if t not in have:
            model.graph.output.append(onnx.helper.make_tensor_value_info(t, onnx.TensorProto.FLOAT, None))
    out = path.with_name(path.stem + ".probe.onnx")
    onnx.save_model(model, str(out))
    return out


def evaluate(candidate: Path, reference_outputs: list[np.ndarray], samples: SampleSet,
             runner_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Accuracy of `candidate` on `samples` against the reference outputs (labels give top-1 accuracy)."""
    outs, names = run_model(candidate, samples, runner_options=runner_options)
    summary = compare_outputs(reference_outputs, outs, names, labels=samples.labels)
    summary["samples"] = len(samples)
    summary["data"] = samples.source
    return summary
