"""The Python API. The CLI only builds configs and calls these functions."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from optcli.config import CompileConfig
from optcli.errors import OptcliError, UsageError
from optcli.pipeline import Event, Pipeline
from optcli.report import ErrorRecord, RunReport
from optcli.tensor_spec import parse_input_spec

if TYPE_CHECKING:
    from collections.abc import Mapping

    from optcli.batching import BatchedRunner
    from optcli.benchmark.sweep import BenchResult
    from optcli.comparison.result import CompareResult
    from optcli.deploy import TritonExport, TritonOptions
    from optcli.length_buckets import LengthBucketedRunner
    from optcli.profiling.result import ProfileResult
    from optcli.quantize.debug_int8 import SensitivityReport
    from optcli.runtime.base import Runner
    from optcli.serve.server import TritonServer


def compile(model: str | Path | CompileConfig, *, out: str | Path | None = None,
            inputs: list[str] | None = None, target: str = "auto", force: bool = False,
            check: bool = True, on_event: Event | None = None, **options: Any) -> RunReport:
    """Run the compile pipeline and return its report.

    `model` is a path (.onnx, .pt2, TorchScript, file.py:factory) or a ready CompileConfig.
    `options` set fields of the stage configs by name, e.g. `opset=17`, `static_batch=True`.
    With `check=True` a failed run raises its OptcliError (the report is on `.report`).
    """
    if isinstance(model, CompileConfig):
        config = model
    else:
        config = CompileConfig(model=str(model), out=Path(out) if out else None,
                               inputs=[parse_input_spec(s) for s in inputs or []], target=target, force=force)
        apply_options(config, options)
    report = Pipeline(config, on_event=on_event).run()
    if check and report.status != "ok":
        exc = _error_from_report(report.error or ErrorRecord(message="the run failed"))
        exc.report = report  # type: ignore[attr-defined]
        raise exc
    return report


def apply_options(config: CompileConfig, options: Mapping[str, object]) -> None:
    """Set `name=value` through set_option: a field name of a section (opset=17), "section.field" spelt
    with a dict (tensorrt={"workspace": "4G"}), an alias (backend="openvino"), and a few switches."""
    from optcli.config import SECTIONS, set_option

    for key, value in options.items():
        if key in ("bench", "simplify", "fuse") and isinstance(value, bool):  # bench=False: no latency
            set_option(config, f"{key}.enabled", value)
        elif key in ("fp16", "int8", "bf16"):  # compile(model, int8=True, calib="data/")
            if value:
                set_option(config, "precision", key)
        elif key == "unpad" and isinstance(value, bool):  # compile(model, unpad=False)
            set_option(config, "unpad.enabled", value)
        elif key in SECTIONS and isinstance(value, dict):
            for name, item in value.items():
                set_option(config, f"{key}.{name}", item)
        else:
            set_option(config, key, value)


def _error_from_report(err: ErrorRecord) -> OptcliError:
    import optcli.errors as errors

    cls = getattr(errors, err.type, None)
    if not (isinstance(cls, type) and issubclass(cls, OptcliError)) or cls is errors.MissingDependencyError:
        cls = errors.StageError
    exc = cls(err.message or "the run failed", hint=err.hint)
    exc.exit_code = int(err.exit_code)  # e.g. 4 for a missing dependency
    return exc


def export_triton(source: str | Path | RunReport, repo: str | Path, options: TritonOptions | None = None, *,
                  name: str | None = None, version: int | None = None, force: bool = False, replace: bool = False,
                  **keywords: Any) -> TritonExport:
    """Write a ready Triton model repository entry (`<repo>/<name>/config.pbtxt`, `<version>/model.*`,
    README.md) for a run's report.json, an .onnx file or an .engine/.plan with its metadata.

    `options` is an optcli.deploy.TritonOptions (batching, instances, kind, backend, ...; docs/deploy.md).
    Its fields may instead be given as keywords (`max_batch_size=32`), with `dynamic_batching` also as the
    CLI's text (`"preferred=8,16,32"`) and `inputs` as `NAME:SHAPE` strings. Versions of a different model
    already under `name` are refused unless `replace` (which removes them).
    Returns a TritonExport; raises UsageError (exit code 2) for impossible settings.
    """
    from optcli.deploy import export_triton as write_repository

    if isinstance(source, RunReport):
        source = Path(str(source.config["out"])) / "report.json"
    if options is not None and keywords:
        raise UsageError(f"export_triton got both options and {sorted(keywords)[0]}=",
                         hint="set every field on the TritonOptions")
    opts = options if options is not None else triton_options(**keywords)
    return write_repository(source, repo, opts, name=name, version=version, force=force, replace=replace)


def triton_options(**keywords: Any) -> TritonOptions:
    """TritonOptions from keywords: its field names; `dynamic_batching` may be the CLI's text
    (`on`, `off`, `preferred=8,16,32`) and `inputs` `NAME:SHAPE` strings."""
    import dataclasses

    from optcli.deploy import TritonOptions, parse_dynamic_batching

    known = {f.name for f in dataclasses.fields(TritonOptions)}
    unknown = sorted(set(keywords) - known)
    if unknown:
        raise UsageError(f"unknown Triton option {unknown[0]!r}", hint=f"options: {', '.join(sorted(known))}")
    values = dict(keywords)
    if isinstance(values.get("dynamic_batching"), str):
        values["dynamic_batching"], parsed = parse_dynamic_batching(values["dynamic_batching"])
        values["preferred_batch_sizes"] = list(values.get("preferred_batch_sizes") or parsed)
    if values.get("preferred_batch_sizes") is None:
        values.pop("preferred_batch_sizes", None)
    values["inputs"] = [parse_input_spec(s) if isinstance(s, str) else s for s in values.get("inputs") or []]
    return TritonOptions(**values)


def load(path: str | Path, *, concurrency: int | str = 1, device: str | None = None, batching: Any = None,
         length_buckets: Any = None, **options: Any) -> Runner | LengthBucketedRunner | BatchedRunner:
    """Open any artifact for inference: a report.json (its final artifact), an optcli output folder,
    .onnx, .engine, .pt2 or TorchScript (`inputs=["x:1x3x224x224"]`, which records no shapes).

    Returns a Runner: `predict(inputs)`, `predict_async(inputs)` -> Future, `close()`, and a context
    manager. `concurrency=N` keeps N sessions/contexts so N calls run at once; `device` is "cpu" or
    "cuda" where the backend has it; other options go to the backend's runner (e.g. `threads`,
    `optimization` for onnxruntime). `batching` (True, or a dict of Triton's dynamic_batching names:
    max_batch_size, max_queue_delay_microseconds, preferred_batch_size) gathers concurrent calls into
    one batch (optcli/batching.py); refused for a fixed-batch artifact. With batching,
    `concurrency="adaptive"` keeps one single-threaded session per core, among which a gathered batch's
    calls are shared, and one session with every core for a request that runs alone (docs/serve.md).
    `length_buckets` (True, a bucket size, or {"bucket": 16, "max_groups": 4}) runs a padded batch as
    sub-batches of rows of similar valid length (optcli/length_buckets.py): for artifacts compiled with
    the unpad stage.
    """
    from optcli.loaded_model import resolve_artifact

    policy = None
    if batching is not None and batching is not False:
        from optcli.batching import batching_options

        policy = batching_options(batching)  # bad options fail before the model loads
    from optcli.session_layout import check_layout, open_layout

    check_layout(concurrency, policy is not None, options.get("threads"))
    buckets = None
    if length_buckets is not None and length_buckets is not False:
        from optcli.length_buckets import bucket_options

        buckets = bucket_options(length_buckets)
    runner: Runner | LengthBucketedRunner
    wide: Runner | LengthBucketedRunner | None
    runner, wide = open_layout(resolve_artifact(path), concurrency, device=device, **options)
    if buckets is not None:
        from optcli.length_buckets import LengthBucketedRunner

        runner = LengthBucketedRunner(runner, buckets)  # under batching: a gathered batch splits by length
        wide = LengthBucketedRunner(wide, buckets) if wide is not None else None
    if policy is None:
        return runner
    from optcli.batching import BatchedRunner

    return BatchedRunner(runner, policy, wide)


def bench(artifact: str | Path, *, batch: int | list[int] = 1, concurrency: int | list[int] = 1,
          baseline: str | Path | None = None, max_regression: str | float = "10%", regression_metric: str = "p50",
          save_baseline: str | Path | None = None, check: bool = True, **settings: Any) -> BenchResult:
    """Measure latency and throughput over batch x concurrency; returns a BenchResult (`to_json()`).

    `settings` are BenchSettings fields (warmup_runs, warmup_seconds, runs, min_seconds, max_seconds,
    latency_budget_ms, threads, device, inputs_dir, pins). With `baseline`, each point is compared
    against that file and, when `check`, a rise of `regression_metric` (p50, or a fall of
    throughput) beyond `max_regression` raises RegressionError (the result is on `.result`);
    `save_baseline` writes the result as a new baseline.
    """
    from optcli.benchmark.baseline import compare_to_baseline, load_baseline, parse_bound, regression_error
    from optcli.benchmark.baseline import save_baseline as write_baseline
    from optcli.benchmark.sweep import BenchSettings, run_sweep
    from optcli.errors import UsageError
    from optcli.loaded_model import resolve_artifact

    known = {f for f in BenchSettings.__dataclass_fields__} - {"batches", "concurrency"}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise UsageError(f"unknown bench option {unknown[0]!r}", hint=f"options: {', '.join(sorted(known))}")
    if settings.get("inputs_dir") is not None:
        settings["inputs_dir"] = Path(settings["inputs_dir"])
    bound = parse_bound(max_regression)
    base = load_baseline(Path(baseline)) if baseline is not None else None  # fail before measuring
    resolved = resolve_artifact(artifact)
    result = run_sweep(resolved, BenchSettings(batches=[batch] if isinstance(batch, int) else list(batch),
                                               concurrency=[concurrency] if isinstance(concurrency, int)
                                               else list(concurrency), **settings))
    if save_baseline is not None:
        write_baseline(result, Path(save_baseline))
    if base is not None:
        result.regression = compare_to_baseline(result, base, bound, regression_metric)
        if check and result.regression["regressed"]:
            exc = regression_error(result.regression, baseline or "the baseline")
            exc.result = result  # type: ignore[attr-defined]
            raise exc
    return result


def debug_int8(model: str | Path, calib: str | Path, **options: Any) -> SensitivityReport:
    """Per-layer INT8 sensitivity of an ONNX model, most damaging first, in module names
    (optcli/quantize/debug_int8.py); nothing else is built."""
    from optcli.quantize.debug_int8 import sensitivity_report

    return sensitivity_report(model, calib, **options)


def profile(artifact: str | Path, *, batch: int = 1, runs: int = 100, warmup: int = 10,
            optimization: str = "all", threads: int | None = None, inputs_dir: str | Path | None = None,
            pins: list[str] | None = None) -> ProfileResult:
    """Per-layer time of an artifact with its backend's profiler (onnxruntime's for .onnx, TensorRT's layer
    profiler for .engine); returns a ProfileResult (`top(n)`, `by_op_type()`, `to_json()`)."""
    import inspect

    from optcli.backends.registry import all_backends, for_format, load_object
    from optcli.errors import UsageError
    from optcli.loaded_model import resolve_artifact
    from optcli.runtime.thread_limit import check_threads

    check_threads(threads, "threads")  # the profilers open their runners themselves
    resolved = resolve_artifact(artifact)
    backend = for_format(resolved.format)
    if backend.profiler is None:
        kinds = [f"{b.label} ({b.suffixes[0]})" for b in all_backends() if b.profiler]
        kinds_text = ", ".join(kinds[:-1]) + f" or {kinds[-1]}" if len(kinds) > 1 else kinds[0]
        raise UsageError(f"per-layer profiles need an artifact of {kinds_text}, not a {backend.label} "
                         f"{resolved.format} file",
                         hint="compile the model first (optcli compile) and profile its report.json")
    profiler = load_object(backend.profiler)
    settings = {"batch": batch, "runs": runs, "warmup": warmup, "optimization": optimization, "threads": threads,
                "inputs_dir": Path(inputs_dir) if inputs_dir is not None else None, "pins": pins}
    accepted = inspect.signature(profiler).parameters
    result: ProfileResult = profiler(resolved, **{k: v for k, v in settings.items() if k in accepted})
    return result


def compare(model: str | Path, variants: str | list[str] = "fp32,fp16,int8", *, define: list[str] | None = None,
            out: str | Path | None = None, inputs: list[str] | None = None, target: str = "auto",
            calib: str | Path | None = None, eval_dir: str | Path | None = None,
            tolerance: str | dict[str, float] | None = None, force: bool = False, check: bool = True,
            on_event: Event | None = None, **measure: Any) -> CompareResult:
    """Build each variant through the pipeline, measure all in one interleaved run and recommend the
    fastest within `tolerance` (e.g. "cosine=0.99"); writes compare.json and compare.md into `out`.

    `variants` are precisions or names defined in `define` ("nofuse:fuse.enabled=false"). With
    `check`, no variant within tolerance raises AccuracyError (the result is on `.result`).
    `measure` are InterleaveSettings fields (runs, min_seconds, max_seconds, ...).
    """
    from optcli.comparison.interleave import InterleaveSettings
    from optcli.comparison.variants import parse_variants
    from optcli.comparison.workflow import run_compare
    from optcli.errors import AccuracyError, StageError, UsageError
    from optcli.quantize.tolerance import parse_tolerance

    tol = parse_tolerance([tolerance]) if isinstance(tolerance, str) else tolerance
    known = set(InterleaveSettings.__dataclass_fields__)
    if set(measure) - known:
        raise UsageError(f"unknown compare option {sorted(set(measure) - known)[0]!r}",
                         hint=f"options: {', '.join(sorted(known))}")
    result = run_compare(str(model), parse_variants(variants, define), out=Path(out) if out else None,
                         inputs=[parse_input_spec(s) for s in inputs or []], target=target,
                         calib=Path(calib) if calib else None, eval_dir=Path(eval_dir) if eval_dir else None,
                         tolerance=tol, force=force, measure=InterleaveSettings(**measure), on_event=on_event)
    if check and result.recommended is None:
        if not result.measured():
            first = result.variants[0].error or ErrorRecord(message="?")
            exc: OptcliError = StageError(f"no variant could be built: {first.message}",
                                          hint=first.hint or "see compare.md for each variant's error")
        else:
            exc = AccuracyError(f"no variant meets the tolerance ({result.reason})",
                                hint="loosen --tolerance, add --calib data for int8, or exclude sensitive nodes")
        exc.result = result  # type: ignore[attr-defined]
        raise exc
    return result


def serve(artifact: str | Path, **options: Any) -> TritonServer:
    """Start a Triton Inference Server (the `serve` extra's bundled binary) serving `artifact` (a
    report.json or its folder, .onnx, OpenVINO .xml, .engine) through Triton's Python backend and
    optcli's runner, with Triton's dynamic batcher; returns the started TritonServer once the model
    is ready (`urls`, `statistics()`, `stop()`; a context manager). `options` are ServeOptions
    fields (name, host, http_port, grpc_port, metrics_port, max_batch_size, max_queue_delay_us,
    preferred_batch_sizes, instances, kind, threads, inputs, startup_timeout_s, verbose, max_request_bytes,
    max_restarts, padding).
    """
    from optcli.serve.server import start_server

    return start_server(artifact, **options)
