"""Typed configuration: one dataclass per section, a CompileConfig that holds them, the one registry of
sections (SECTIONS), the one way to set a value (`set_option("section.field", value)`), and TOML loading.

A TOML file (`optcli.toml`, or `[tool.optcli]` in pyproject.toml) may hold the same keys as the
CLI flags, grouped by table:

    [compile]            target = "cpu", out = "build/resnet", inputs = ["x:1x3x224x224"]
    [export]             opset = 18
    [fuse]               level = "extended"
    [bench]              runs = 200
    [cpu]                backend = "openvino"        (the CPU build's: optcli/cpu/options.py)
    [tensorrt]           workspace = "4G"            (the engine build's: optcli/backends/tensorrt/options.py)

TOML tables, CLI flags, `optcli.compile(**options)` keywords and `optcli compare --variant` strings all
go through set_option. A running pipeline freezes its copy of the config: changing it then is an error.
"""
from __future__ import annotations

import copy
import dataclasses
import importlib
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optcli.errors import UsageError
from optcli.tensor_spec import TensorSpec, parse_input_spec


def _targets() -> tuple[str, ...]:
    from optcli.backends.registry import targets

    return (AUTO, CPU, *sorted(targets()))


# The targets that are optcli's own: `auto` (resolved before any stage: a backend's target where its check passes,
# else cpu) and `cpu` (the build stage's CPU search among every CPU backend). Compare with these, never a string.
AUTO, CPU = "auto", "cpu"
# auto, cpu, then each backend's own (tensorrt, tensorrt-rtx): the registry names them.
TARGETS = _targets()


class Freezable:
    """A dataclass whose attributes cannot be set once frozen (CompileConfig.freeze)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if self.__dict__.get("_frozen"):
            raise UsageError(f"the compile config is frozen once a run starts (setting {name!r})",
                             hint="change a copy (config.copy()) before starting the run")
        super().__setattr__(name, value)

    def _set_frozen(self, frozen: bool) -> None:
        object.__setattr__(self, "_frozen", frozen)


@dataclass
class ExportConfig(Freezable):
    opset: int = 18
    static_batch: bool = False
    allow_pickle: bool = False
    exporter: str = "auto"            # auto | dynamo | torchscript
    task: str = "auto"                # a Hugging Face folder's task: auto (from its architectures) | fill-mask | ...


@dataclass
class SimplifyConfig(Freezable):
    enabled: bool = True


@dataclass
class FuseConfig(Freezable):
    enabled: bool = True
    level: str = "extended"           # basic (plain ONNX ops) | extended (adds com.microsoft fused ops)
    transformer: str = "auto"         # auto | on | off: onnxruntime's transformer fusions for encoders


@dataclass
class BenchConfig(Freezable):
    """How latency is measured around each stage."""

    enabled: bool = True
    warmup_runs: int = 5
    warmup_seconds: float = 0.2
    runs: int = 50
    min_seconds: float = 0.5
    max_seconds: float = 5.0
    # A full measurement (the final artifact, its baseline) also stops, from 20 calls and min_seconds on,
    # once its median's 95% interval is within +-settle of it: 50 calls of a 65 ms model were 3 of a
    # BERT-base compile's 38 s for a figure known to +-1% after 20 (issue 16). 0: always `runs` calls.
    settle: float = 0.01
    batch: int = 1
    threads: int | None = None        # intra-op threads; None = the machine's cores


@dataclass
class AccuracyConfig(Freezable):
    """The accuracy check against the FP32 reference, and its gate (quantize stages gate on it)."""

    batch: int = 2
    cosine: float | None = None       # minimum cosine similarity per output
    max_abs: float | None = None      # maximum absolute error per output
    top1: float | None = None         # minimum top-1 agreement with the reference


@dataclass
class QuantizeConfig(Freezable):
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
    # INT8 on the CPU: ship the FP32 graph where INT8 is not faster or no INT8 candidate meets the tolerance
    allow_float: bool = False


PRECISIONS = ("fp32", "fp16", "int8", "bf16")


@dataclass
class CompileConfig(Freezable):
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
    # The sections a stage owns (SECTIONS names them: [cpu], [tensorrt]), as given (a dict) or typed by
    # the stage's own parser; set_option checks their keys against the section's dataclass.
    extra: dict[str, object] = field(default_factory=dict)
    config_file: Path | None = None   # the TOML file the settings came from, recorded in the report

    def freeze(self) -> None:
        """Refuse every later change to this config and its sections (a running pipeline's)."""
        for obj in (self, *(getattr(self, n) for n in core_sections())):
            obj._set_frozen(True)

    def copy(self) -> CompileConfig:
        """A deep copy that can be changed (a frozen config's copy is not frozen)."""
        dup = copy.deepcopy(self)
        for obj in (dup, *(getattr(dup, n) for n in core_sections())):
            obj._set_frozen(False)
        return dup

    def section(self, name: str) -> Any:
        """The section `name` of this config: a core section's dataclass, or a stage's as stored in extra."""
        return getattr(self, name) if name in core_sections() else self.extra.get(name)

    def out_dir(self) -> Path:
        if self.out is not None:
            return Path(self.out)
        return Path("optcli-out") / model_stem(self.model)

    def to_json(self) -> dict[str, object]:
        """The effective configuration as JSON (report.json `config`): enough to reproduce the run."""
        import json

        d = dataclasses.asdict(self)
        d["inputs"] = [s.to_json() for s in self.inputs]
        d["out"] = str(self.out_dir())
        return json.loads(json.dumps(d, default=str))

    def config_file_record(self) -> dict[str, str | None] | None:
        """{path, sha256 (None: the file is gone)} of the config file the settings came from (report.json
        `config_file`, optcli/report/records.py ConfigFileRecord)."""
        if self.config_file is None:
            return None
        from optcli.artifact import sha256_file

        path = Path(self.config_file)
        return {"path": str(path.resolve()), "sha256": sha256_file(path) if path.is_file() else None}

    def validate(self) -> None:
        if self.target not in TARGETS:
            raise UsageError(f"unknown target {self.target!r}", hint=f"use one of: {', '.join(TARGETS)}")
        if self.export.opset < 17:
            raise UsageError(f"opset {self.export.opset} is too old",
                             hint="optcli exports opset 17 or newer (default 18)")
        if self.fuse.level not in ("basic", "extended"):
            raise UsageError(f"unknown fuse level {self.fuse.level!r}",
                             hint="use basic or extended (the all level writes CPU-specific layouts)")
        from optcli.hf_folder import TASKS

        if self.export.task != "auto" and self.export.task not in TASKS:
            raise UsageError(f"unknown task {self.export.task!r}", hint=f"use auto or one of: {', '.join(TASKS)}")
        if self.export.exporter not in ("auto", "dynamo", "torchscript"):
            raise UsageError(f"unknown exporter {self.export.exporter!r}", hint="use auto, dynamo or torchscript")
        if self.quantize.precision not in PRECISIONS:
            raise UsageError(f"unknown precision {self.quantize.precision!r}",
                             hint=f"use one of: {', '.join(PRECISIONS)}")
        if self.quantize.allow_float and self.quantize.precision != "int8":
            raise UsageError("--allow-float goes with --int8 (it lets the CPU build ship FP32 instead of INT8)",
                             hint="add --int8 --calib DIR, or drop --allow-float")
        if self.quantize.precision == "int8" and self.quantize.calib is None:
            raise UsageError("--int8 needs calibration data",
                             hint="pass --calib DIR (a folder of .npz files, keys = input names)")
        if self.time_budget is not None and not (isinstance(self.time_budget, (int, float)) and self.time_budget > 0):
            raise UsageError(f"time budget {self.time_budget!r} must be a positive number of seconds",
                             hint="e.g. --time-budget 60")
        if not (isinstance(self.bench.settle, (int, float)) and 0 <= self.bench.settle < 1):
            raise UsageError(f"bench settle {self.bench.settle!r} must be a fraction in [0, 1)",
                             hint="e.g. [bench] settle = 0.01 (+-1%), or 0 to always time `runs` calls")
        from optcli.runtime.thread_limit import check_threads

        check_threads(self.bench.threads, "--threads ([bench] threads)")
        if self.bench.batch < 1 or self.accuracy.batch < 1:
            raise UsageError("batch sizes must be >= 1", hint="e.g. [bench] batch = 1")
        from optcli.quantize.tolerance import check_bounds

        for key in ("cosine", "max_abs", "top1"):
            value = getattr(self.accuracy, key)
            if value is not None:
                check_bounds(key, value, f"[accuracy] {key.replace('_', '-')} = {value!r}")


# Every table of a compile config, written once: TOML tables, `section.field` keys, API keywords and
# --variant options resolve through it. A core section is an attribute of CompileConfig; a section a
# stage owns is named by "module:Class", imported when first used, and kept in CompileConfig.extra.
SECTIONS: dict[str, type | str] = {
    "export": ExportConfig,
    "simplify": SimplifyConfig,
    "fuse": FuseConfig,
    "bench": BenchConfig,
    "accuracy": AccuracyConfig,
    "quantize": QuantizeConfig,
    "cpu": "optcli.cpu.options:CpuConfig",
    "tensorrt": "optcli.backends.tensorrt.options:TensorRTConfig",
    "unpad": "optcli.unpad.options:UnpadConfig",
}
# [compile]: the CompileConfig's own fields a config file may set.
TOP_LEVEL = ("force", "inputs", "out", "target", "time_budget")
# Short names: `precision=int8`, `backend=openvino`.
ALIASES = {"precision": "quantize.precision", "backend": "cpu.backend", "search": "cpu.search"}
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


class UnknownOption(UsageError):
    """A key that names no section field (callers that speak for a flag reword it)."""


def core_sections() -> tuple[str, ...]:
    """Sections that are attributes of CompileConfig, in the order a bare field name is looked up."""
    return tuple(n for n, c in SECTIONS.items() if isinstance(c, type))


def known_tables() -> list[str]:
    return ["compile", *SECTIONS]


def section_class(name: str) -> type:
    """The dataclass of section `name` (UsageError naming the known tables)."""
    cls = SECTIONS.get(name)
    if cls is None:
        raise UnknownOption(f"unknown config table [{name}]", hint=f"known tables: {', '.join(known_tables())}")
    if isinstance(cls, str):
        module, _, attr = cls.partition(":")
        cls = getattr(importlib.import_module(module), attr)
    return cls


def _coerce(current: Any, text: str, where: str) -> Any:
    """A text value (from --variant) as the type of the field's current value."""
    if isinstance(current, bool):
        low = text.lower()
        if low not in _TRUE + _FALSE:
            raise UsageError(f"{where}: {text!r} is not true/false")
        return low in _TRUE
    try:
        if isinstance(current, int):
            return int(text)
        if isinstance(current, float):
            return float(text)
    except ValueError:
        raise UsageError(f"{where}: {text!r} is not a number") from None
    if isinstance(current, list):
        return [t for t in text.split("|") if t]
    if isinstance(current, Path) or where.endswith(("calib", "eval")):
        return Path(text)
    if current is None and re.fullmatch(r"-?\d+(\.\d+)?", text):
        return float(text) if "." in text else int(text)
    return text


def set_option(config: CompileConfig, key: str, value: Any, *, text: bool = False, where: str | None = None) -> None:
    """Set one setting of `config`: "section.field" (export.opset, cpu.backend), a [compile] field (target,
    out, force, inputs), an alias (precision, backend), or a bare field name of a core section (opset).
    `text`: `value` is text to convert to the field's type (--variant strings); `where` names the source
    in those conversion errors. Unknown keys raise UnknownOption (a UsageError)."""
    key = ALIASES.get(key, key).replace("-", "_")
    section, dot, name = key.rpartition(".")
    if not dot and name in TOP_LEVEL:
        if name == "inputs":
            value = [parse_input_spec(s) if isinstance(s, str) else s for s in value]
        elif name == "out" and value is not None:
            value = Path(value)
        setattr(config, name, value)
        return
    if not dot:
        section = next((n for n in core_sections() if name in _field_names(section_class(n))), "")
        if not section:
            raise UnknownOption(f"unknown compile option {key!r}")
    names = _field_names(section_class(section))
    if name not in names:
        raise UnknownOption(f"unknown key {name!r} in [{section}]", hint=f"known keys: {', '.join(sorted(names))}")
    if section in core_sections():
        holder = getattr(config, section)
        if text:
            value = _coerce(getattr(holder, name), value, where or key)
        elif name in ("calib", "eval") and isinstance(value, str):
            value = Path(value)
        setattr(holder, name, value)
        return
    # A stage's section stays a dict of what was set (its parser types and checks the values).
    stored: Any = config.extra.get(section)
    is_section = dataclasses.is_dataclass(stored) and not isinstance(stored, type)
    values: dict[str, object] = dict(dataclasses.asdict(stored) if is_section else stored or {})
    if text:
        value = _coerce(values.get(name, getattr(section_class(section)(), name)), value, where or key)
    values[name] = value
    config.extra[section] = values


def stage_section(config: Any, name: str, example: str) -> Any:
    """The validated section `name` a stage owns, typed as its dataclass (defaults where absent): the dict
    that TOML, flags or the API set through set_option, unknown keys refused, `validate()` run."""
    cls = section_class(name)
    raw: Any = config.extra.get(name, {})
    if isinstance(raw, cls):
        section: Any = raw
        section.validate()
        return section
    if not isinstance(raw, dict):
        raise UsageError(f"[{name}] must be a table", hint=f"e.g. [{name}] {example}")
    names = _field_names(cls)
    values = {k.replace("-", "_"): v for k, v in raw.items()}
    unknown = sorted(set(values) - names)
    if unknown:
        raise UsageError(f"unknown key {unknown[0]!r} in [{name}]", hint=f"known keys: {', '.join(sorted(names))}")
    section = cls(**values)
    section.validate()
    return section


def _field_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


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


def load_toml(path: Path) -> dict[str, object]:
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


# What a config file's value must be, by the field's annotation: TOML has its own types, and a value of the
# wrong one ([compile] out = true, inputs = [5]) ended in a TypeError deep in the run (exit 1), or passed
# as something else ([cpu] keep-candidates = "no" is a true string).
_TOML_TYPES: dict[str, tuple[tuple[type, ...], str, str]] = {  # kind: (types, in words, an example)
    "bool": ((bool,), "true or false", "true"), "int": ((int,), "a whole number", "2"),
    "float": ((int, float), "a number", "0.5"), "str": ((str,), "a string", '"auto"'),
    "Path": ((str,), "a path (a string)", '"folder"'), "list[str]": ((list,), "a list of strings", '["a", "b"]'),
    "list[TensorSpec]": ((list,), "a list of strings", '["x:1x3x224x224"]'),
    "dict[str, str]": ((dict,), "a table of strings", '{ key = "value" }')}


def check_value_type(cls: type, name: str, value: Any, where: str) -> None:
    """Refuse (exit 2) a config file's value whose TOML type is not field `name`'s of section `cls`.
    Fields of other annotations are left to their section's parser."""
    import json

    annotation = next((f.type for f in dataclasses.fields(cls) if f.name == name), None)
    kind = annotation.removesuffix(" | None") if isinstance(annotation, str) else None
    if kind is None or kind not in _TOML_TYPES or (value is None and str(annotation).endswith("| None")):
        return
    types, words, example = _TOML_TYPES[kind]
    ok = isinstance(value, types) and not (isinstance(value, bool) and kind != "bool")
    if ok and kind.startswith("list["):
        ok = all(isinstance(v, str) for v in value)
    if ok and kind.startswith("dict["):
        ok = all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
    if not ok:
        raise UsageError(f"{where} = {json.dumps(value, default=str)[:80]} must be {words}",
                         hint=f"e.g. {where} = {example}")


def compile_config_from_dict(model: str, data: Mapping[str, object]) -> CompileConfig:
    """Build a CompileConfig from a TOML-shaped dict: [compile] and every table of SECTIONS, each key
    through set_option."""
    cfg = CompileConfig(model=model)
    for table, values in data.items():
        table = table.replace("-", "_")
        if table != "compile":
            section_class(table)  # an unknown table is refused before its keys
        if not isinstance(values, dict):
            raise UsageError(f"[{table}] must be a table", hint=f"e.g. [{table}] with key = value lines")
        for key, value in values.items():
            key = key.replace("-", "_")
            if table == "compile":
                if key not in TOP_LEVEL:  # nothing reads other [compile] keys: a typo must not pass silently
                    raise UsageError(f"unknown key {key!r} in [compile]", hint=f"known keys: {', '.join(TOP_LEVEL)}")
                check_value_type(CompileConfig, key, value, f"[compile] {key}")
                set_option(cfg, key, value)
            else:
                if table in core_sections():  # a stage's own section is typed by its parser
                    check_value_type(section_class(table), key, value, f"[{table}] {key}")
                set_option(cfg, f"{table}.{key}", value)
    return cfg
