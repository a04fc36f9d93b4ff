"""The pipeline: orders stages, caches them by hash, and times, measures and reports around each one.

Stages only transform artifacts; everything around them happens here:
- the order (each stage's `order`), skipping (a stage's `skip_reason`),
- caching: a stage whose input sha256, config fingerprint and optcli version are unchanged is
  reused (`cached`) unless `force`,
- wall time, graph statistics, latency before/after with the matching runner, accuracy against the
  FP32 reference, a stage's accuracy gate,
- crash safety: each stage writes into a temporary folder renamed into place on success, and the
  report is rewritten after every stage, so an interrupted run says what did not finish.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from optcli import __version__
from optcli.accuracy import compare_outputs
from optcli.artifact import Artifact, sha256_file
from optcli.atomic_write import atomic_dir, remove_stale_partials, write_text_atomic
from optcli.config import CompileConfig
from optcli.environment import environment
from optcli.errors import (EXIT_INTERRUPTED, EXIT_TERMINATED, AccuracyError, OptcliError, StageError, Terminated,
                           UsageError)
from optcli.latency import LatencyStats, stats_from_samples, time_calls
from optcli.model_source import ModelSource, detect, load_torch
from optcli.onnx_model import graph_summary, io_specs, load_onnx
from optcli.report import RunReport, StageReport
from optcli.stages import Stage, StageContext, all_stages
from optcli.targets import resolve_target
from optcli.tensor_spec import TensorSpec, format_shape, merge_pinned, random_inputs, with_batch

Event = Callable[[str, dict[str, Any]], None]
STAGE_RECORD = "stage.json"


def _noop(_event: str, _data: dict[str, Any]) -> None:
    return None


def _check_out_dir(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise UsageError(f"output folder {out} is a file", hint="pass --out a folder path")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".optcli-write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"cannot write to output folder {out}: {exc.strerror or exc}",
                         hint="pass --out a folder you can write to") from None


class Pipeline:
    """Runs `optcli compile` for one CompileConfig; `run()` returns the RunReport (never prints)."""

    def __init__(self, config: CompileConfig, on_event: Event | None = None) -> None:
        config.validate()
        owned = {cls.config_section for cls in all_stages() if cls.config_section}
        unknown = sorted(set(config.extra) - owned)
        if unknown:
            known = ["compile", "export", "simplify", "fuse", "bench", "accuracy", "quantize", *sorted(owned)]
            raise UsageError(f"unknown config table [{unknown[0]}]", hint=f"known tables: {', '.join(known)}")
        self.config = config
        self.emit = on_event or _noop
        self.out = config.out_dir()
        self._latency_cache: dict[tuple[str, str], LatencyStats] = {}

    # -- setup -------------------------------------------------------------------------------
    def _context(self, source: ModelSource, target: str) -> StageContext:
        pinned = self.config.inputs
        torch_model = None
        if source.is_torch:
            torch_model = load_torch(source, pinned)
            inputs = torch_model.inputs
            fixed = torch_model.fixed_batch
        else:
            model = load_onnx(source.path, load_weights=False)
            inputs, _ = io_specs(model)
            firsts = [s.shape[0] for s in inputs if s.shape]
            fixed = firsts[0] if firsts and all(isinstance(d, int) and d > 0 for d in firsts) else None
            inputs = merge_pinned(inputs, pinned) if pinned else inputs
        if not inputs:
            raise UsageError(f"{source.path} takes no inputs: there is nothing to feed, measure or calibrate",
                             hint="optcli compiles models with at least one input tensor; "
                                  "fold a constant-only graph into its consumer instead")
        inputs = self._batch_dim(inputs, fixed)
        if torch_model is not None:
            torch_model.inputs = inputs
            int_high = dict(torch_model.int_high)
        else:  # the user's ONNX: token ids must stay inside the embedding tables they index
            from optcli.onnx_model import int_bounds_onnx

            int_high = int_bounds_onnx(source.path) if source.format == "onnx" else {}
        return StageContext(config=self.config, source=source, inputs=inputs, target=target,
                            out_dir=self.out, torch_model=torch_model, int_high=int_high)

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

    def _reference(self, ctx: StageContext) -> dict[str, Any]:
        """FP32 reference outputs on fixed random inputs: PyTorch eager, or the user's ONNX as given."""
        feeds = random_inputs(ctx.inputs, self.config.accuracy.batch, seed=0, int_high=ctx.int_high)
        runner = self._source_runner(ctx)
        try:
            outs = runner.run_normalized(runner.normalize(feeds))
        except OptcliError:
            raise
        except Exception as exc:  # the model refuses inputs built from --input: bad input, not a bug
            given = ", ".join(f"{n}:{format_shape(v.shape)}:{v.dtype}" for n, v in feeds.items())
            raise UsageError(f"the model fails on inputs {given}: {_model_error_line(exc)}",
                             hint="check the --input names, shapes and dtypes, e.g. --input input_ids:1x128:int64"
                             ) from exc
        finally:
            runner.close()
        kind = "torch-fp32" if ctx.torch_model is not None else "onnx-fp32"
        return {"feeds": feeds, "outputs": outs, "kind": kind}

    def _source_runner(self, ctx: StageContext, batch_threads: int | None = None) -> Any:
        if ctx.torch_model is not None:
            from optcli.runtime.torch_runner import TorchRunner

            return TorchRunner(ctx.torch_model.module, ctx.inputs, threads=batch_threads or self.config.bench.threads)
        from optcli.runtime.onnxruntime_runner import OnnxRuntimeRunner

        return OnnxRuntimeRunner(ctx.source.path, optimization="all", threads=self.config.bench.threads)

    # -- measuring ---------------------------------------------------------------------------
    def _measure(self, ctx: StageContext, artifact: Artifact, optimization: str = "disabled") -> LatencyStats | None:
        """Latency of one artifact at the bench batch; memoized per (sha256, setting)."""
        bench = self.config.bench
        if not bench.enabled:
            return None
        key = self._latency_key(ctx, artifact, optimization)
        if key in self._latency_cache:
            return self._latency_cache[key]
        if self._is_torch_source(ctx, artifact):
            runner = self._source_runner(ctx)
        else:
            runner = self._artifact_runner(artifact, optimization)
        try:
            feeds = runner.normalize(random_inputs(ctx.inputs, bench.batch, seed=1, int_high=ctx.int_high))
            samples = time_calls(lambda: runner.run_normalized(feeds), warmup_runs=bench.warmup_runs,
                                 warmup_seconds=bench.warmup_seconds, runs=bench.runs,
                                 min_seconds=bench.min_seconds, max_seconds=bench.max_seconds)
            stats = stats_from_samples(samples, bench.batch, runner.backend, getattr(runner, "settings", {}))
        finally:
            runner.close()
        self._latency_cache[key] = stats
        return stats

    @staticmethod
    def _is_torch_source(ctx: StageContext, artifact: Artifact) -> bool:
        return artifact.stage is None and ctx.torch_model is not None

    def _latency_key(self, ctx: StageContext, artifact: Artifact, optimization: str) -> tuple[str, str]:
        if self._is_torch_source(ctx, artifact):
            return (str(artifact.path), "eager")  # PyTorch has no optimization levels
        return (artifact.sha256, optimization)

    def _artifact_runner(self, artifact: Artifact, optimization: str) -> Any:
        from optcli.runtime import open_runner

        options: dict[str, Any] = {"threads": self.config.bench.threads}
        if artifact.format == "onnx":
            options["optimization"] = optimization
        options.update(artifact.meta.get("runner_options", {}))  # e.g. an OpenVINO IR's precision
        return open_runner(artifact.path, artifact.format, **options)

    def _accuracy(self, artifact: Artifact, reference: dict[str, Any]) -> dict[str, Any]:
        runner = self._artifact_runner(artifact, "all")
        try:
            outs = runner.run_normalized(runner.normalize(reference["feeds"]))
            names = [o.name for o in runner.outputs]
        finally:
            runner.close()
        summary = compare_outputs(reference["outputs"], outs, names)
        summary["reference"] = reference["kind"]
        summary["batch"] = self.config.accuracy.batch
        return summary

    # -- caching -----------------------------------------------------------------------------
    def _cache_key(self, stage: Stage, artifact: Artifact) -> str:
        blob = json.dumps({"stage": stage.name, "optcli": __version__, "input": artifact.sha256,
                           "config": stage.fingerprint(), "target": stage.ctx.target}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()

    def _bench_key(self) -> str:
        return json.dumps({"bench": self.config.bench.__dict__, "accuracy_batch": self.config.accuracy.batch},
                          sort_keys=True, default=str)

    def _load_cached(self, stage_dir: Path, key: str) -> dict[str, Any] | None:
        """The stage's record when it can be reused: same key, its artifact inside the stage folder
        (else exit 2: a record that points elsewhere was tampered with) and with the recorded sha256."""
        from optcli.safe_paths import contained

        record_path = stage_dir / STAGE_RECORD
        if self.config.force or not record_path.is_file():
            return None
        try:
            record = json.loads(record_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            return None
        if not isinstance(record, dict) or record.get("key") != key or not _well_formed(record):
            return None
        art = contained(stage_dir, record.get("artifact"), record_path)
        meta = record.get("meta") if isinstance(record.get("meta"), dict) else {}
        for extra in meta.get("external_data") or []:
            contained(stage_dir, extra, record_path)
        if not art.exists() or sha256_file(art) != record.get("sha256"):
            return None
        return record

    # -- the run -----------------------------------------------------------------------------
    def run(self) -> RunReport:
        from optcli.run_lock import output_lock

        t_start = time.perf_counter()
        source = detect(self.config.model, allow_pickle=self.config.export.allow_pickle)
        _check_out_dir(self.out)
        with output_lock(self.out):
            return self._run_locked(source, t_start)

    def _run_locked(self, source: ModelSource, t_start: float) -> RunReport:
        remove_stale_partials(self.out)  # only under the lock: a live run's partials are not stale
        target, target_reason = resolve_target(self.config.target)
        ctx = self._context(source, target)
        ctx.facts["target_reason"] = target_reason
        stages = [cls(ctx) for cls in all_stages() if cls.enabled(self.config)]
        report = RunReport(
            optcli_version=__version__,
            model={"path": str(source.path), "spec": source.spec, "format": source.format,
                   "sha256": sha256_file(source.path), "inputs": [s.to_json() for s in ctx.inputs]},
            target=target, environment=environment(), config=_config_json(self.config),
            stages=[StageReport(s.name) for s in stages], config_file=_config_file_json(self.config))
        report.write(self.out)
        self.emit("run_start", {"stages": [s.name for s in stages], "target": target, "out": str(self.out)})
        current: StageReport | None = None
        try:
            self.emit("phase", {"text": "computing the FP32 reference"})
            reference = self._reference(ctx)
            ctx.samples["reference"] = reference
            artifact = Artifact(source.path, source.format, stage=None)
            ctx.facts["artifacts"] = {"source": artifact}  # lineage: later stages may need an earlier graph
            if ctx.torch_model is not None:
                # Measure PyTorch eager before export runs: the exporter leaves global state behind.
                self.emit("phase", {"text": "measuring PyTorch eager"})
                self._measure(ctx, artifact)
            for index, (stage, record) in enumerate(zip(stages, report.stages), 1):
                current = record
                self.emit("stage_start", {"name": stage.name, "index": index, "total": len(stages)})
                artifact = self._run_stage(ctx, stage, record, artifact, self.out / f"{index:02d}-{stage.name}", reference)
                ctx.facts["artifacts"][stage.name] = artifact
                report.write(self.out)
                self.emit("stage_end", record.to_json())
                if record.status == "failed":
                    break
            current = None
            failed = next((s for s in report.stages if s.status == "failed"), None)
            if failed is None:
                report.final = self._final(ctx, artifact)
                report.status = "ok"
            else:
                report.status = "failed"
                report.error = failed.details.get("error")
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (the CLI raises Terminated for it)
            why = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted by the user"
            if current is not None:
                current.status, current.reason = "interrupted", why
            report.status = "interrupted"
            report.error = {"type": type(exc).__name__, "message": why, "hint": None,
                            "exit_code": EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED}
            _mark_not_run(report, "the run was interrupted")
            report.seconds = round(time.perf_counter() - t_start, 3)
            report.write(self.out)
            raise
        except OptcliError as exc:
            if current is not None:
                current.status, current.reason = "failed", exc.message
            report.status = "failed"
            report.error = _error_json(exc, current.name if current else None)
        except Exception as exc:  # a bug: the report still says what did not finish; the CLI shows it
            message = f"internal error: {type(exc).__name__}: {_model_error_line(exc)}"
            if current is not None:
                current.status, current.reason = "failed", message
            report.status = "failed"
            report.error = {"type": type(exc).__name__, "message": message, "hint": "rerun with --debug",
                            "exit_code": 1, "stage": current.name if current else None,
                            "traceback": _traceback_text(exc)}
            _mark_not_run(report, "an earlier stage failed" if current else "the run failed before this stage")
            report.seconds = round(time.perf_counter() - t_start, 3)
            report.write(self.out)
            raise
        failed_stage = any(s.status == "failed" for s in report.stages)
        _mark_not_run(report, "an earlier stage failed" if failed_stage else "the run failed before this stage")
        report.seconds = round(time.perf_counter() - t_start, 3)
        report.write(self.out)
        self.emit("run_end", {"status": report.status})
        return report

    def _run_stage(self, ctx: StageContext, stage: Stage, record: StageReport, artifact: Artifact,
                   stage_dir: Path, reference: dict[str, Any]) -> Artifact:
        reason = stage.skip_reason(artifact)
        if reason:
            record.status, record.reason = "skipped", reason
            return artifact
        key = self._cache_key(stage, artifact)
        cached = self._load_cached(stage_dir, key)
        if cached is not None:
            out = Artifact(stage_dir / cached["artifact"], cached["format"], precision=cached["precision"],
                           stage=stage.name, parent=artifact.sha256, backend=cached["backend"],
                           meta=cached.get("meta", {}), _sha256=cached["sha256"])
            record.status, record.seconds, record.details = "cached", cached["seconds"], cached["details"]
            record.artifact = str((stage_dir / cached["artifact"]).relative_to(self.out))
            record.graph = cached["graph"]
            if cached.get("bench_key") == self._bench_key():
                record.latency_ms, record.accuracy = cached["latency_ms"], cached["accuracy"]
                self._remember(ctx, artifact, cached["latency_ms"].get("before"))
                self._remember(ctx, out, cached["latency_ms"].get("after"))
            else:
                self._measure_stage(ctx, stage, record, artifact, out, reference)
            self._apply_gate(stage, record)
            return out
        t0 = time.perf_counter()
        try:
            with atomic_dir(stage_dir) as tmp:
                result = stage.run(artifact, tmp)
                seconds = time.perf_counter() - t0
                rel = result.artifact.path.relative_to(tmp)
                out = result.artifact
                record.details = result.details
                record.seconds = round(seconds, 3)
                self.emit("phase", {"text": f"{stage.name}: measuring"})
                self._measure_stage(ctx, stage, record, artifact, out, reference, result.accuracy)
                # The folder is about to be renamed: point the artifact at its final place.
                final_path = stage_dir / rel
                stage_record = {
                    "key": key, "bench_key": self._bench_key(), "artifact": str(rel), "sha256": out.sha256,
                    "format": out.format, "precision": out.precision, "backend": out.backend, "meta": out.meta,
                    "seconds": record.seconds, "details": record.details, "graph": record.graph,
                    "latency_ms": record.latency_ms, "accuracy": record.accuracy}
                write_text_atomic(tmp / STAGE_RECORD, json.dumps(stage_record, indent=2, default=str))
        except StageError as exc:
            record.status, record.reason = "failed", exc.message
            record.seconds = round(time.perf_counter() - t0, 3)
            record.details["error"] = _error_json(exc, stage.name)
            return artifact
        out = Artifact(final_path, out.format, out.precision, stage.name, artifact.sha256, out.backend, out.meta,
                       out.sha256)
        record.status = "ok"
        record.artifact = str(final_path.relative_to(self.out))
        self._apply_gate(stage, record)
        return out

    def _apply_gate(self, stage: Stage, record: StageReport) -> None:
        if record.accuracy is None:
            return
        message = stage.gate(record.accuracy)
        if message:
            record.details["gate"] = {"passed": False, "message": message}
            raise AccuracyError(f"{stage.name}: {message}",
                                hint="loosen --tolerance, exclude nodes (--exclude / --exclude-op), or try another precision")

    def _remember(self, ctx: StageContext, artifact: Artifact, latency: dict[str, Any] | None) -> None:
        """Reuse a cached stage's measurements for the same artifact later in this run."""
        if latency:
            setting = latency.get("settings", {}).get("graph_optimization", "disabled")
            self._latency_cache[self._latency_key(ctx, artifact, setting)] = LatencyStats.from_json(latency)

    def _measure_stage(self, ctx: StageContext, stage: Stage, record: StageReport, before: Artifact,
                       after: Artifact, reference: dict[str, Any], accuracy: dict[str, Any] | None = None) -> None:
        if before.format == "onnx":
            g = graph_summary(before.path)
            record.graph["nodes_before"], record.graph["ops_before"] = g["nodes"], g["ops"]
        if after.format == "onnx":
            g = graph_summary(after.path)
            record.graph["nodes_after"], record.graph["ops_after"] = g["nodes"], g["ops"]
        try:
            lat_before = self._measure(ctx, before, stage.measure_optimization)
            lat_after = self._measure(ctx, after, stage.measure_optimization)
            record.accuracy = accuracy if accuracy is not None else self._accuracy(after, reference)
        except OptcliError as exc:
            raise StageError(f"the {stage.name} artifact does not run: {exc.message}", hint=exc.hint) from exc
        record.latency_ms = {"before": lat_before.to_json() if lat_before else None,
                             "after": lat_after.to_json() if lat_after else None}

    def _final(self, ctx: StageContext, artifact: Artifact) -> dict[str, Any]:
        """The artifact to ship, measured as it would be deployed (optimizations on)."""
        self.emit("phase", {"text": "measuring the final artifact"})
        deployed = self._measure(ctx, artifact, optimization="all")
        # The baseline to beat: PyTorch eager, or the user's ONNX with onnxruntime's own optimizations.
        reference_latency = self._measure(ctx, Artifact(ctx.source.path, ctx.source.format), "all")
        rel = artifact.path
        try:
            rel = artifact.path.resolve().relative_to(self.out.resolve())
        except ValueError:
            pass
        return {"artifact": str(rel), "format": artifact.format, "precision": artifact.precision,
                "backend": artifact.backend, "sha256": artifact.sha256, "size_bytes": artifact.size_bytes,
                "flavour": artifact.meta.get("flavour"),
                "runner_options": artifact.meta.get("runner_options", {}),
                "latency_ms": deployed.to_json() if deployed else None,
                "reference_latency_ms": reference_latency.to_json() if reference_latency else None}


def _well_formed(record: dict[str, Any]) -> bool:
    """A stage record has the fields a cache hit reads, with the right types (else it is rebuilt)."""
    strings = ("artifact", "sha256", "format", "precision", "backend")
    dicts = ("details", "graph", "latency_ms")
    return (all(isinstance(record.get(k), str) for k in strings) and all(isinstance(record.get(k), dict) for k in dicts)
            and isinstance(record.get("seconds"), (int, float)) and isinstance(record.get("meta", {}), dict)
            and isinstance(record.get("accuracy"), (dict, type(None))))


def _mark_not_run(report: RunReport, reason: str) -> None:
    for s in report.stages:
        if s.status == "pending":
            s.status, s.reason = "not-run", reason


def _model_error_line(exc: Exception) -> str:
    """The line of a model's exception that says what went wrong (TorchScript puts it last)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()] or [type(exc).__name__]
    line = lines[-1] if lines[0].startswith("The following operation failed in the TorchScript") else lines[0]
    return line.removeprefix("RuntimeError: ")[:300]


def _error_json(exc: OptcliError, stage: str | None) -> dict[str, Any]:
    out = {"type": type(exc).__name__, "message": exc.message, "hint": exc.hint, "exit_code": exc.exit_code,
           "stage": stage}
    if exc.__cause__ is not None:  # a library's failure behind the one-line message: --debug prints it
        out["traceback"] = _traceback_text(exc)
    return out


def _traceback_text(exc: BaseException) -> str:
    """The formatted traceback (with its cause chain), capped so a report stays readable."""
    text = "".join(traceback.format_exception(exc))
    return text if len(text) <= 20000 else "...\n" + text[-20000:]


def _config_file_json(config: CompileConfig) -> dict[str, Any] | None:
    path = config.config_file
    if path is None:
        return None
    return {"path": str(Path(path).resolve()), "sha256": sha256_file(Path(path)) if Path(path).is_file() else None}


def _config_json(config: CompileConfig) -> dict[str, Any]:
    d = dataclasses.asdict(config)
    d["inputs"] = [s.to_json() for s in config.inputs]
    d["out"] = str(config.out_dir())
    return json.loads(json.dumps(d, default=str))

