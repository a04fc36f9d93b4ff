"""`optcli bench ARTIFACT`: latency/throughput sweep, knee, noise warnings and the regression gate."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from optcli.errors import UsageError

if TYPE_CHECKING:
    from optcli.benchmark.sweep import Regression


def int_list(text: str, flag: str) -> list[int]:
    """`1,8,32` -> [1, 8, 32], each >= 1."""
    try:
        values = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise UsageError(f"{flag} {text!r}: not a list of integers", hint=f"e.g. {flag} 1,8,32") from None
    if not values or any(v < 1 for v in values):
        raise UsageError(f"{flag} {text!r}: values must be >= 1", hint=f"e.g. {flag} 1,8,32")
    return values


def _table(result: Any) -> Any:
    from rich.table import Table

    knee = result.knee or {}
    table = Table(title=f"optcli bench: {Path(result.artifact['path']).name} ({result.runtime})", title_justify="left")
    for col in ("batch", "conc", "p50 ms", "p50 95% CI", "p90 ms", "p99 ms", "mean ms", "max ms",
                "samples/s", "CV", ""):
        table.add_column(col, justify="right" if col else "left")
    budget = result.settings.get("latency_budget_ms")
    percentile = result.settings.get("budget_percentile", "p99")
    gpu = any(p.device_ms for p in result.points)
    if gpu:
        table.add_column("GPU p50 ms", justify="right")
    batching = any(p.batched for p in result.points)
    if batching:
        table.add_column("batched (mean batch)", justify="right")
    for p in result.points:
        s = p.latency
        mark = "<- knee" if (p.batch, p.concurrency, p.batched) == (knee.get("batch"), knee.get("concurrency"),
                                                                    bool(knee.get("batched"))) else ""
        if budget is not None and getattr(s, percentile) > budget:
            mark = mark or "over budget"
        cv = f"{s.cv:.0%}"
        row = [str(p.batch), str(p.concurrency), f"{s.p50:.4f}", f"{p.median_ci_ms[0]:.4f}-{p.median_ci_ms[1]:.4f}",
               f"{s.p90:.4f}", f"{s.p99:.4f}", f"{s.mean:.4f}", f"{s.max:.4f}", f"{p.throughput:.1f}",
               f"[yellow]{cv}[/]" if s.cv > 0.10 else cv, f"[bold green]{mark}[/]" if "knee" in mark else mark]
        if gpu:
            row.append(f"{p.device_ms['p50']:.4f}" if p.device_ms else "-")
        if batching:
            row.append(f"yes ({p.batches['mean']:g})" if p.batches else "no")
        table.add_row(*row)
    return table


def _regression_table(reg: Regression) -> Any:
    from rich.table import Table

    table = Table(title=f"against the baseline ({reg['metric']}, bound {reg['bound']:.0%})", title_justify="left")
    for col in ("batch", "conc", "p50 base", "p50 now", "change", "samples/s base", "now", "change", ""):
        table.add_column(col, justify="right" if col else "left")
    for r in reg["rows"]:
        verdict = "[red bold]REGRESSED[/]" if r["regressed"] else "ok"
        if not r["regressed"] and r["beyond_noise"] and r["p50_change"] > 0:
            verdict = "slower, within bound"
        table.add_row(str(r["batch"]), str(r["concurrency"]), f"{r['p50_ms'][0]:.4f}", f"{r['p50_ms'][1]:.4f}",
                      f"{r['p50_change']:+.1%}", f"{r['throughput'][0]:.1f}", f"{r['throughput'][1]:.1f}",
                      f"{r['throughput_change']:+.1%}", verdict)
    return table


@click.command("bench")
@click.argument("artifact")
@click.option("--batch", "-b", default="1", show_default=True, metavar="N[,N...]", help="Batch sizes to sweep.")
@click.option("--concurrency", "-c", default="1", show_default=True, metavar="N[,N...]",
              help="Requests in flight, each on its own session (cores are split between them).")
@click.option("--latency-budget-ms", type=float,
              help="Mark the knee: best throughput whose --budget-percentile latency fits this.")
@click.option("--budget-percentile", type=click.Choice(["p50", "p90", "p99"]), default="p99", show_default=True,
              help="Which latency the budget bounds.")
@click.option("--warmup", type=click.IntRange(0), default=10, show_default=True, help="Warm-up calls (at least).")
@click.option("--warmup-seconds", type=click.FloatRange(0), default=0.5, show_default=True,
              help="Warm-up time (at least).")
@click.option("--runs", type=click.IntRange(1), default=100, show_default=True, help="Timed calls (at least).")
@click.option("--min-seconds", type=click.FloatRange(0), default=1.0, show_default=True,
              help="Timed time per point (at least).")
@click.option("--max-seconds", type=click.FloatRange(0.01), default=10.0, show_default=True,
              help="Stop a point after this long.")
@click.option("--threads", type=click.IntRange(1), help="Intra-op threads per session [cores / concurrency].")
@click.option("--device", help="cpu or cuda, where the backend has it [the backend's default].")
@click.option("--inputs", "inputs_dir", type=click.Path(path_type=Path),
              help="Real inputs: a folder of .npz (keys = input names, leading batch dim) [random].")
@click.option("--input", "-i", "pins", multiple=True, metavar="NAME:SHAPE",
              help="Size the dynamic dims of an input, e.g. input_ids:1x128 (the batch comes from --batch).")
@click.option("--batching", metavar="on|max_batch_size=N,max_queue_delay_microseconds=N,preferred_batch_size=N/N",
              help="Also measure each point with the concurrent calls batched (Triton's dynamic_batching "
                   "knobs; docs/serve.md).")
@click.option("--batching-sessions", default="1", show_default=True, metavar="N|adaptive",
              help="Sessions the batched calls run on, side by side (the cores are split between them); "
                   "adaptive: a 1-thread session per core plus one with every core for a lone call (docs/serve.md).")
@click.option("--valid-lengths", metavar="short|uniform|full|MIN-MAX",
              help="Random attention masks right-padded to lengths drawn from this distribution "
                   "(docs/bench.md) [all valid].")
@click.option("--length-buckets", is_flag=True,
              help="Run each padded batch as sub-batches of similar length (optcli.load(..., length_buckets=True)).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.option("--save-baseline", type=click.Path(path_type=Path), help="Save this result as a baseline file.")
@click.option("--compare-baseline", type=click.Path(path_type=Path), help="Compare against a saved baseline.")
@click.option("--max-regression", default="10%", show_default=True,
              help="Allowed rise of p50 (or fall of throughput) against the baseline; beyond it: exit 5.")
@click.option("--regression-metric", type=click.Choice(["p50", "throughput"]), default="p50", show_default=True,
              help="What the gate compares: the median latency (robust to stalls) or throughput (from the mean).")
def bench_cmd(artifact: str, batch: str, concurrency: str, as_json: bool, save_baseline: Path | None,
              compare_baseline: Path | None, max_regression: str, regression_metric: str, warmup: int,
              pins: tuple[str, ...], batching: str | None,
              **settings: Any) -> None:
    """Benchmark ARTIFACT (report.json, output folder, .onnx, .engine, .pt2, TorchScript): latency
    percentiles, throughput, CV and the 95% CI of the median over a batch x concurrency sweep."""
    from optcli import api

    settings["warmup_runs"] = warmup
    sessions = str(settings["batching_sessions"]).strip().lower()
    settings["batching_sessions"] = int(sessions) if sessions.isdigit() else sessions  # checked by BenchSettings
    if batching is not None:
        from optcli.batching import parse_batching

        settings["batching"] = parse_batching(batching).to_json()
    result = api.bench(artifact, batch=int_list(batch, "--batch"), concurrency=int_list(concurrency, "--concurrency"),
                       baseline=compare_baseline, max_regression=max_regression,
                       regression_metric=regression_metric, save_baseline=save_baseline,
                       check=False, pins=list(pins), **settings)
    regressed = bool(result.regression and result.regression["regressed"])
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        from optcli.cli.console import stderr_console, stdout_console

        console = stdout_console()
        console.print(_table(result))
        if result.knee:
            where = (f"batch {result.knee['batch']}, concurrency {result.knee['concurrency']}"
                     + (", batched" if result.knee.get("batched") else "")
                     if result.knee.get("batch") else "none")
            console.print(f"knee: {where} ({result.knee['reason']})")
        timer = "perf_counter around each call" + ("; GPU p50: CUDA events around each enqueue" if any(
            p.device_ms for p in result.points) else "")
        console.print(f"inputs: {result.inputs.get('source')}; timer: {timer}")
        if save_baseline:
            console.print(f"baseline saved: {save_baseline}")
        if result.regression:
            console.print(_regression_table(result.regression))
            for note in result.regression["notes"]:
                console.print(f"note: {note}")
        err = stderr_console()
        for w in result.warnings:
            err.print(f"[yellow]warning:[/] {w}")
    if regressed and result.regression and compare_baseline is not None:  # after the table/JSON: main() prints
        from optcli.benchmark.baseline import regression_error  # the line and exits 5

        raise regression_error(result.regression, compare_baseline)
