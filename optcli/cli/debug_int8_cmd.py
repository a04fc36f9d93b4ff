"""`optcli debug-int8 MODEL --calib DIR`: the per-layer INT8 sensitivity table, --json and --plot."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from optcli.quantize.debug_int8 import SensitivityReport


def _table(report: SensitivityReport, top: int) -> Any:
    from rich.table import Table

    acc = report["int8_accuracy"]
    t = Table(title=f"optcli debug-int8: {Path(report['model']).name}, flavour {report['flavour']['name']}: "
                    f"all-INT8 mean cosine {acc.get('cosine_mean', 0):.4f}"
                    + (f", top-1 agreement {acc['top1_agreement']:.3f}" if "top1_agreement" in acc else "")
                    + f" ({report['samples']['evaluation']} samples, {report['seconds']:.0f} s)",
              title_justify="left")
    numbers = ("#", "cosine gain in float", "local damage", "FLOPs")
    for col in ("#", "module", "op", "ONNX node", *numbers[1:]):
        t.add_column(col, justify="right" if col in numbers else "left", overflow="fold")
    for i, r in enumerate(report["units"][:top], 1):
        gain = r["cosine_gain_in_float"]
        t.add_row(str(i), r["module"] or "[dim](not recorded)[/]", r["op_type"], r["node"],
                  f"{gain:+.4f}" if gain is not None else "-",
                  f"{r['local_damage']:.2e}" if r["local_damage"] is not None else "-", f"{r['flops_share']:.1%}")
    return t


@click.command("debug-int8")
@click.argument("model")
@click.option("--calib", type=click.Path(path_type=Path), required=True, help="Calibration data folder (.npz).")
@click.option("--eval", "eval_dir", type=click.Path(path_type=Path), help="Held-out data [unused calib samples].")
@click.option("--target", type=click.Choice(["cpu", "tensorrt"]), default="cpu", show_default=True,
              help="Which INT8 flavour to debug: the one compile would pick for this target.")
@click.option("--int8-flavour", "flavour", type=click.Choice(["auto", "qdq", "qdq-s8s8", "qdq-u8s8"]), default="auto",
              show_default=True)
@click.option("--calib-method", type=click.Choice(["minmax", "entropy", "percentile"]), default="minmax",
              show_default=True)
@click.option("--calib-samples", type=click.IntRange(1), help="Use at most N calibration samples.")
@click.option("--measure", type=click.IntRange(0), default=8, show_default=True,
              help="Units measured end to end (each kept in float alone): one re-quantize and evaluation each.")
@click.option("--top", "-n", type=click.IntRange(1), default=20, show_default=True, help="Rows to show.")
@click.option("--json", "as_json", is_flag=True, help="Print every unit as JSON on stdout.")
@click.option("--plot", type=click.Path(path_type=Path), help="Write a bar chart of the top-N (needs optcli[plot]).")
def debug_int8_cmd(model: str, calib: Path, as_json: bool, plot: Path | None, top: int, **options: Any) -> None:
    """Where INT8 hurts MODEL (.onnx), per layer, before building anything: every quantized compute
    unit with its module path, ONNX node, share of FLOPs, local damage, and for the most damaging
    ones the mean cosine gained by keeping that unit alone in float. Use it to pick --exclude and
    --tolerance."""
    from optcli import api

    if plot is not None:
        from optcli.optional_imports import require

        require("matplotlib", "--plot")
    report = api.debug_int8(model, calib, **options)
    if plot is not None:
        from optcli.plots import plot_sensitivity

        plot_sensitivity(report, plot, top)
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    import sys

    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 160)  # module paths are long: no folding in files
    console.print(_table(report, top))
    if plot is not None:
        console.print(f"plot: {plot}")
    best = next((r for r in report["units"] if r["cosine_gain_in_float"] is not None), None)
    if best is not None and not report["passes"]:
        console.print(f"try: optcli compile {model} --int8 --calib {calib} "
                      f"--exclude '{best['module'] or best['node']}'")
