"""The stage contract: a name, a typed config, and run(input artifact, workdir) -> StageResult.

A stage does its work and nothing else: no printing, no timing, no benchmarking; the pipeline owns
those. Register a stage with @register; the pipeline discovers every module in optcli.stages, so
adding a stage is adding one module.
"""
from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from optcli.artifact import Artifact
from optcli.plan.run_plan import RunPlan, unrouted_plan
from optcli.plan.run_state import RunState
from optcli.report.details import StageDetails

if TYPE_CHECKING:
    from optcli.accuracy_summary import AccuracySummary
    from optcli.backends.torch.loader import ModelSource, TorchModel
    from optcli.config import CompileConfig
    from optcli.runtime.pool import RunnerPool
    from optcli.tensor_spec import TensorSpec

_REGISTRY: dict[str, type[Stage]] = {}


def _runner_pool() -> RunnerPool:
    from optcli.runtime.pool import RunnerPool

    return RunnerPool()


@dataclass
class StageContext:
    """What every stage may read: the run's config, the user's model, its inputs, the target."""

    config: CompileConfig
    source: ModelSource
    inputs: list[TensorSpec]
    target: str                     # resolved: cpu | tensorrt | tensorrt-rtx
    out_dir: Path
    torch_model: TorchModel | None = None
    # Upper bounds for random int inputs (token ids): the embedding table's size, or what the PyTorch
    # example held; inputs not named here get [0, 100).
    int_high: dict[str, int] = field(default_factory=dict)
    # What the run has learnt and made so far (optcli/plan/run_state.py): typed fields, no dicts of facts.
    state: RunState = field(default_factory=RunState)
    # Runners shared across the run's stages and measurements (optcli/runtime/pool.py); the run closes it.
    runners: RunnerPool = field(default_factory=_runner_pool)
    # The run's plan (optcli/plan/): the pipeline's; a context made outside a run plans every stage.
    plan: RunPlan = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.plan is None:
            self.plan = unrouted_plan(self.config, self.target)


@dataclass
class StageResult:
    """A stage's output artifact and what it wants the report to say about the work. A stage whose own
    analysis finds it does not apply puts the reason in details["skipped"] (its artifact a copy of the
    input): the pipeline reports it skipped and goes on with the input."""

    artifact: Artifact
    # the stage's record (optcli/report/details.py), or its JSON: the pipeline reads it as the stage's class
    details: StageDetails | dict[str, Any] = field(default_factory=dict)
    # A stage that evaluates on real data (the quantize stages) reports that accuracy instead of
    # the pipeline's random-input check.
    accuracy: AccuracySummary | None = None


class Stage(ABC):
    """One step of the pipeline."""

    name: ClassVar[str]
    order: ClassVar[int]          # position in the pipeline; gaps leave room for new stages
    # The config-file table this stage owns beyond config.py's own (e.g. [tensorrt]); the pipeline
    # refuses tables no stage owns, so a misspelt [fusee] is an error, not silently ignored.
    config_section: ClassVar[str | None] = None
    # onnxruntime graph optimization level for this stage's before/after latency. "disabled" shows a
    # graph stage's own effect (ORT would apply the same fusions at load); quantize stages use "all",
    # because ORT turns Q/DQ into integer kernels only when it optimizes at load. None: the setting the
    # next stage that runs times this stage's output at, so that graph is timed once (export).
    measure_optimization: ClassVar[str | None] = "disabled"
    # A build stage's artifact is what the run ships: its row's "after" is timed with the whole [bench],
    # and the final measurement is that one (one session and one measurement, not two).
    builds_deployable: ClassVar[bool] = False

    def __init__(self, ctx: StageContext) -> None:
        self.ctx = ctx

    @classmethod
    def enabled(cls, config: CompileConfig) -> bool:
        """Whether this run asked for the stage at all (a disabled stage is not in the report)."""
        return True

    def skip_reason(self, artifact: Artifact) -> str | None:
        """A reason to skip this stage for this input (reported as skipped), or None to run it."""
        return None

    def check_plan(self) -> None:
        """Raise a UsageError now, before the first stage runs, for what this stage's settings make
        impossible with the run's inputs and target (found otherwise only when its turn comes)."""
        return None

    def fingerprint(self) -> dict[str, object]:
        """Everything besides the input artifact that changes the output; the cache key hashes it."""
        return {}

    @abstractmethod
    def run(self, artifact: Artifact, workdir: Path) -> StageResult:
        """Do the work, writing only inside `workdir` (a fresh folder renamed into place on success)."""

    def gate(self, accuracy: AccuracySummary) -> str | None:
        """Return a failure message when `accuracy` misses this stage's tolerance, else None."""
        return None

    def heldout_rows(self, before: Artifact) -> Any:
        """The rows (a SampleSet) this stage judges its artifact on, made from `before`: a reused artifact is
        checked again on them (optcli/cache_recheck.py). None: the run's fixed random inputs are its check."""
        return None

    def reuse_check(self, accuracy: AccuracySummary) -> str | None:
        """Why a reused artifact, measured again against the user's model (`accuracy`), is not one this stage
        makes, or None (optcli/cache_recheck.py). A stage keeps the model's function unless it says otherwise:
        its outputs match the model's to float32 rounding. A stage with a tolerance answers with its gate."""
        from optcli.accuracy import same_function

        return same_function(accuracy)


def register(cls: type[Stage]) -> type[Stage]:
    """Class decorator that adds a stage to the pipeline."""
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise RuntimeError(f"two stages named {cls.name!r}")
    _REGISTRY[cls.name] = cls
    return cls


def registered() -> list[type[Stage]]:
    # Ties in `order` (the two build stages) break by name, not by import order: a stage module
    # imported early elsewhere must not renumber the run's folders.
    return sorted(_REGISTRY.values(), key=lambda c: (c.order, c.name))


def config_dict(obj: Any) -> dict[str, object]:
    """A dataclass config as a JSON-able dict (for fingerprints)."""
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(obj).items()}
