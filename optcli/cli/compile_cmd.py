"""`optcli compile MODEL`: build a CompileConfig from a config file and flags, run it, show the report."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from optcli.cli.main import exit_with
from optcli.cli.tensorrt_options import apply_tensorrt_options, tensorrt_options
from optcli.config import TARGETS, CompileConfig, compile_config_from_dict, load_toml
from optcli.tensor_spec import parse_input_spec


def discover_config(explicit: Path | None) -> dict[str, Any]:
    """--config FILE, else ./optcli.toml, else [tool.optcli] in ./pyproject.toml, else nothing."""
    if explicit is not None:
        return load_toml(explicit)
    for candidate in (Path("optcli.toml"), Path("pyproject.toml")):
        if candidate.is_file():
            data = load_toml(candidate)
            if data:
                return data
    return {}


def _given(ctx: click.Context, name: str) -> bool:
    """True when the user typed the flag (so it overrides the config file)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def build_config(ctx: click.Context, model: str, params: dict[str, Any]) -> CompileConfig:
    config = compile_config_from_dict(model, discover_config(params["config"]))
    flag_map = {  # flag -> (section or None, field)
        "out": (None, "out"), "target": (None, "target"), "force": (None, "force"),
        "opset": ("export", "opset"), "static_batch": ("export", "static_batch"),
        "allow_pickle": ("export", "allow_pickle"), "exporter": ("export", "exporter"),
        "fuse_level": ("fuse", "level"), "transformer_fusion": ("fuse", "transformer"),
        "bench_runs": ("bench", "runs"), "threads": ("bench", "threads"),
    }
    for flag, (section, field) in flag_map.items():
        if _given(ctx, flag):
            value = params[flag]
            setattr(getattr(config, section) if section else config, field, Path(value) if flag == "out" else value)
    if params["input"]:
        config.inputs = [parse_input_spec(s) for s in params["input"]]
    if params["no_simplify"]:
        config.simplify.enabled = False
    if params["no_fuse"]:
        config.fuse.enabled = False
    if params["no_bench"]:
        config.bench.enabled = False
    apply_tensorrt_options(ctx, config)
    return config


@click.command("compile")
@click.argument("model")
@click.option("--input", "-i", multiple=True, metavar="NAME:SHAPE[:DTYPE]",
              help="Input name and shape, e.g. x:1x3x224x224 or input_ids:1x128:int64 (repeat per input). "
                   "Needed for TorchScript; pins dynamic dims otherwise.")
@click.option("--out", "-o", type=click.Path(path_type=Path), help="Output folder [optcli-out/<model name>].")
@click.option("--target", type=click.Choice(TARGETS), default="auto", show_default=True,
              help="auto: TensorRT where an NVIDIA GPU and TensorRT work, else CPU.")
@click.option("--config", type=click.Path(path_type=Path), help="TOML config [./optcli.toml or [tool.optcli]].")
@click.option("--force", is_flag=True, help="Rebuild every stage, ignoring cached results.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout (progress stays off).")
@click.option("--opset", type=int, default=18, show_default=True, help="ONNX opset for export.")
@click.option("--static-batch", is_flag=True, help="Keep the batch dim fixed (default: dim 0 dynamic).")
@click.option("--allow-pickle", is_flag=True, help="Load a pickled module (runs code from the file).")
@click.option("--exporter", type=click.Choice(["auto", "dynamo", "torchscript"]), default="auto", show_default=True)
@click.option("--no-simplify", is_flag=True, help="Skip the simplify stage.")
@click.option("--no-fuse", is_flag=True, help="Skip the fuse stage.")
@click.option("--fuse-level", type=click.Choice(["basic", "extended"]), default="extended", show_default=True,
              help="basic keeps plain ONNX ops; extended adds onnxruntime fused ops (CPU).")
@click.option("--transformer-fusion", type=click.Choice(["auto", "on", "off"]), default="auto", show_default=True)
@click.option("--no-bench", is_flag=True, help="Do not measure latency around stages.")
@click.option("--bench-runs", type=click.IntRange(1), default=50, show_default=True,
              help="Timed runs per latency measurement (at least).")
@click.option("--threads", type=click.IntRange(1), help="Intra-op threads [all cores].")
@tensorrt_options
@click.pass_context
def compile_cmd(ctx: click.Context, model: str, as_json: bool, **params: Any) -> None:
    """Compile MODEL (.onnx, .pt2, TorchScript .pt, or file.py:factory) through the pipeline:
    export -> simplify -> fuse -> ..., writing one artifact per stage, report.json and report.md."""
    from optcli import api

    config = build_config(ctx, model, params)
    if as_json:
        report = api.compile(config, check=False)
        click.echo(json.dumps(report.to_json(), indent=2, default=str))
        exit_with(report.exit_code)
        return
    from rich.console import Console

    from optcli.cli.render import Progress, final_lines, report_table

    err_console = Console(stderr=True, highlight=False)
    progress = Progress(err_console)
    try:
        report = api.compile(config, check=False, on_event=progress)
    finally:
        progress.stop()
    console = Console(highlight=False, width=max(Console().width, 140) if not sys.stdout.isatty() else None)
    console.print(report_table(report))
    for line in final_lines(report):
        console.print(line)
    console.print(f"report: {config.out_dir() / 'report.json'}")
    if report.error:
        click.secho(f"error: {report.error['message']}", fg="red", err=True)
        if report.error.get("hint"):
            click.echo(f"hint: {report.error['hint']}", err=True)
    exit_with(report.exit_code)
