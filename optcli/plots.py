"""PNG charts for `profile --plot` and `compare --plot` (matplotlib: the optional `plot` extra)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from optcli.atomic_write import atomic_path
from optcli.optional_imports import require

if TYPE_CHECKING:
    from optcli.comparison.result import CompareResult
    from optcli.profiling.result import ProfileResult
    from optcli.quantize.debug_int8 import SensitivityReport


def _pyplot() -> Any:
    matplotlib = require("matplotlib", "--plot")
    matplotlib.use("Agg")  # files only: never open a window, works without a display
    return require("matplotlib.pyplot", "--plot")


def _save(fig: Any, path: Path) -> None:
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)


def plot_profile(result: ProfileResult, path: Path, top: int = 15) -> None:
    """Horizontal bars: the top-N layers by share of the summed kernel time."""
    plt = _pyplot()
    layers = result.top(top)
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(layers) + 1.5))
    try:
        labels = [f"{x.name[:48]} ({x.op_type})" for x in layers]
        ax.barh(range(len(layers)), [x.share * 100 for x in layers], color="#4878a8")
        ax.set_yticks(range(len(layers)), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("share of kernel time per run (%, medians)")
        ax.set_title(f"{Path(result.artifact['path']).name}: top {len(layers)} of {len(result.layers)} "
                     f"({result.runtime}, {result.runs} runs)", fontsize=10)
        fig.tight_layout()
        _save(fig, path)
    finally:
        plt.close(fig)


def plot_compare(result: CompareResult, path: Path) -> None:
    """Latency p50 against accuracy, one labelled point per variant; the Pareto set ringed."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    try:
        for v in result.measured():
            acc = v.accuracy_value()
            y = acc if acc is not None else 1.0
            ax.scatter([v.p50_ms], [y], s=60, color="#2a9d55" if v.meets_tolerance else "#c0392b",
                       edgecolors="black" if v.name in result.pareto else "none", linewidths=1.5, zorder=3)
            ax.annotate(v.name + (" *" if v.name == result.recommended else ""), (v.p50_ms, y),
                        textcoords="offset points", xytext=(6, 4), fontsize=9)
        if result.tolerance.get("cosine") is not None:
            ax.axhline(result.tolerance["cosine"], ls="--", color="grey", lw=1)
        ax.set_xlabel("latency p50 at batch 1 (ms)")
        ax.set_ylabel("accuracy: mean cosine vs FP32")
        ax.set_title("variants (ringed: Pareto set, *: recommended)", fontsize=10)
        fig.tight_layout()
        _save(fig, path)
    finally:
        plt.close(fig)


def plot_sensitivity(report: SensitivityReport, path: Path, top: int = 20) -> None:
    """Horizontal bars: each unit's local damage, most damaging first; where it was measured end to
    end, the mean cosine gained by keeping it alone in float is written beside the bar."""
    plt = _pyplot()
    rows = report["units"][:top]
    fig, ax = plt.subplots(figsize=(10, 0.35 * len(rows) + 1.8))
    try:
        values = [r["local_damage"] or 0.0 for r in rows]
        ax.barh(range(len(rows)), values, color="#4878a8")
        for i, r in enumerate(rows):
            if r["cosine_gain_in_float"] is not None:
                ax.annotate(f"float: {r['cosine_gain_in_float']:+.4f}", (max(values[i], 0.0), i),
                            textcoords="offset points", xytext=(4, -3), fontsize=7, color="#c0504d")
        ax.set_yticks(range(len(rows)), [f"{(r['module'] or r['node'])[-56:]} ({r['op_type']}, {r['flops_share']:.1%})"
                                         for r in rows], fontsize=8)
        ax.invert_yaxis()
        ax.ticklabel_format(axis="x", style="sci", scilimits=(-2, 2))
        ax.set_xlabel("local damage (mean 1 - cosine added at the unit); red: cosine gained kept in float")
        acc = report["int8_accuracy"].get("cosine_mean", 0.0)
        ax.set_title(f"{Path(report['model']).name}: INT8 ({report['flavour']['name']}) mean cosine {acc:.4f}",
                     fontsize=10)
        fig.tight_layout()
        _save(fig, path)
    finally:
        plt.close(fig)
