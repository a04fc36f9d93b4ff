"""Stage build: the run's deployable artifact, built the way the plan says for the run's target.

One stage for every target. The plan (optcli/plan/) names the work (`RunPlan.build_work`): on the CPU the
measured search among every installed CPU backend's candidates (optcli/cpu/build_search.py); for a target a
backend owns, that backend's engine build (tensorrt and tensorrt-rtx: optcli/backends/tensorrt/engine_build.py).
`--target` chooses the work and `--backend` narrows the CPU candidates; this module knows no backend's name.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from optcli.accuracy_summary import AccuracySummary
from optcli.artifact import Artifact
from optcli.plan.build_choice import all_works
from optcli.plan.build_work import BuildWork
from optcli.plan.stage_names import StageName
from optcli.stages.base import Stage, StageContext, StageResult, register


def _work_class(spec: str) -> type[BuildWork]:
    from optcli.backends.registry import load_object

    return load_object(spec)


@register
class BuildStage(Stage):
    """The last graph -> what the run ships (a CPU artifact chosen by measurement, or an engine)."""

    name = StageName.BUILD
    order = 50
    builds_deployable = True

    def __init__(self, ctx: StageContext) -> None:
        super().__init__(ctx)
        self._work: tuple[str, BuildWork] | None = None

    @property
    def work(self) -> BuildWork:
        """The work the run's plan names (asked each time: the pipeline plans after making its stages)."""
        spec = self.ctx.plan.build_work
        if self._work is None or self._work[0] != spec:
            self._work = (spec, _work_class(spec)(self.ctx, self.name))
        return self._work[1]

    @classmethod
    def enabled(cls, config: Any) -> bool:
        for spec in all_works():  # every build's config section is checked: `auto` is resolved later
            _work_class(spec).validate(config)
        return True

    @property
    def measure_optimization(self) -> str | None:  # type: ignore[override]  # the work's; a ClassVar elsewhere
        return self.work.measure_optimization

    def skip_reason(self, artifact: Artifact) -> str | None:
        return self.work.skip_reason(artifact)

    def check_plan(self) -> None:
        self.work.check_plan()

    def fingerprint(self) -> dict[str, object]:
        return self.work.fingerprint()

    def gate(self, accuracy: AccuracySummary) -> str | None:
        return self.work.gate(accuracy)

    def heldout_rows(self, before: Artifact) -> Any:
        return self.work.heldout_rows(before)

    def reuse_check(self, accuracy: AccuracySummary) -> str | None:
        return self.work.reuse_check(accuracy)

    def run(self, artifact: Artifact, workdir: Path) -> StageResult:
        return self.work.run(artifact, workdir)
