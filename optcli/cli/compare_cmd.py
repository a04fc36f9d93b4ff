"""`optcli compare MODEL --variants fp32,fp16,int8`: build, measure interleaved, recommend."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from optcli.config import TARGETS


def _table(result: Any) -> Any:
    from rich.table import Table

    from optcli.comparison.result import COLUMNS

    table = Table(title=f"optcli compare: {result.model}", title_justify="left")
    for col in COLUMNS:
        table.add_column(col, justify="left" if col in ("variant", "precision", "verdict", "pareto") else "right",
                         overflow="fold")
    for row in result.rows():
        verdict = row[-1]
        style = "bold green" if verdict == "recommended" else ("red" if verdict.startswith(("misses", "build")) else "")
        row[-1] = f"[{style}]{verdict}[/]" if style else verdict
        table.add_row(*row)
    return table


class _Progress:
    def __init__(self, console: Any) -> None:
        self.console = console

    def __call__(self, event: str, data: dict[str, object]) -> None:
        if event == "variant_start":
            self.console.print(f"[{data['index']}/{data['total']}] building {data['name']} ...")
        elif event == "variant_end":
            status = {"ok": "[green]ok[/]",
                      "gate-failed": f"[yellow]built, but its accuracy gate failed[/]: {data['error']}"}.get(
                str(data["status"]), f"[red]failed[/]: {data['error']}")
            self.console.print(f"      {data['name']}: {status} ({data['seconds']:.1f}s)")
        elif event == "phase":
            self.console.print(f"{data['text']} ...")


@click.command("compare")
@click.argument("model")
@click.option("--variants", default="fp32,fp16,int8", show_default=True,
              help="Precisions (fp32, fp16, int8, bf16) or names defined with --variant.")
@click.option("--variant", "define", multiple=True, metavar="NAME:KEY=VALUE,...",
              help="Define a variant, e.g. nofuse:fuse.enabled=false or dyn:precision=int8,quantize.flavour=dynamic.")
@click.option("--calib", type=click.Path(path_type=Path), help="Calibration data for int8 (.npz, keys = input names).")
@click.option("--eval", "eval_dir", type=click.Path(path_type=Path), help="Held-out data for the accuracy check.")
@click.option("--tolerance", default=None, metavar="cosine=0.99[,top1=..,max-abs=..]",
              help="Accuracy against FP32 a variant must keep to be recommended [cosine=0.99]; none: exit 3.")
@click.option("--input", "-i", "inputs", multiple=True, metavar="NAME:SHAPE[:DTYPE]", help="As for compile.")
@click.option("--out", "-o", type=click.Path(path_type=Path), help="Output folder [optcli-out/<model>-compare].")
@click.option("--target", type=click.Choice(TARGETS), default="auto", show_default=True)
@click.option("--force", is_flag=True, help="Rebuild every variant's stages.")
@click.option("--runs", type=click.IntRange(1), default=100, show_default=True,
              help="Timed calls per variant and batch (at least).")
@click.option("--min-seconds", type=click.FloatRange(0), default=1.0, show_default=True,
              help="Timed time per variant and batch (at least).")
@click.option("--max-seconds", type=click.FloatRange(0.01), default=8.0, show_default=True)
@click.option("--plot", type=click.Path(path_type=Path), help="Write latency vs accuracy as PNG (needs optcli[plot]).")
@click.option("--json", "as_json", is_flag=True, help="Print compare.json on stdout.")
def compare_cmd(model: str, variants: str, define: tuple[str, ...], tolerance: str | None, inputs: tuple[str, ...],
                plot: Path | None, as_json: bool, **options: Any) -> None:
    """Build MODEL in each variant (cached stages reused), measure all in one interleaved run, mark the
    Pareto set and recommend the fastest within --tolerance. Writes compare.json and compare.md."""
    from optcli import api
    from optcli.cli.console import stderr_console, stdout_console
    from optcli.errors import OptcliError

    if plot is not None:
        from optcli.optional_imports import require

        require("matplotlib", "--plot")
    err = stderr_console()
    try:
        result = api.compare(model, variants, define=list(define), tolerance=tolerance, inputs=list(inputs),
                             on_event=_Progress(err), **options)
        failure = None
    except OptcliError as exc:
        partial = getattr(exc, "result", None)
        if partial is None:
            raise
        result = partial
        failure = exc
    if plot is not None:
        from optcli.plots import plot_compare

        plot_compare(result, plot)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2, default=str))
    else:
        console = stdout_console()
        console.print(_table(result))
        if result.recommended:
            console.print(f"recommended: [bold]{result.recommended}[/] ({result.reason})")
        for v in result.variants:
            for note in v.notes:
                console.print(f"note: {v.name}: {note}")
        console.print(f"written: {Path(result.out) / 'compare.json'}, {Path(result.out) / 'compare.md'}"
                      + (f", {plot}" if plot else ""))
        for w in result.warnings:
            err.print(f"[yellow]warning:[/] {w}")
    if failure is not None:
        raise failure  # main() prints it and exits 3 (no variant within tolerance) or 1
