"""The pipeline: a loop over stages. Around each stage it skips (a stage's `skip_reason`), reuses a cached
result (optcli/stage_cache.py), times the stage, measures it (optcli/stage_measure.py: latency before and
after, accuracy against the FP32 reference), applies the stage's accuracy gate, and rewrites the report.

Crash safety: each stage writes into a temporary folder renamed into place on success; the report is
rewritten after every stage, and whatever ends the run (a failure, a bug, Ctrl-C, SIGTERM) is recorded
in one place, so an interrupted run says what did not finish. One run per output folder (a lock).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from optcli.artifact import Artifact, sha256_file
from optcli.atomic_write import atomic_dir, remove_stale_partials
from optcli.backends.registry import ONNX
from optcli.backends.torch.loader import ModelSource, detect, load_torch
from optcli.config import CompileConfig, section_class
from optcli.environment import environment
from optcli.errors import AccuracyError, OptcliError, StageError, UsageError, disk_full, error_record
from optcli.onnx_model import graph_view, io_specs
from optcli.plan import ModelFeatures, RunPlan, plan_run
from optcli.plan.run_state import Reference
from optcli.report import (
    AccuracyResult,
    ConfigFileRecord,
    EnvironmentInfo,
    ErrorRecord,
    GateResult,
    GraphStats,
    LatencyPair,
    ModelInfo,
    PlanRecord,
    RunReport,
    StageReport,
    Status,
    details_from_json,
)
from optcli.stage_cache import cache_key, cached_artifact, load_record, write_record
from optcli.stage_measure import Measurements
from optcli.stages import Stage, StageContext, all_stages
from optcli.targets import resolve_target
from optcli.tensor_spec import TensorSpec, merge_pinned, with_batch
from optcli.version import __version__

Event = Callable[[str, dict[str, Any]], None]


def _noop(_event: str, _data: dict[str, Any]) -> None:
    return None


def _check_out_dir(out: Path, force: bool) -> None:
    from optcli.run_lock import made_by_optcli

    if out.exists() and not out.is_dir():
        raise UsageError(f"output folder {out} is a file", hint="pass --out a folder path")
    if not force and not made_by_optcli(out):
        # report.json, report.md and the stage folders would overwrite files of the same names there
        raise UsageError(f"output folder {out} already holds files and is not an optcli output folder",
                         hint="pass a new or empty --out, or --force to write into it anyway")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".optcli-write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        full = disk_full(exc)
        if full is not None:
            raise full from None
        raise UsageError(f"cannot write to output folder {out}: {exc.strerror or exc}",
                         hint="pass --out a folder you can write to") from None


class Pipeline:
    """Runs `optcli compile` for one CompileConfig; `run()` returns the RunReport (never prints).
    The caller's config is copied: what the run learns (a model's fixed batch) never changes it."""

    def __init__(self, config: CompileConfig, on_event: Event | None = None) -> None:
        config.validate()
        for table in sorted(config.extra):
            section_class(table)  # a misspelt [fusee] is an error, not silently ignored
        self.config = config.copy()
        self.emit = on_event or _noop
        self.out = config.out_dir()
        self.measure = Measurements(self.config)

    # -- setup -------------------------------------------------------------------------------
    def _context(self, source: ModelSource, target: str) -> StageContext:
        pinned = self.config.inputs
        torch_model = None
        if source.is_torch:
            torch_model = load_torch(source, pinned, self.config.export.task)
            inputs, fixed, int_high = torch_model.inputs, torch_model.fixed_batch, dict(torch_model.int_high)
        else:
            from optcli.onnx_model import int_bounds_onnx
            from optcli.sequence_axis import fill_lengths, recorded_lengths

            graph = graph_view(source.path)
            inputs, _ = io_specs(graph)
            firsts = [s.shape[0] for s in inputs if s.shape]
            first = firsts[0] if firsts else None
            fixed = first if isinstance(first, int) and all(isinstance(d, int) and d > 0 for d in firsts) else None
            inputs = merge_pinned(inputs, pinned) if pinned else inputs
            inputs = fill_lengths(inputs, recorded_lengths(graph))  # a dynamic sequence: measured at one length
            # the user's ONNX: token ids must stay inside the embedding tables they index
            int_high = int_bounds_onnx(source.path) if source.format == ONNX else {}
        if not inputs:
            raise UsageError(f"{source.path} takes no inputs: there is nothing to feed, measure or calibrate",
                             hint="optcli compiles models with at least one input tensor; "
                                  "fold a constant-only graph into its consumer instead")
        inputs = self._batch_dim(inputs, fixed)
        if torch_model is not None:
            torch_model.inputs = inputs
        # The plan comes once the stages are chosen (_run_locked): a bad [cpu] section stays their error.
        return StageContext(config=self.config, source=source, inputs=inputs, target=target,
                            out_dir=self.out, torch_model=torch_model, int_high=int_high,
                            plan=RunPlan(target=target, stages=()))

    def _batch_dim(self, inputs: list[TensorSpec], fixed: int | None) -> list[TensorSpec]:
        """Dim 0 is the batch: dynamic unless --static-batch or the model itself fixes it (a pinned size
        like --input x:1x3x224x224 is then only an example). A fixed batch is the one size the model
        takes, so the reference, the checks and the latency all run at it."""
        if fixed is None and self.config.export.static_batch:
            first = inputs[0].shape[0] if inputs and inputs[0].shape else 1
            fixed = first if isinstance(first, int) else 1
        if fixed is None:
            return with_batch(inputs, "batch")
        self.config.bench.batch = self.config.accuracy.batch = fixed
        return with_batch(inputs, fixed)

    # -- the run -----------------------------------------------------------------------------
    def run(self) -> RunReport:
        from optcli.run_lock import output_lock

        t_start = time.perf_counter()
        source = detect(self.config.model, allow_pickle=self.config.export.allow_pickle)
        _check_out_dir(self.out, self.config.force)
        with output_lock(self.out):
            return self._run_locked(source, t_start)

    def _run_locked(self, source: ModelSource, t_start: float) -> RunReport:
        remove_stale_partials(self.out)  # only under the lock: a live run's partials are not stale
        target, target_reason = resolve_target(self.config.target)
        ctx = self._context(source, target)
        self.config.freeze()  # what the run learnt (a fixed batch) is in; from here on nothing changes it
        ctx.state.target_reason = target_reason
        if self.config.time_budget:  # a perf_counter time: the CPU search stops at the best so far past it
            ctx.state.deadline = t_start + self.config.time_budget
        stages = [cls(ctx) for cls in all_stages() if cls.enabled(self.config)]
        # The plan, before the first stage; the route's part waits for the first ONNX graph (_complete_plan).
        ctx.plan = plan_run(self.config, ModelFeatures(source.is_torch), target=target, stages=[s.name for s in stages])
        for stage in stages:  # what a stage's turn would refuse (a profile without a range) fails now
            stage.check_plan()
        loaded_as = ctx.torch_model.loaded_as if ctx.torch_model else None
        model = ModelInfo.from_json({"path": str(source.path), "spec": source.spec, "format": source.format,
                                     "sha256": sha256_file(source.path), "inputs": [s.to_json() for s in ctx.inputs],
                                     "loaded_as": loaded_as or None})
        config_file = self.config.config_file_record()
        report = RunReport(
            optcli_version=__version__, model=model, target=target, target_reason=target_reason,  # type: ignore[arg-type]
            environment=EnvironmentInfo.from_json(environment()), config=self.config.to_json(),
            stages=[StageReport(s.name) for s in stages],
            config_file=ConfigFileRecord.from_json(config_file) if config_file else None)
        self._current: StageReport | None = None
        try:  # from the first write on: a SIGTERM during it must still end as `interrupted`
            report.write(self.out)
            self.emit("run_start", {"stages": [s.name for s in stages], "target": target, "out": str(self.out)})
            self._run_stages(ctx, stages, report)
        except OptcliError as exc:
            self._record_end(report, exc)
        except BaseException as exc:  # Ctrl-C, SIGTERM or a bug: recorded like the rest, then re-raised
            full = disk_full(exc)
            self._record_end(report, full or exc)
            self._finish(report, t_start)
            if full is None:
                raise
            return report  # a full disk outside a stage (a report write): failed, exit 1, as inside one
        finally:
            ctx.runners.close()
        self._finish(report, t_start)
        self.emit("run_end", {"status": report.status})
        return report

    def _run_stages(self, ctx: StageContext, stages: list[Stage], report: RunReport) -> None:
        self.emit("phase", {"text": "computing the FP32 reference"})
        reference = self.measure.reference(ctx)
        ctx.state.reference = reference
        artifact = Artifact(ctx.source.path, ctx.source.format, stage=None)
        ctx.state.artifacts = {"source": artifact}  # lineage: later stages may need an earlier graph
        if ctx.torch_model is not None:
            # Measure PyTorch eager before export runs: the exporter leaves global state behind.
            self.emit("phase", {"text": "measuring PyTorch eager"})
            self.measure.latency(ctx, artifact, full=True)  # the final's baseline: export's row reuses it
        report.plan = PlanRecord.from_json(ctx.plan.to_json())
        for index, (stage, record) in enumerate(zip(stages, report.stages), 1):
            self._current = record
            self.emit("stage_start", {"name": stage.name, "index": index, "total": len(stages)})
            artifact = self._run_stage(ctx, stage, record, artifact, self.out / f"{index:02d}-{stage.name}", reference,
                                       stages[index:])
            ctx.state.artifacts[stage.name] = artifact
            report.plan = PlanRecord.from_json(ctx.plan.to_json())  # the route is decided by now where it applies
            report.write(self.out)
            self.emit("stage_end", record.to_json())
            if record.status == "failed":
                report.status, report.error = Status.FAILED, record.details.error
                return
        self._current = None
        self.emit("phase", {"text": "measuring the final artifact"})
        report.final = self.measure.final(ctx, artifact)
        report.status = Status.OK

    def _record_end(self, report: RunReport, exc: BaseException) -> None:
        """Whatever ended the run, in one place: the report's error, status, and the stage it hit."""
        current = self._current
        report.error = ErrorRecord.from_json(error_record(exc, current.name if current else None))
        report.status = Status.INTERRUPTED if isinstance(exc, KeyboardInterrupt) else Status.FAILED
        if current is not None:
            current.status = report.status
            current.reason = report.error.message

    def _finish(self, report: RunReport, t_start: float) -> None:
        if report.status == Status.INTERRUPTED:
            reason = "the run was interrupted"
        elif any(s.status == Status.FAILED for s in report.stages):
            reason = "an earlier stage failed"
        else:
            reason = "the run failed before this stage"
        report.mark_not_run(reason)
        report.seconds = round(time.perf_counter() - t_start, 3)
        report.write(self.out)

    def _run_stage(self, ctx: StageContext, stage: Stage, record: StageReport, artifact: Artifact,
                   stage_dir: Path, reference: Reference, later: list[Stage]) -> Artifact:
        self._complete_plan(ctx, stage, artifact)
        reason = stage.skip_reason(artifact)
        if reason:
            record.status, record.reason = Status.SKIPPED, reason
            return artifact
        key = cache_key(stage, artifact)
        cached = None if self.config.force else load_record(stage_dir, key)
        rejected = None
        if cached is not None:
            reused, rejected = self._reuse(ctx, stage, record, artifact, stage_dir, cached, reference, later)
            if reused is not None:
                return reused
        t0 = time.perf_counter()
        try:
            with atomic_dir(stage_dir) as tmp:
                result = stage.run(artifact, tmp)
                record.details = details_from_json(stage.name, result.details)
                record.seconds = round(time.perf_counter() - t0, 3)
                self.emit("phase", {"text": f"{stage.name}: measuring"})
                t_measure = time.perf_counter()
                accuracy = AccuracyResult.of(result.accuracy) if result.accuracy is not None else None
                self.measure.around_stage(ctx, stage, record, artifact, result.artifact, reference, accuracy,
                                          self._row_setting(stage, later, result.artifact))
                record.measure_seconds = round(time.perf_counter() - t_measure, 3)
                rel = result.artifact.path.relative_to(tmp)
                write_record(tmp, key, self.measure.bench_key(), rel, result.artifact, record)
        except Exception as exc:  # a full disk fails the stage too: its folder is gone, so the report has room
            failure = exc if isinstance(exc, StageError) else disk_full(exc)
            if failure is None:
                raise
            record.status, record.reason = Status.FAILED, failure.message
            record.seconds = round(time.perf_counter() - t0, 3)
            record.details.error = ErrorRecord.from_json(error_record(failure, stage.name))
            return artifact
        made = result.artifact  # the folder was renamed: point the artifact at its final place
        out = Artifact(stage_dir / rel, made.format, made.precision, stage.name, artifact.sha256, made.backend,
                       made.meta, made.sha256)
        record.status, record.artifact = Status.OK, str((stage_dir / rel).relative_to(self.out))
        if rejected:
            record.details.cache_rejected = rejected
        self._apply_gate(stage, record)
        return self._declined(record, artifact, out)

    def _reuse(self, ctx: StageContext, stage: Stage, record: StageReport, artifact: Artifact, stage_dir: Path,
               cached: dict[str, Any], reference: Reference, later: list[Stage]
               ) -> tuple[Artifact | None, str | None]:
        """(the cached stage's artifact, None), or (None, why) where its artifact, measured again against the
        user's model, is not what the stage makes or its record says: the stage is then rebuilt
        (optcli/cache_recheck.py)."""
        from optcli.cache_recheck import recheck

        out = cached_artifact(stage_dir, cached, stage.name, artifact.sha256)
        self.emit("phase", {"text": f"{stage.name}: re-checking the cached artifact"})
        t_measure = time.perf_counter()
        setting = self._row_setting(stage, later, out)
        fresh, rejected = recheck(self.measure, ctx, stage, artifact, out, reference, cached["accuracy"], setting)
        if rejected:
            return None, f"the cached stage was rebuilt: {rejected}"
        record.status, record.seconds = Status.CACHED, cached["seconds"]
        record.details = details_from_json(stage.name, cached["details"])
        record.artifact = str((stage_dir / cached["artifact"]).relative_to(self.out))
        record.graph = GraphStats.from_json(cached["graph"])
        # the record's notes (a deferred gate, the reference's kind) with the figures measured now
        accuracy = AccuracyResult.from_json({**(cached["accuracy"] or {}), **(fresh or {})})
        if cached.get("bench_key") == self.measure.bench_key():
            record.latency_ms, record.accuracy = LatencyPair.from_json(cached["latency_ms"]), accuracy
            self.measure.remember(ctx, artifact, record.latency_ms.before)
            self.measure.remember(ctx, out, record.latency_ms.after)
        else:
            self.measure.around_stage(ctx, stage, record, artifact, out, reference, accuracy, optimization=setting)
        record.measure_seconds = round(time.perf_counter() - t_measure, 3)
        self._apply_gate(stage, record)
        return self._declined(record, artifact, out), None

    def _row_setting(self, stage: Stage, later: list[Stage], made: Artifact) -> str:
        """The setting `stage`'s row is timed at: its own, or for a stage without one (export) the setting
        of the next stage that runs on `made` ("all" where none does: the final figure's), so `made` is
        timed once. Asking a later stage early is asking what its own turn will ask of the same artifact."""
        if stage.measure_optimization is not None:
            return stage.measure_optimization
        if not self.config.bench.enabled:
            return "disabled"
        for nxt in later:
            self._complete_plan(nxt.ctx, nxt, made)
            try:
                if nxt.skip_reason(made) is None:
                    return nxt.measure_optimization or "all"
            except OptcliError:  # its own turn raises it again, as that stage's error
                return "disabled"
        return "all"

    def _complete_plan(self, ctx: StageContext, stage: Stage, graph: Artifact) -> None:
        """The plan's route, once, from the first ONNX graph a stage the route governs is asked about (the
        user's ONNX, or the exporter's): the stages read the plan, never decide it."""
        if ctx.plan.needs_graph(stage.name, graph):
            names = ctx.plan.stages
            ctx.plan = plan_run(self.config, ModelFeatures(ctx.source.is_torch, graph), target=ctx.target, stages=names)

    @staticmethod
    def _declined(record: StageReport, before: Artifact, out: Artifact) -> Artifact:
        """A stage whose own analysis found it does not apply (details["skipped"]: the reason) is
        reported skipped, and the run goes on with its input; its folder stays as the cache entry."""
        reason = record.details.skipped
        if not reason:
            return out
        record.status, record.reason = Status.SKIPPED, str(reason)
        return before

    def _apply_gate(self, stage: Stage, record: StageReport) -> None:
        if record.accuracy is None:
            return
        message = stage.gate(record.accuracy.summary())
        if message:
            record.details.gate = GateResult(passed=False, message=message)
            raise AccuracyError(f"{stage.name}: {message}",
                                hint="loosen --tolerance, exclude nodes (--exclude / --exclude-op), "
                                     "or try another precision")
