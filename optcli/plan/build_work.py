"""The build step's work: what the one build stage (optcli/stages/build.py) executes for the run's target.

The plan names it (`RunPlan.build_work`, "module:Class", chosen by optcli/plan/build_choice.py): for a target
a backend owns (tensorrt, tensorrt-rtx), that backend's `engine_build`; for the CPU, the measured search among
every CPU backend's candidates (optcli/cpu/build_search.py). A new target is a backend folder whose descriptor
names its work; the stage, the planner and the CLI never ask which target it is.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from optcli.accuracy_summary import AccuracySummary
    from optcli.artifact import Artifact
    from optcli.config import CompileConfig
    from optcli.stages.base import StageContext, StageResult

class BuildWork(ABC):
    """One way to build the run's deployable artifact; the build stage delegates its contract here."""

    # The onnxruntime optimization level the build row's "before" (its input ONNX) is timed at.
    measure_optimization: ClassVar[str | None] = "all"

    def __init__(self, ctx: StageContext, stage_name: str) -> None:
        self.ctx = ctx
        self.name = stage_name

    @classmethod
    def validate(cls, config: CompileConfig) -> None:
        """Raise a UsageError for its config section's impossible settings, before anything runs (whatever the
        target: `auto` is resolved later)."""
        return None

    def skip_reason(self, artifact: Artifact) -> str | None:
        return None

    def check_plan(self) -> None:
        return None

    def fingerprint(self) -> dict[str, object]:
        return {}

    def gate(self, accuracy: AccuracySummary) -> str | None:
        return None

    def heldout_rows(self, before: Artifact) -> Any:
        return None

    def reuse_check(self, accuracy: AccuracySummary) -> str | None:
        from optcli.accuracy import same_function

        return same_function(accuracy)

    @abstractmethod
    def run(self, artifact: Artifact, workdir: Path) -> StageResult:
        """Build from `artifact`, writing only inside `workdir`."""
