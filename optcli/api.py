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
    return cls(err.get("message", "the run failed"), hint=err.get("hint"))
