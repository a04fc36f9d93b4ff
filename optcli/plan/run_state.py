"""What a run learns as it goes, typed: the pipeline and the stages read and write these fields (they
replace the untyped dicts of facts and samples the context held). The plan (optcli/plan/run_plan.py) says what the
run does; this says what it has found and made so far."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

if TYPE_CHECKING:
    import numpy as np

    from optcli.artifact import Artifact

# (output arrays, output names): what a model computed on a sample set
Outputs = tuple[list["np.ndarray"], list[str]]


class Reference(TypedDict):
    """The FP32 reference on the run's fixed random inputs: the inputs, the outputs, and what computed them
    (optcli/stage_measure.py computes it once per run)."""

    feeds: dict[str, np.ndarray]
    outputs: list[np.ndarray]
    kind: str  # torch-fp32 (PyTorch eager) or onnx-fp32 (the user's ONNX as given)


class UnpadTwin(TypedDict):
    """The unpad rewrite of one exporter's graph the CPU build made (the build stage's `unpad_source`, less
    its path), or why it did not apply."""

    applied: bool
    reason: NotRequired[str]    # why not
    proof: object               # the rewrite's proof checks (optcli/unpad/verify.py), None where none ran
    path: str | None            # the rewritten graph


@dataclass
class RunState:
    """The run's state beside the plan. Written by the pipeline unless a field says otherwise."""

    # Why the target resolved as it did (`--target auto`: the GPU probe's answer).
    target_reason: str | None = None
    # A perf_counter time (--time-budget): the CPU search keeps the best so far past it.
    deadline: float | None = None
    # The FP32 reference the pipeline computed on the run's fixed random inputs.
    reference: Reference | None = None
    # The run's artifacts by the stage that made them ("source": the user's model), in the order made:
    # later stages read an earlier graph (the exporter's keeps module names a rewrite drops).
    artifacts: dict[str, Artifact] = field(default_factory=dict)
    # FP32 outputs per "model sha256:sample set digest" (optcli/quantize/evaluate.py reference_outputs):
    # the INT8 stage, the unpad proof and the CPU build judge against the same outputs, computed once.
    fp32_outputs: dict[str, Outputs] = field(default_factory=dict)
    # The user's model's outputs per sample set, for re-checking reused artifacts (optcli/cache_recheck.py).
    user_model_outputs: dict[str, list[np.ndarray]] = field(default_factory=dict)
    # The unpad rewrites of the exporter's graph the CPU build made for its candidates, per graph sha256
    # (optcli/unpad/apply.py unpadded_twin): the rewrite's facts, or why it did not apply.
    unpad_twins: dict[str, UnpadTwin] = field(default_factory=dict)
    # Test seams of the engine build (optcli/backends/tensorrt/engine_build.py): a TensorRT module and a
    # machine description that replace the real ones.
    tensorrt_module: Any = None
    tensorrt_machine: Any = None
