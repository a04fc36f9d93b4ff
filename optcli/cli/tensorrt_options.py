"""The TensorRT build flags of `optcli compile`, kept out of compile_cmd.py.

`@tensorrt_options` adds the flags; their values go to the click context (not to the command's
parameters), and `apply_tensorrt_options(ctx, config)` merges the flags the user typed over the
`[tensorrt]` section of the config file into a validated TensorRTConfig in
CompileConfig.extra["tensorrt"]. Every flag is described in docs/tensorrt.md.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from optcli.backends.tensorrt.options import SECTION, parse_batch, parse_size, tensorrt_config
from optcli.errors import UsageError

_META_KEY = "optcli.tensorrt_flags"
_TYPED = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT, ParameterSource.PROMPT)


class _Checked(click.ParamType):
    """A click type that runs one of optcli's parsers, turning its UsageError into click's error."""

    def __init__(self, name: str, parse: Callable[[str], Any]) -> None:
        self.name = name
        self._parse = parse

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return self._parse(value)
        except UsageError as exc:
            self.fail(f"{exc.message} ({exc.hint})" if exc.hint else exc.message, param, ctx)


def _store(key: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if ctx.get_parameter_source(param.name or "") in _TYPED:
            ctx.meta.setdefault(_META_KEY, {})[key] = value
    return callback


def tensorrt_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: the TensorRT build flags (used when the target is tensorrt)."""
    options = [
        click.option("--batch", "trt_batch", type=_Checked("MIN/OPT/MAX", parse_batch), expose_value=False,
                     callback=_store("batch"),
                     help="TensorRT batch range for a dynamic batch dim, e.g. 1/8/32 "
                          "(one number: fixed) [1/bench/32]."),
        click.option("--workspace", "trt_workspace", type=_Checked("SIZE", parse_size), expose_value=False,
                     callback=_store("workspace"),
                     help="TensorRT builder workspace limit, e.g. 4G [TensorRT's default]."),
        click.option("--builder-opt-level", "trt_opt_level", type=click.IntRange(0, 5), expose_value=False,
                     callback=_store("builder_opt_level"),
                     help="TensorRT builder optimization level: 0 builds fastest, 5 searches most [3]."),
        click.option("--hardware-compat", "trt_hw", type=click.Choice(["none", "ampere+", "same-cc"]),
                     is_flag=False, flag_value="ampere+", expose_value=False, callback=_store("hardware_compat"),
                     help="Engine runs on other GPUs: ampere+ (alone: this) or same-cc [none]."),
        click.option("--version-compat", "trt_version_compat", is_flag=True, expose_value=False,
                     callback=_store("version_compat"), help="Engine runs on later TensorRT versions."),
        click.option("--timing-cache", "trt_timing_cache", type=click.Path(dir_okay=False, path_type=Path),
                     expose_value=False, callback=_store("timing_cache"),
                     help="TensorRT timing cache file, read and updated "
                          "[one per TensorRT version and GPU in the cache]."),
        click.option("--engine-cache", "trt_engine_cache", type=click.Path(file_okay=False, path_type=Path),
                     expose_value=False, callback=_store("engine_cache"),
                     help="Engine cache folder [~/.cache/optcli/tensorrt/engines]."),
        click.option("--no-engine-cache", "trt_no_engine_cache", is_flag=True, expose_value=False,
                     callback=_store("no_engine_cache"),
                     help="Always build the engine; do not read or write the cache."),
        click.option("--max-seq", "trt_max_seq", type=click.IntRange(1, None), expose_value=False,
                     callback=_store("max_seq"),
                     help="TensorRT: top of a dynamic sequence dim's range (1..N) [the length optcli runs at]."),
        click.option("--no-fp16", "trt_no_fp16", is_flag=True, expose_value=False, callback=_store("no_fp16"),
                     help="TensorRT --int8: keep the float parts FP32 (default: FP16 where no Q/DQ stands)."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def apply_tensorrt_options(ctx: click.Context, config: Any) -> None:
    """Merge the typed TensorRT flags over the config file's [tensorrt] section (flags win)."""
    from optcli.config import set_option

    flags = dict(ctx.meta.get(_META_KEY, {}))
    if not flags and config.extra.get(SECTION) is None:
        return
    if flags.pop("no_engine_cache", False):
        flags["engine_cache_enabled"] = False
    if flags.pop("no_fp16", False):
        flags["int8_fp16"] = False
    for key, value in flags.items():
        set_option(config, f"{SECTION}.{key}", value)
    config.extra[SECTION] = tensorrt_config(config)  # typed (and checked) once the flags are in
