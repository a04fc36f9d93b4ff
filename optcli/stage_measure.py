"""The measurements around stages: the FP32 reference, latency before and after each stage with the
matching runner (memoized per artifact sha256 and setting), accuracy against the reference, and the
final artifact as deployed. The pipeline calls these; stages never measure themselves."""
from __future__ import annotations

import json
from typing import Any

from optcli.accuracy import compare_outputs
from optcli.accuracy_summary import AccuracySummary
from optcli.artifact import Artifact
from optcli.backends.registry import ONNX
from optcli.config import CompileConfig
from optcli.errors import OptcliError, StageError, UsageError, model_error_line
from optcli.latency import LatencyStats, stats_from_samples, time_calls
from optcli.onnx_model import graph_summary
from optcli.plan.run_state import Reference
from optcli.report import AccuracyResult, FinalArtifact, GraphStats, LatencyPair, StageReport
from optcli.runtime.pool import session_options
from optcli.stages import Stage, StageContext
from optcli.tensor_spec import format_shape, random_inputs

# The stage table's before/after figures say what a stage did to speed, not what to ship: each is
# timed for at most STAGE_MAX_SECONDS after a short warm-up, stopping at +-5% (on a BERT-base compile
# they were 43 s of the run, issue 16). The final artifact and its baseline get the full [bench].
STAGE_SETTLE = 0.05
STAGE_MAX_SECONDS = 1.0
STAGE_WARMUP_RUNS = 2
# A full measurement may stop early ([bench] settle) only from this many calls on: its p90 needs them.
SETTLE_MIN_RUNS_FULL = 20


class Measurements:
    """One run's measurements; latency is memoized so an artifact is timed once per setting."""

    def __init__(self, config: CompileConfig) -> None:
        self.config = config
        self._latency: dict[tuple[str, str, str], LatencyStats] = {}
        self._blocked: dict[str, str | None] = {}

    def not_runnable(self, artifact: Artifact) -> str | None:
        """Why `artifact` cannot run on this machine (a TensorRT-RTX engine without an RTX GPU: built ahead
        of time), asked of its backend once per run; None where it can."""
        from optcli.backends.registry import all_backends, load_object

        backend = next((b for b in all_backends() if artifact.format in b.formats), None)
        if backend is None or backend.runs_here is None:  # e.g. the user's PyTorch source
            return None
        if backend.name not in self._blocked:
            self._blocked[backend.name] = load_object(backend.runs_here)()
        return self._blocked[backend.name]

    def bench_key(self) -> str:
        """What a cached stage's measurements depend on: reused only when this is unchanged."""
        return json.dumps({"bench": self.config.bench.__dict__, "accuracy_batch": self.config.accuracy.batch},
                          sort_keys=True, default=str)

    # -- runners -----------------------------------------------------------------------------
    # Runners are borrowed from the run's pool (ctx.runners) and released to it, not closed: the same
    # artifact at the same setting is opened once for its row, its accuracy and the final measurement.
    def source_runner(self, ctx: StageContext) -> Any:
        if ctx.torch_model is not None:
            from optcli.backends.torch.runner import TorchRunner

            return TorchRunner(ctx.torch_model.module, ctx.inputs, threads=self.config.bench.threads)
        return ctx.runners.borrow(ctx.source.path, ctx.source.format,
                                  **session_options(ctx.source.format, self.config.bench.threads))

    def artifact_runner(self, ctx: StageContext, artifact: Artifact, optimization: str) -> Any:
        # runner_options: e.g. an OpenVINO IR's precision
        options = session_options(artifact.format, self.config.bench.threads, optimization,
                                  artifact.meta.get("runner_options"))
        return ctx.runners.borrow(artifact.path, artifact.format, **options)

    # -- the reference and accuracy ----------------------------------------------------------
    def reference(self, ctx: StageContext) -> Reference:
        """FP32 reference outputs on fixed random inputs: PyTorch eager, or the user's ONNX as given."""
        feeds = random_inputs(ctx.inputs, self.config.accuracy.batch, seed=0, int_high=ctx.int_high)
        runner = self.source_runner(ctx)
        try:
            try:
                outs = runner.run_normalized(runner.normalize(feeds))
            except OptcliError:
                raise
            except Exception as exc:  # the model refuses inputs built from --input: bad input, not a bug
                given = ", ".join(f"{n}:{format_shape(v.shape)}:{v.dtype}" for n, v in feeds.items())
                raise UsageError(f"the model fails on inputs {given}: {model_error_line(exc)}",
                                 hint="check the --input names, shapes and dtypes, e.g. --input input_ids:1x128:int64"
                                 ) from exc
            if ctx.torch_model is None:
                # The user's ONNX at "all" is the final's baseline: timed now, on this session (a BERT-base
                # session costs a second), as PyTorch eager is timed before export.
                self.latency(ctx, Artifact(ctx.source.path, ctx.source.format), "all", full=True, runner=runner)
        finally:
            ctx.runners.release(runner)
        kind = "torch-fp32" if ctx.torch_model is not None else "onnx-fp32"
        return {"feeds": feeds, "outputs": outs, "kind": kind}

    def accuracy(self, ctx: StageContext, artifact: Artifact, reference: Reference,
                 runner: Any = None, optimization: str = "all") -> AccuracySummary:
        """The artifact's outputs against the reference's; on `runner` where one is open (not released here),
        else on one at `optimization`."""
        own = runner is None
        runner = self.artifact_runner(ctx, artifact, optimization) if own else runner
        try:
            outs = runner.run_normalized(runner.normalize(reference["feeds"]))
            names = [o.name for o in runner.outputs]
            setting = dict(getattr(runner, "settings", {}) or {}).get("graph_optimization")
        finally:
            if own:
                ctx.runners.release(runner)
        summary = compare_outputs(reference["outputs"], outs, names)
        if setting:
            summary["graph_optimization"] = setting
        summary["reference"] = reference["kind"]
        summary["batch"] = self.config.accuracy.batch
        return summary

    # -- latency -----------------------------------------------------------------------------
    @staticmethod
    def _is_torch_source(ctx: StageContext, artifact: Artifact) -> bool:
        return artifact.stage is None and ctx.torch_model is not None

    def _key(self, ctx: StageContext, artifact: Artifact, optimization: str, full: bool) -> tuple[str, str, str]:
        from optcli.backends.registry import for_format

        depth = "full" if full else "stage"
        if self._is_torch_source(ctx, artifact):
            return (str(artifact.path), "eager", depth)  # PyTorch has no optimization levels
        if not for_format(artifact.format).takes_optimization:
            optimization = "-"  # an IR or an engine runs one way: its row and the final are one measurement
        return (artifact.sha256, optimization, depth)

    def latency(self, ctx: StageContext, artifact: Artifact, optimization: str = "disabled",
                full: bool = False, runner: Any = None) -> LatencyStats | None:
        """Latency of one artifact at the bench batch; None with --no-bench. `full`: timed with the whole
        [bench] settings (the final artifact and its baseline); else a stage row's short measurement,
        which a full one of the same artifact and setting also answers. On `runner` where one is open
        at `optimization` (not closed here)."""
        bench = self.config.bench
        if not bench.enabled or self.not_runnable(artifact):
            return None
        key = self._key(ctx, artifact, optimization, full)
        answers = [key] if full else [self._key(ctx, artifact, optimization, True), key]  # full answers a row
        known = next((self._latency[k] for k in answers if k in self._latency), None)
        if known is not None:
            return known
        own = runner is None
        if own:
            runner = self.source_runner(ctx) if self._is_torch_source(ctx, artifact) else \
                self.artifact_runner(ctx, artifact, optimization)
        try:
            feeds = runner.normalize(random_inputs(ctx.inputs, bench.batch, seed=1, int_high=ctx.int_high))
            # A full measurement times `runs` calls or stops once its median is known to +-[bench] settle
            # (from 20 calls and min_seconds on: a fast model's 20 calls are a few ms, too short to trust);
            # a stage row stops once it is known to +-5%: a figure, not a study.
            budget: dict[str, Any] = dict(warmup_runs=bench.warmup_runs, warmup_seconds=bench.warmup_seconds,
                                          min_seconds=bench.min_seconds, max_seconds=bench.max_seconds,
                                          settle=bench.settle or None, settle_min_runs=SETTLE_MIN_RUNS_FULL,
                                          settle_min_seconds=bench.min_seconds)
            if not full:
                budget = dict(warmup_runs=min(bench.warmup_runs, STAGE_WARMUP_RUNS),
                              warmup_seconds=min(bench.warmup_seconds, 0.1),
                              min_seconds=min(bench.min_seconds, STAGE_MAX_SECONDS / 2),
                              max_seconds=min(bench.max_seconds, STAGE_MAX_SECONDS), settle=STAGE_SETTLE)
            samples = time_calls(lambda: runner.run_normalized(feeds), runs=bench.runs, **budget)
            stats = stats_from_samples(samples, bench.batch, runner.backend, getattr(runner, "settings", {}))
        finally:
            if own:
                ctx.runners.release(runner)
        self._latency[key] = stats
        return stats

    def remember(self, ctx: StageContext, artifact: Artifact, latency: LatencyStats | None) -> None:
        """Reuse a cached stage's measurements for the same artifact later in this run."""
        if latency:
            setting = latency.settings.get("graph_optimization", "disabled")
            self._latency[self._key(ctx, artifact, setting, full=False)] = latency

    # -- around a stage, and at the end ------------------------------------------------------
    def around_stage(self, ctx: StageContext, stage: Stage, record: StageReport, before: Artifact, after: Artifact,
                     reference: Reference, accuracy: AccuracyResult | None = None,
                     optimization: str | None = None) -> None:
        """Graph statistics, latency before/after and accuracy into the stage's report, at `optimization`
        (default: the stage's measure_optimization)."""
        setting = optimization or stage.measure_optimization or "disabled"
        graph: GraphStats = record.graph
        if before.format == ONNX:
            g = graph_summary(before.path)
            graph.nodes_before, graph.ops_before = g["nodes"], g["ops"]
        if after.format == ONNX:
            g = graph_summary(after.path)
            graph.nodes_after, graph.ops_after = g["nodes"], g["ops"]
        blocked = self.not_runnable(after)
        if blocked:  # built ahead of time for hardware this machine lacks: said, not failed
            record.details.not_measured = blocked
            record.latency_ms = LatencyPair()
            record.accuracy = accuracy
            return
        # One session of the new artifact for its latency and its accuracy (a BERT-base session costs a
        # second): the accuracy of a row is taken at the row's setting, the graph as the stage wrote it.
        shared = None
        try:
            lat_before = self.latency(ctx, before, setting)
            if accuracy is None and not self._is_torch_source(ctx, after):
                shared = self.artifact_runner(ctx, after, setting)
            lat_after = self.latency(ctx, after, setting, full=stage.builds_deployable, runner=shared)
            record.accuracy = accuracy if accuracy is not None else \
                AccuracyResult.of(self.accuracy(ctx, after, reference, runner=shared))
        except OptcliError as exc:
            raise StageError(f"the {stage.name} artifact does not run: {exc.message}", hint=exc.hint) from exc
        finally:
            if shared is not None:
                ctx.runners.release(shared)
        record.latency_ms = LatencyPair(before=lat_before, after=lat_after)

    def final(self, ctx: StageContext, artifact: Artifact) -> FinalArtifact:
        """The artifact to ship, measured as it would be deployed (optimizations on), beside the baseline
        to beat: PyTorch eager, or the user's ONNX with onnxruntime's own optimizations."""
        deployed = self.latency(ctx, artifact, optimization="all", full=True)
        reference_latency = self.latency(ctx, Artifact(ctx.source.path, ctx.source.format), "all", full=True)
        rel = artifact.path
        try:
            rel = artifact.path.resolve().relative_to(ctx.out_dir.resolve())
        except ValueError:
            pass
        blocked = self.not_runnable(artifact)
        return FinalArtifact.from_json({
            "artifact": str(rel), "format": artifact.format, "precision": artifact.precision, "not_measured": blocked,
            "backend": artifact.backend, "sha256": artifact.sha256, "size_bytes": artifact.size_bytes,
            "flavour": artifact.meta.get("flavour"), "runner_options": artifact.meta.get("runner_options", {}),
            "latency_ms": deployed, "reference_latency_ms": reference_latency})
