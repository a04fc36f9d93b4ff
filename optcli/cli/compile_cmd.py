"""`optcli compile MODEL`: build a CompileConfig from a config file and flags, run it, show the report."""
from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from optcli.cli.main import exit_with
from optcli.cli.registry_choice import RegistryChoice
from optcli.cli.tensorrt_options import apply_tensorrt_options, tensorrt_options
from optcli.config import TARGETS, CompileConfig, code_running_settings, compile_config_from_dict, load_toml, set_option
from optcli.cpu.options import backend_choices
from optcli.errors import UsageError
from optcli.safe_paths import shown

if TYPE_CHECKING:
    from optcli.report.io import RunReport


def discover_config(explicit: Path | None) -> tuple[dict[str, object], Path | None]:
    """--config FILE, else ./optcli.toml, else [tool.optcli] in ./pyproject.toml, else nothing;
    returns the settings and the file they came from."""
    if explicit is not None:
        return load_toml(explicit), explicit
    for candidate in (Path("optcli.toml"), Path("pyproject.toml")):
        if candidate.is_file():
            data = load_toml(candidate)
            if data:
                return data, candidate
    return {}, None


def _refuse_code_from_config(ctx: click.Context, config: CompileConfig, path: Path | None, trust: bool) -> None:
    """A config file may not turn on running code (plugins, pickles) unless --trust-config says so; the
    same setting typed on the command line is the user's own choice."""
    flags = {"calib_reader": "--calib-reader", "allow_pickle": "--allow-pickle"}
    for field, setting in code_running_settings(config).items():
        if not trust and not _given(ctx, field):
            raise UsageError(f"{path} sets {setting}, which runs code; a config file cannot turn that on by itself",
                             hint=f"pass {flags[field]} on the command line, or --trust-config if you trust {path}")


def _out_inside_project(config: CompileConfig, path: Path) -> None:
    """[compile] out from a config file: only a relative path inside the project folder (the folder that
    holds the file), resolved there, links included. A cloned repository's optcli.toml must not send
    report.json, report.md and the stage folders anywhere else (docs/security.md); --out on the command
    line goes anywhere."""
    out = config.out
    if out is None:
        return
    project = path.resolve().parent
    text = str(out)
    if out.is_absolute() or ".." in out.parts or "\x00" in text or (project / out).resolve() == project:
        raise UsageError(f"{path} sets [compile] out = {shown(text)!r}: a config file may only name a folder inside "
                         f"its project folder {shown(project)}",
                         hint="use a relative path without `..` there, or pass --out on the command line")
    resolved = (project / out).resolve()
    if project not in resolved.parents:
        raise UsageError(f"{path} sets [compile] out = {shown(text)!r}, which leads outside its project folder "
                         f"{shown(project)} (a link?)",
                         hint="name a folder inside the project, or pass --out on the command line")
    config.out = resolved


def _given(ctx: click.Context, name: str) -> bool:
    """True when the user typed the flag (so it overrides the config file)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def _path(value: object) -> Path | None:
    """A click.Path(path_type=Path) flag's value."""
    return value if isinstance(value, Path) else None


def _strings(value: object) -> list[str]:
    """A `multiple=True` flag's values (click gives a tuple; none: an empty one)."""
    return [str(v) for v in value] if isinstance(value, (tuple, list)) else []


def build_config(ctx: click.Context, model: str, params: Mapping[str, object]) -> CompileConfig:
    """The CompileConfig of a config file and the command's flags (click's keyword arguments, by flag name)."""
    data, config_path = discover_config(_path(params["config"]))
    config = compile_config_from_dict(model, data)
    _refuse_code_from_config(ctx, config, config_path, bool(params["trust_config"]))  # before any flag applies
    if config_path is not None and not _given(ctx, "out"):
        _out_inside_project(config, config_path)
    config.config_file = config_path
    for flag, key in FLAGS.items():
        if _given(ctx, flag):
            set_option(config, key, params[flag])
    if params["input"]:
        set_option(config, "inputs", params["input"])
    for flag in ("no_simplify", "no_fuse", "no_bench"):
        if params[flag]:
            set_option(config, f"{flag.removeprefix('no_')}.enabled", False)
    _apply_quantize_flags(ctx, config, params)
    apply_tensorrt_options(ctx, config)
    if params["no_unpad"]:
        set_option(config, "unpad.enabled", False)
    return config


# flag -> the setting it sets (set_option's key); flags that do more have their own code below.
FLAGS = {
    "out": "out", "target": "target", "force": "force", "backend": "cpu.backend", "search": "cpu.search",
    "time_budget": "time_budget",
    "opset": "export.opset", "static_batch": "export.static_batch", "allow_pickle": "export.allow_pickle",
    "exporter": "export.exporter", "task": "export.task", "fuse_level": "fuse.level",
    "transformer_fusion": "fuse.transformer", "bench_runs": "bench.runs", "threads": "bench.threads",
    "calib": "quantize.calib", "eval_dir": "quantize.eval", "calib_reader": "quantize.calib_reader",
    "calib_samples": "quantize.calib_samples", "calib_method": "quantize.calib_method",
    "int8_flavour": "quantize.flavour", "fallback_budget": "quantize.fallback_budget",
    "allow_float": "quantize.allow_float",
}


def _apply_quantize_flags(ctx: click.Context, config: CompileConfig, params: Mapping[str, object]) -> None:
    from optcli.quantize.tolerance import parse_tolerance

    q = config.quantize
    chosen = [p for p in ("fp16", "int8", "bf16") if params[p]]
    if len(chosen) > 1:
        raise UsageError(f"choose one precision, not {' and '.join('--' + c for c in chosen)}",
                         hint="compare precisions side by side with `optcli compare MODEL --variants fp32,fp16,int8`")
    if chosen:
        set_option(config, "precision", chosen[0])
    options = dict(q.calib_options)
    for item in _strings(params["calib_opt"]):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"malformed --calib-opt {item!r}", hint="write key=value, e.g. --calib-opt size=224")
        options[key] = value
    set_option(config, "quantize.calib_options", options)
    set_option(config, "quantize.exclude_nodes", q.exclude_nodes + _strings(params["exclude"]))
    set_option(config, "quantize.exclude_ops", q.exclude_ops + _strings(params["exclude_op"]))
    if params["no_fallback"]:
        set_option(config, "quantize.fallback", False)
    if params["tolerance"]:
        tol = parse_tolerance(_strings(params["tolerance"]))
        for key in ("cosine", "max_abs", "top1"):
            set_option(config, f"accuracy.{key}", tol.get(key))


@click.command("compile")
@click.argument("model")
@click.option("--input", "-i", multiple=True, metavar="NAME:SHAPE[:DTYPE]",
              help="Input name and shape, e.g. x:1x3x224x224 or input_ids:1x128:int64 (repeat per input). "
                   "Needed for TorchScript; pins dynamic dims otherwise.")
@click.option("--out", "-o", type=click.Path(path_type=Path), help="Output folder [optcli-out/<model name>].")
@click.option("--target", type=click.Choice(TARGETS), default="auto", show_default=True,
              help="auto: TensorRT where an NVIDIA GPU and TensorRT work, else CPU.")
@click.option("--config", type=click.Path(path_type=Path), help="TOML config [./optcli.toml or [tool.optcli]].")
@click.option("--trust-config", is_flag=True,
              help="Let the config file turn on running code (a --calib-reader plugin, --allow-pickle).")
@click.option("--backend", type=RegistryChoice(backend_choices), default="auto", show_default=True,
              help="CPU backend: auto measures every installed one and keeps the fastest within tolerance.")
@click.option("--search", type=click.Choice(["fast", "thorough"]), default="fast", show_default=True,
              help="CPU candidates: fast builds the predicted winner first and another only while it could "
                   "still win; thorough builds and measures every one.")
@click.option("--time-budget", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Bound the compile: the CPU search stops at the best candidate so far, and says so.")
@click.option("--force", is_flag=True, help="Rebuild every stage, ignoring cached results.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout (progress stays off).")
@click.option("--opset", type=int, default=18, show_default=True, help="ONNX opset for export.")
@click.option("--static-batch", is_flag=True, help="Keep the batch dim fixed (default: dim 0 dynamic).")
@click.option("--allow-pickle", is_flag=True, help="Load a pickled module (runs code from the file).")
@click.option("--exporter", type=click.Choice(["auto", "dynamo", "torchscript"]), default="auto", show_default=True)
@click.option("--task", default="auto", show_default=True,
              help="For a Hugging Face model folder: the task to build (auto: from config.json's architectures), "
                   "e.g. feature-extraction, text-classification, fill-mask, text-generation, image-classification.")
@click.option("--no-simplify", is_flag=True, help="Skip the simplify stage.")
@click.option("--no-fuse", is_flag=True, help="Skip the fuse stage.")
@click.option("--no-unpad", is_flag=True,
              help="Keep computing padded tokens (by default encoders with an attention mask skip them).")
@click.option("--fuse-level", type=click.Choice(["basic", "extended"]), default="extended", show_default=True,
              help="basic keeps plain ONNX ops; extended adds onnxruntime fused ops (CPU).")
@click.option("--transformer-fusion", type=click.Choice(["auto", "on", "off"]), default="auto", show_default=True)
@click.option("--no-bench", is_flag=True, help="Do not measure latency around stages.")
@click.option("--bench-runs", type=click.IntRange(1), default=50, show_default=True,
              help="Timed runs of the final artifact and its baseline (fewer once the median is known to "
                   "+-1%: [bench] settle).")
@click.option("--threads", type=click.IntRange(1), help="Intra-op threads [all cores].")
@click.option("--fp16", is_flag=True, help="Convert to FP16 (FP32 inputs/outputs kept), gated on accuracy.")
@click.option("--int8", is_flag=True, help="Quantize to INT8 with calibration data (--calib), gated on accuracy.")
@click.option("--bf16", is_flag=True, help="BF16 where the backend supports it (OpenVINO CPU).")
@click.option("--calib", type=click.Path(path_type=Path), help="Calibration data folder (.npz: keys = input names).")
@click.option("--calib-reader", help="npz | npy | images | an entry-point name | path/file.py:Class.")
@click.option("--calib-opt", multiple=True, metavar="KEY=VALUE", help="Reader option (repeat), e.g. size=224.")
@click.option("--calib-samples", type=click.IntRange(1), help="Use at most N calibration samples.")
@click.option("--calib-method", type=click.Choice(["minmax", "entropy", "percentile"]), default="minmax",
              show_default=True)
@click.option("--eval", "eval_dir", type=click.Path(path_type=Path),
              help="Held-out data for the accuracy gate (a `labels` key adds top-1 accuracy).")
@click.option("--tolerance", multiple=True, metavar="cosine=0.99,top1=..,max-abs=..",
              help="Accuracy gate against FP32 (default cosine=0.99 for int8, 0.999 for fp16). Miss it: exit 3.")
@click.option("--exclude", multiple=True, metavar="NAME",
              help="Keep in float: an ONNX node, a PyTorch module path, or a glob ('encoder.layer.11.*'); repeat.")
@click.option("--exclude-op", multiple=True, metavar="OPTYPE", help="Keep every node of this op type in float.")
@click.option("--no-fallback", is_flag=True, help="Do not exclude sensitive nodes automatically.")
@click.option("--fallback-budget", type=click.FloatRange(min=0), default=300.0, show_default=True, metavar="SECONDS",
              help="Time the INT8 fallback search may take.")
@click.option("--allow-float", is_flag=True,
              help="With --int8 on a CPU: ship the FP32 graph where INT8 is not faster than it or no INT8 candidate "
                   "meets the tolerance (the report says why) instead of a slower INT8 or exit 3.")
@click.option("--int8-flavour", type=click.Choice(["auto", "qdq", "qdq-s8s8", "qdq-u8s8", "dynamic"]),
              default="auto", show_default=True, help="Where Q/DQ sit; auto picks per target and model.")
@click.option("--triton-repo", type=click.Path(path_type=Path),
              help="After a successful run, write a Triton model repository entry here (as optcli export-triton).")
@click.option("--triton-name", help="Model name for --triton-repo [the model's name].")
@tensorrt_options
@click.pass_context
def compile_cmd(ctx: click.Context, model: str, as_json: bool, **params: Any) -> None:
    """Compile MODEL (.onnx, .pt2, TorchScript .pt, file.py:factory, or a Hugging Face model folder) through the
    pipeline: export -> simplify -> fuse -> ..., writing one artifact per stage, report.json and report.md."""
    from optcli import api

    config = build_config(ctx, model, params)
    if params["triton_name"] and not params["triton_repo"]:
        raise click.UsageError("--triton-name needs --triton-repo")
    if params["triton_name"]:
        from optcli.deploy import sanitize_model_name

        sanitize_model_name(params["triton_name"])  # a bad name fails now, not after the whole run
    if config.config_file is not None:
        click.echo(f"config: {config.config_file} (settings read from it; flags override); "
                   f"output: {config.out_dir()}", err=True)
    if as_json:
        report = api.compile(config, check=False)
        click.echo(json.dumps(report.to_json(), indent=2, default=str))
        _export_triton(report, params, err=True)
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
        if report.error.traceback and os.environ.get("OPTCLI_DEBUG") == "1":
            click.echo(report.error.traceback.rstrip(), err=True)
        click.secho(f"error: {report.error.message}", fg="red", err=True)
        if report.error.hint:
            click.echo(f"hint: {report.error.hint}", err=True)
    _export_triton(report, params)
    exit_with(report.exit_code)


def _export_triton(report: RunReport, params: Mapping[str, object], err: bool = False) -> None:
    """--triton-repo: hand a successful run's report to export-triton, with that command's defaults."""
    repo, name = _path(params["triton_repo"]), params["triton_name"]
    if repo is None or report.status != "ok":
        return
    from optcli import api
    from optcli.cli.export_triton_cmd import echo_export

    echo_export(api.export_triton(report, repo, name=name if isinstance(name, str) else None), err=err)
