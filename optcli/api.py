"""The Python API. The CLI only builds configs and calls these functions."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from optcli.config import CompileConfig
from optcli.errors import OptcliError
from optcli.pipeline import Event, Pipeline
from optcli.report import RunReport
from optcli.tensor_spec import parse_input_spec


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
        err = report.error or {}
        exc = _error_from_report(err)
        exc.report = report  # type: ignore[attr-defined]
        raise exc
    return report


def apply_options(config: CompileConfig, options: dict[str, Any]) -> None:
    """Set `name=value` on whichever stage config has a field of that name."""
    from optcli.errors import UsageError

    sections = [config.export, config.simplify, config.fuse, config.bench, config.accuracy, config.quantize]
    for key, value in options.items():
        if key in ("bench", "simplify", "fuse") and isinstance(value, bool):  # bench=False: no latency
            getattr(config, key).enabled = value
            continue
        if key in ("fp16", "int8", "bf16"):  # compile(model, int8=True, calib="data/")
            if value:
                config.quantize.precision = key
            continue
        if key == "backend":  # compile(model, backend="openvino"): the build-cpu stage's [cpu] section
            config.extra.setdefault("cpu", {})["backend"] = value
            continue
        if key in ("calib", "eval") and value is not None:
            value = Path(value)
        for section in sections:
            if hasattr(section, key):
                setattr(section, key, value)
                break
        else:
            if isinstance(value, dict):
                config.extra.setdefault(key, {}).update(value)
            else:
                raise UsageError(f"unknown compile option {key!r}")


def _error_from_report(err: dict[str, Any]) -> OptcliError:
    from optcli import errors

    cls = getattr(errors, err.get("type", ""), None)
    if not (isinstance(cls, type) and issubclass(cls, OptcliError)) or cls is errors.MissingDependencyError:
        cls = errors.StageError
    exc = cls(err.get("message", "the run failed"), hint=err.get("hint"))
    exc.exit_code = int(err.get("exit_code", exc.exit_code))  # e.g. 4 for a missing dependency
    return exc


def export_triton(source: str | Path | RunReport, repo: str | Path, *, name: str | None = None,
                  version: int | None = None, force: bool = False, max_batch_size: int | None = None,
                  dynamic_batching: bool | str | None = None, preferred_batch_sizes: list[int] | None = None,
                  max_queue_delay_us: int | None = None, preserve_ordering: bool = False, instances: int = 1,
                  kind: str | None = None, graph_level: str | None = None, intra_op_threads: int | None = None,
                  ort_tensorrt: bool = False, warmup: bool = True, inputs: list[str] | None = None) -> Any:
    """Write a ready Triton model repository entry (`<repo>/<name>/config.pbtxt`, `<version>/model.*`,
    README.md) for a run's report.json, an .onnx file or an .engine/.plan with its metadata.

    `dynamic_batching` is True/False or the CLI's text (`preferred=8,16,32`); None turns it on when the
    model batches. `inputs` are `NAME:SHAPE` pins that size warm-up and perf_analyzer shapes.
    Returns an optcli.deploy.TritonExport; raises UsageError (exit code 2) for impossible settings.
    """
    from optcli.deploy import TritonOptions, parse_dynamic_batching
    from optcli.deploy import export_triton as write_repository

    if isinstance(source, RunReport):
        source = Path(source.config["out"]) / "report.json"
    preferred = list(preferred_batch_sizes or [])
    if isinstance(dynamic_batching, str):
        dynamic_batching, parsed = parse_dynamic_batching(dynamic_batching)
        preferred = preferred or parsed
    options = TritonOptions(max_batch_size=max_batch_size, dynamic_batching=dynamic_batching,
                            preferred_batch_sizes=preferred, max_queue_delay_us=max_queue_delay_us,
                            preserve_ordering=preserve_ordering, instances=instances, kind=kind,
                            graph_level=graph_level, intra_op_threads=intra_op_threads, ort_tensorrt=ort_tensorrt,
                            warmup=warmup, inputs=[parse_input_spec(s) for s in inputs or []])
    return write_repository(source, repo, options, name=name, version=version, force=force)
