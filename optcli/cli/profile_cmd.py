"""`optcli profile ARTIFACT`: per-layer time, top-N bottlenecks, --json and --plot."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click


def _tables(result: Any, top: int) -> list[Any]:
    from rich.table import Table

    layers = result.top(top)
    t = Table(title=f"optcli profile: {Path(result.artifact['path']).name} ({result.runtime}, "
                    f"{result.runs} runs, batch {result.settings.get('batch')})", title_justify="left")
    numbers = ("#", "median ms", "mean ms", "share", "cumulative")
    for col in ("#", "layer", "op type", "ONNX node(s)", *numbers[1:]):
        t.add_column(col, justify="right" if col in numbers else "left", overflow="fold")
    cumulative = 0.0
    for i, x in enumerate(layers, 1):
        cumulative += x.share
        nodes = ", ".join(x.nodes) if x.nodes else f"[dim]({x.note})[/]"
        median = f"{x.median_ms:.4f}" if x.median_ms is not None else "-"
        t.add_row(str(i), x.name, x.op_type, nodes, median, f"{x.per_run_ms(result.runs):.4f}", f"{x.share:.1%}",
                  f"{cumulative:.1%}")
    ops = Table(title="by op type", title_justify="left")
    for col in ("op type", "layers", "ms/run", "share"):
        ops.add_column(col, justify="left" if col == "op type" else "right")
    for row in result.by_op_type()[:top]:
        ops.add_row(row["op_type"], str(row["layers"]), f"{row['per_run_ms']:.4f}", f"{row['share']:.1%}")
    return [t, ops]


@click.command("profile")
@click.argument("artifact")
@click.option("--top", "-n", type=click.IntRange(1), default=15, show_default=True, help="Layers to show.")
@click.option("--batch", "-b", type=click.IntRange(1), default=1, show_default=True)
@click.option("--runs", type=click.IntRange(1), default=100, show_default=True, help="Profiled runs aggregated.")
@click.option("--warmup", type=click.IntRange(0), default=10, show_default=True, help="Runs left out first.")
@click.option("--optimization", type=click.Choice(["all", "extended", "basic", "disabled"]), default="all",
              show_default=True, help="onnxruntime graph optimization (all = as deployed; disabled = "
                                      "one kernel per ONNX node).")
@click.option("--threads", type=click.IntRange(1), help="Intra-op threads [all cores].")
@click.option("--inputs", "inputs_dir", type=click.Path(path_type=Path),
              help="Real inputs: a folder of .npz (keys = input names) [random].")
@click.option("--input", "-i", "pins", multiple=True, metavar="NAME:SHAPE", help="Size dynamic dims.")
@click.option("--json", "as_json", is_flag=True, help="Print the profile as JSON on stdout (every layer).")
@click.option("--plot", type=click.Path(path_type=Path), help="Write a bar chart of the top-N (needs optcli[plot]).")
def profile_cmd(artifact: str, top: int, as_json: bool, plot: Path | None, pins: tuple[str, ...],
                **options: Any) -> None:
    """Per-layer profile of ARTIFACT (.onnx with onnxruntime's profiler; .engine with TensorRT's
    layer profiler on a GPU): the top-N bottlenecks with their share of time and ONNX node names."""
    from optcli import api

    if plot is not None:  # before minutes of profiling, not after
        from optcli.optional_imports import require

        require("matplotlib", "--plot")
    result = api.profile(artifact, pins=list(pins), **options)
    if plot is not None:
        from optcli.plots import plot_profile

        plot_profile(result, plot, top)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
        return
    from optcli.cli.console import stderr_console, stdout_console

    console = stdout_console()
    for table in _tables(result, top):
        console.print(table)
    run = f"{result.run_ms:.4f} ms per run as {result.runtime} timed it; " if result.run_ms else ""
    console.print(f"{run}kernels {result.kernel_ms_per_run:.4f} ms (sum of medians, {len(result.layers)} layers); "
                  "shares are of the median time per run, so a stall in one run does not move them")
    if plot is not None:
        console.print(f"plot: {plot}")
    for w in result.warnings:
        stderr_console().print(f"[yellow]warning:[/] {w}")
