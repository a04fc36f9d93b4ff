"""TensorRTConfig: the `[tensorrt]` section of a compile config, and parsers for its values.

TOML (optcli.toml) and the CLI flags set the same keys:

    [tensorrt]
    batch = "1/8/32"            # --batch MIN/OPT/MAX (or one number for a fixed batch)
    workspace = "4G"            # --workspace
    builder_opt_level = 3       # --builder-opt-level 0-5
    hardware_compat = "none"    # --hardware-compat [ampere+|same-cc]
    version_compat = false      # --version-compat
    timing_cache = "trt.cache"  # --timing-cache PATH
    engine_cache = "~/.cache/optcli/tensorrt"   # --engine-cache DIR
    engine_cache_enabled = true # --no-engine-cache
    max_seq = 512               # --max-seq: top of the range of a dynamic sequence dim [the length optcli runs at]
    int8_fp16 = true            # --no-fp16 sets false: --int8 then keeps the float parts in FP32

Registered in optcli.config.SECTIONS; its values are kept in CompileConfig.extra["tensorrt"] (a dict of
what was set, through set_option, or a TensorRTConfig once the CLI has merged its flags).
"""
from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from optcli.errors import UsageError


class BuildOptions(TypedDict):
    """The options that change an engine: part of its cache key and of model.engine.json."""

    workspace: int | None
    builder_opt_level: int | None
    hardware_compat: str
    version_compat: bool
    toolkit: NotRequired[str]   # set when another builder than TensorRT's (TensorRT-RTX) made it

SECTION = "tensorrt"
HARDWARE_COMPAT = ("none", "ampere+", "same-cc")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}

Batch = tuple[int, int, int]


def parse_size(text: object) -> int:
    """`4G`, `512M`, `1.5GiB`, `1073741824` -> bytes (powers of 1024)."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        m = _SIZE.match(str(text))
        if not m:
            raise UsageError(f"bad size {text!r}", hint="write it like 4G, 512M or 1073741824 (bytes)")
        value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value <= 0:
        raise UsageError(f"size must be positive, got {text!r}", hint="e.g. --workspace 4G")
    return value


def parse_batch(text: object) -> Batch:
    """`1/8/32` -> (1, 8, 32); `8` -> (8, 8, 8) (a fixed batch)."""
    if isinstance(text, (list, tuple)):
        parts = [str(p) for p in text]
    else:
        parts = str(text).split("/")
    if len(parts) == 1:
        parts = parts * 3
    if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
        raise UsageError(f"bad batch {text!r}", hint="write MIN/OPT/MAX, e.g. --batch 1/8/32, or one number")
    mn, opt, mx = (int(p) for p in parts)
    if mn < 1 or not mn <= opt <= mx:
        raise UsageError(f"bad batch {text!r}: need 1 <= MIN <= OPT <= MAX", hint="e.g. --batch 1/8/32")
    return (mn, opt, mx)


def default_cache_root() -> Path:
    """$OPTCLI_CACHE_DIR, else $XDG_CACHE_HOME/optcli, else ~/.cache/optcli; TensorRT files go in tensorrt/."""
    base = os.environ.get("OPTCLI_CACHE_DIR")
    if base:
        return Path(base).expanduser() / "tensorrt"
    xdg = os.environ.get("XDG_CACHE_HOME")
    root = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return root / "optcli" / "tensorrt"


@dataclass
class TensorRTConfig:
    """How the engine build (engine_build.py) builds the engine. None means TensorRT's own default."""

    batch: Batch | None = None              # dim-0 profile for dynamic-batch inputs
    workspace: int | None = None            # bytes for the WORKSPACE memory pool
    builder_opt_level: int | None = None    # 0 (fast build) .. 5 (slowest build, best engine); TRT default 3
    hardware_compat: str = "none"           # none | ampere+ | same-cc
    version_compat: bool = False            # engine runs on later TensorRT versions (lean runtime inside)
    timing_cache: Path | None = None        # None: one per TensorRT version and GPU under the cache root
    engine_cache: Path | None = None        # None: default_cache_root() / "engines"
    engine_cache_enabled: bool = True
    max_seq: int | None = None              # top of a dynamic sequence dim's range; None: the length optcli runs at
    # --int8 on a TensorRT target: FP16 where no Q/DQ stands (what `trtexec --int8 --fp16` users expect);
    # False (--no-fp16): the float parts stay FP32.
    int8_fp16: bool = True

    @classmethod
    def from_dict(cls, values: Mapping[str, object]) -> TensorRTConfig:
        """Build from TOML-shaped values, checking every key and value (UsageError on bad input)."""
        values = {k.replace("-", "_"): v for k, v in values.items()}
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise UsageError(f"unknown key {unknown[0]!r} in [{SECTION}]",
                             hint=f"known keys: {', '.join(sorted(names))}")
        cfg = cls()
        if values.get("batch") is not None:
            cfg.batch = parse_batch(values["batch"])
        if values.get("workspace") is not None:
            cfg.workspace = parse_size(values["workspace"])
        if values.get("builder_opt_level") is not None:
            level = values["builder_opt_level"]
            if not isinstance(level, int) or isinstance(level, bool) or not 0 <= level <= 5:
                raise UsageError(f"builder_opt_level must be 0-5, got {level!r}", hint="3 is TensorRT's default")
            cfg.builder_opt_level = level
        if values.get("hardware_compat") is not None:
            cfg.hardware_compat = str(values["hardware_compat"]).lower()
        if values.get("max_seq") is not None:
            seq = values["max_seq"]
            if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
                raise UsageError(f"max_seq must be a positive integer, got {seq!r}", hint="e.g. --max-seq 512")
            cfg.max_seq = seq
        for key in ("version_compat", "engine_cache_enabled", "int8_fp16"):
            if key in values:
                if not isinstance(values[key], bool):
                    raise UsageError(f"[{SECTION}] {key} must be true or false, got {values[key]!r}")
                setattr(cfg, key, values[key])
        for key in ("timing_cache", "engine_cache"):
            if values.get(key) is not None:
                setattr(cfg, key, Path(str(values[key])).expanduser())
        cfg.validate()
        return cfg

    def validate(self) -> None:
        if self.hardware_compat not in HARDWARE_COMPAT:
            raise UsageError(f"unknown hardware compatibility {self.hardware_compat!r}",
                             hint=f"use one of: {', '.join(HARDWARE_COMPAT)}")

    def engine_cache_dir(self) -> Path:
        return self.engine_cache if self.engine_cache is not None else default_cache_root() / "engines"

    def build_options(self) -> BuildOptions:
        """The options that change the engine (part of the engine cache key and of the metadata)."""
        return {"workspace": self.workspace, "builder_opt_level": self.builder_opt_level,
                "hardware_compat": self.hardware_compat, "version_compat": self.version_compat}

    def to_json(self) -> dict[str, object]:
        d = dataclasses.asdict(self)
        return {k: (str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v) for k, v in d.items()}


def tensorrt_config(config: Any) -> TensorRTConfig:
    """The TensorRTConfig of a CompileConfig (from its extra["tensorrt"]; defaults when absent)."""
    section = config.extra.get(SECTION)
    if section is None:
        return TensorRTConfig()
    if isinstance(section, TensorRTConfig):
        return section
    if not isinstance(section, dict):
        raise UsageError(f"[{SECTION}] must be a table", hint="e.g. [tensorrt] with workspace = \"4G\"")
    return TensorRTConfig.from_dict(section)


def int8_fp16(config: Any) -> bool:
    """Whether an INT8 graph's float parts go FP16 ([tensorrt] int8_fp16; --no-fp16 turns it off): the
    descriptors' int8_fp16_setting, asked by the quantize stage through registry.graph_needs."""
    return tensorrt_config(config).int8_fp16
