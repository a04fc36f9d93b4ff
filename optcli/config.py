"""Typed configuration: one dataclass per stage, a CompileConfig that holds them, and TOML loading.

A TOML file (`optcli.toml`, or `[tool.optcli]` in pyproject.toml) may hold the same keys as the
CLI flags, grouped by table:

    [compile]            target = "cpu", out = "build/resnet", inputs = ["x:1x3x224x224"]
    [export]             opset = 18
    [fuse]               level = "extended"
    [bench]              runs = 200
"""
from __future__ import annotations

import dataclasses
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optcli.errors import UsageError
from optcli.tensor_spec import TensorSpec, parse_input_spec

TARGETS = ("auto", "cpu", "tensorrt")


@dataclass
class ExportConfig:
    opset: int = 18
    static_batch: bool = False
    allow_pickle: bool = False
    exporter: str = "auto"            # auto | dynamo | torchscript
    task: str = "auto"                # a Hugging Face folder's task: auto (from its architectures) | fill-mask | ...


@dataclass
class SimplifyConfig:
    enabled: bool = True


@dataclass
class FuseConfig:
    enabled: bool = True
    level: str = "extended"           # basic (plain ONNX ops) | extended (adds com.microsoft fused ops)
    transformer: str = "auto"         # auto | on | off: onnxruntime's transformer fusions for encoders


@dataclass
class BenchConfig:
    """How latency is measured around each stage."""

    enabled: bool = True
    warmup_runs: int = 5
    warmup_seconds: float = 0.2
    runs: int = 50
    min_seconds: float = 0.5
    max_seconds: float = 5.0
    batch: int = 1
    threads: int | None = None        # intra-op threads; None = the machine's cores


@dataclass
class AccuracyConfig:
    """The accuracy check against the FP32 reference, and its gate (quantize stages gate on it)."""

    batch: int = 2
    cosine: float | None = None       # minimum cosine similarity per output
    max_abs: float | None = None      # maximum absolute error per output
    top1: float | None = None         # minimum top-1 agreement with the reference


@dataclass
class QuantizeConfig:
    """Precision of the compiled graph; FP16 casts and INT8 Q/DQ live in the ONNX (TensorRT 10+/11 style)."""

    precision: str = "fp32"           # fp32 | fp16 | int8 | bf16
    calib: Path | None = None         # calibration data folder (int8)
    calib_reader: str | None = None   # npz | npy | images | entry-point name | path/file.py:Class
    calib_options: dict[str, str] = field(default_factory=dict)
    calib_samples: int | None = None  # cap on calibration samples
    calib_method: str = "minmax"      # minmax | entropy | percentile
    eval: Path | None = None          # held-out data for the accuracy gate (else unused calib samples)
    exclude_nodes: list[str] = field(default_factory=list)
    exclude_ops: list[str] = field(default_factory=list)
    fallback: bool = True             # exclude sensitive nodes automatically when the gate fails
    fallback_budget: float = 300.0    # seconds the INT8 fallback search may take
    flavour: str = "auto"             # auto | qdq (TensorRT-ready Q/DQ) | dynamic (ORT CPU, transformers)


PRECISIONS = ("fp32", "fp16", "int8", "bf16")


@dataclass
class CompileConfig:
    """Everything `optcli compile` needs; the CLI and the API both build one of these."""

    model: str
    out: Path | None = None
    inputs: list[TensorSpec] = field(default_factory=list)
    target: str = "auto"
    force: bool = False
    time_budget: float | None = None  # seconds for the whole compile: the CPU search stops at the best so far
    export: ExportConfig = field(default_factory=ExportConfig)
    simplify: SimplifyConfig = field(default_factory=SimplifyConfig)
    fuse: FuseConfig = field(default_factory=FuseConfig)
    bench: BenchConfig = field(default_factory=BenchConfig)
    accuracy: AccuracyConfig = field(default_factory=AccuracyConfig)
    quantize: QuantizeConfig = field(default_factory=QuantizeConfig)
    # Sections for stages added later (quantize, build, deploy) live here by stage name, typed by
    # the stage module itself, so adding a stage does not change this file.
    extra: dict[str, Any] = field(default_factory=dict)
    config_file: Path | None = None   # the TOML file the settings came from, recorded in the report

    def out_dir(self) -> Path:
        if self.out is not None:
            return Path(self.out)
        return Path("optcli-out") / model_stem(self.model)

    def to_json(self) -> dict[str, Any]:
        """The effective configuration as JSON (report.json `config`): enough to reproduce the run."""
        import json

        d = dataclasses.asdict(self)
        d["inputs"] = [s.to_json() for s in self.inputs]
        d["out"] = str(self.out_dir())
        return json.loads(json.dumps(d, default=str))

    def config_file_record(self) -> dict[str, Any] | None:
        """{path, sha256} of the config file the settings came from (report.json `config_file`)."""
        if self.config_file is None:
            return None
        from optcli.artifact import sha256_file

        path = Path(self.config_file)
        return {"path": str(path.resolve()), "sha256": sha256_file(path) if path.is_file() else None}

    def validate(self) -> None:
        if self.target not in TARGETS:
            raise UsageError(f"unknown target {self.target!r}", hint=f"use one of: {', '.join(TARGETS)}")
        if self.export.opset < 17:
            raise UsageError(f"opset {self.export.opset} is too old", hint="optcli exports opset 17 or newer (default 18)")
        if self.fuse.level not in ("basic", "extended"):
            raise UsageError(f"unknown fuse level {self.fuse.level!r}",
                             hint="use basic or extended (the all level writes CPU-specific layouts)")
        from optcli.hf_folder import TASKS

        if self.export.task != "auto" and self.export.task not in TASKS:
            raise UsageError(f"unknown task {self.export.task!r}", hint=f"use auto or one of: {', '.join(TASKS)}")
        if self.export.exporter not in ("auto", "dynamo", "torchscript"):
            raise UsageError(f"unknown exporter {self.export.exporter!r}", hint="use auto, dynamo or torchscript")
        if self.quantize.precision not in PRECISIONS:
            raise UsageError(f"unknown precision {self.quantize.precision!r}", hint=f"use one of: {', '.join(PRECISIONS)}")
        if self.quantize.precision == "int8" and self.quantize.calib is None:
            raise UsageError("--int8 needs calibration data", hint="pass --calib DIR (a folder of .npz files, keys = input names)")
        if self.time_budget is not None and not (isinstance(self.time_budget, (int, float)) and self.time_budget > 0):
            raise UsageError(f"time budget {self.time_budget!r} must be a positive number of seconds",
                             hint="e.g. --time-budget 60")
        if self.bench.batch < 1 or self.accuracy.batch < 1:
            raise UsageError("batch sizes must be >= 1", hint="e.g. [bench] batch = 1")
        from optcli.quantize.tolerance import check_bounds

        for key in ("cosine", "max_abs", "top1"):
            value = getattr(self.accuracy, key)
            if value is not None:
                check_bounds(key, value, f"[accuracy] {key.replace('_', '-')} = {value!r}")


def model_stem(model: str) -> str:
    """A folder-friendly model name: `path/resnet.pt2` -> `resnet`, `f.py:make_net` -> `f-make_net`.
    Only letters, digits, `_`, `-` and inner dots survive, so a name like `...onnx` (stem `..`) cannot
    turn the default output folder into the working folder or its parent."""
    if ".py:" in model:
        path, func = model.rsplit(":", 1)
        name = f"{Path(path).stem}-{func}"
    else:
        name = Path(model).stem
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip(".") or "model"


def _fill(cls: type, values: dict[str, Any], where: str) -> Any:
    names = {f.name: f for f in dataclasses.fields(cls)}
    values = {k.replace("-", "_"): v for k, v in values.items()}  # static-batch = static_batch
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise UsageError(f"unknown key {unknown[0]!r} in [{where}]", hint=f"known keys: {', '.join(sorted(names))}")
    return cls(**values)


def load_toml(path: Path) -> dict[str, Any]:
    """Read an optcli TOML file (or the [tool.optcli] table of a pyproject.toml)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"config file not found: {path}", hint="pass an existing optcli.toml") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"config file {path} is not valid TOML: {exc}", hint="check the line it names") from None
    if path.name == "pyproject.toml":
        data = data.get("tool", {}).get("optcli", {})
    return data


def code_running_settings(config: CompileConfig) -> dict[str, str]:
    """The settings of a config read from a file that would make optcli run code (a reader plugin by
    path or entry point, unpickling a module), as {field: the setting as written}. A config file never
    turns these on by itself: the command line (or --trust-config) must (docs/security.md)."""
    from optcli.calibration.builtin_readers import BUILTIN

    found: dict[str, str] = {}
    reader = config.quantize.calib_reader
    if reader is not None and reader not in BUILTIN:
        found["calib_reader"] = f"[quantize] calib-reader = {reader!r}"
    if config.export.allow_pickle:
        found["allow_pickle"] = "[export] allow-pickle = true"
    return found


def compile_config_from_dict(model: str, data: dict[str, Any]) -> CompileConfig:
    """Build a CompileConfig from a TOML-shaped dict (tables: compile, export, simplify, fuse, bench,
    accuracy, quantize)."""
    data = {k.replace("-", "_"): v for k, v in data.items()}
    top = dict(data.pop("compile", {}))
    top = {k.replace("-", "_"): v for k, v in top.items()}
    cfg = CompileConfig(model=model)
    for key in ("out", "target", "force", "time_budget"):
        if key in top:
            setattr(cfg, key, Path(top.pop(key)) if key == "out" else top.pop(key))
    if "inputs" in top:
        cfg.inputs = [parse_input_spec(s) for s in top.pop("inputs")]
    if top:  # nothing reads other [compile] keys: a typo must not pass silently
        raise UsageError(f"unknown key {sorted(top)[0]!r} in [compile]", hint="known keys: force, inputs, out, target, time-budget")
    for section, cls in (("export", ExportConfig), ("simplify", SimplifyConfig), ("fuse", FuseConfig),
                         ("bench", BenchConfig), ("accuracy", AccuracyConfig), ("quantize", QuantizeConfig)):
        if section in data:
            setattr(cfg, section, _fill(cls, data.pop(section), section))
    cfg.extra.update(data)  # sections owned by later stages, checked by them
    return cfg
