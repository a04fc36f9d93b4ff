"""`optcli bench`: the sweep, --json, --inputs, and the regression gate forced both ways."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import optcli
from measuring_models import make_mlp_onnx, run_cli
from optcli.errors import EXIT_REGRESSION, EXIT_USAGE, RegressionError, UsageError

QUICK = ["--runs", "5", "--min-seconds", "0", "--max-seconds", "0.3", "--warmup", "2", "--warmup-seconds", "0"]
QUICK_API = {"runs": 5, "min_seconds": 0.0, "max_seconds": 0.3, "warmup_runs": 2, "warmup_seconds": 0.0}


def test_bench_json_sweep(mlp_onnx: Path) -> None:
    proc = run_cli("bench", str(mlp_onnx), "--batch", "1,4", "--concurrency", "1,2", "--json", *QUICK)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["kind"] == "optcli-bench" and data["runtime"] == "onnxruntime-cpu"
    assert [(p["batch"], p["concurrency"]) for p in data["points"]] == [(1, 1), (1, 2), (4, 1), (4, 2)]
    for p in data["points"]:
        lat = p["latency_ms"]
        assert lat["runs"] >= 5 and lat["batch"] == p["batch"]
        assert lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
        assert p["p50_ci95_ms"][0] <= lat["p50"] <= p["p50_ci95_ms"][1]
        assert p["throughput"] > 0 and lat["cv"] >= 0
        assert lat["settings"]["concurrency"] == p["concurrency"]
    knee = data["knee"]
    assert (knee["batch"], knee["concurrency"]) in [(p["batch"], p["concurrency"]) for p in data["points"]]
    assert len(data["artifact"]["sha256"]) == 64


def test_bench_table_marks_the_knee(mlp_onnx: Path) -> None:
    proc = run_cli("bench", str(mlp_onnx), "--batch", "1,2", "--latency-budget-ms", "10000", *QUICK)
    assert proc.returncode == 0, proc.stderr
    assert "<- knee" in proc.stdout and "best throughput with p99 <= 10000 ms" in proc.stdout
    assert "p50 95% CI" in proc.stdout


def test_bench_pytorch_files(cnn_pt2: Path) -> None:
    result = optcli.bench(cnn_pt2, batch=[1, 2], **QUICK_API)
    assert result.runtime == "torch-cpu" and len(result.points) == 2
    proc = run_cli("bench", str(cnn_pt2.with_suffix(".ts")), "--input", "x:1x1x8x8", "--batch", "3", "--json", *QUICK)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["points"][0]["batch"] == 3
    proc = run_cli("bench", str(cnn_pt2.with_suffix(".ts")), *QUICK)
    assert proc.returncode == 2 and "does not record input shapes" in proc.stderr


def test_bench_real_inputs_from_npz(embedding_onnx: Path, tmp_path: Path) -> None:
    data = tmp_path / "inputs"
    data.mkdir()
    np.savez(data / "a.npz", ids=np.full((3, 5), 2, np.int64), attention_mask=np.ones((3, 5), np.int64))
    result = optcli.bench(embedding_onnx, batch=[8], inputs_dir=data, **QUICK_API)
    assert result.inputs["source"] == f"3 samples from {data}"
    np.savez(data / "a.npz", input_ids=np.zeros((3, 5), np.int64))
    with pytest.raises(UsageError, match="lacks input 'attention_mask'|lacks input 'ids'") as info:
        optcli.bench(embedding_onnx, inputs_dir=data, **QUICK_API)
    assert "attention_mask, ids" in info.value.hint


def test_fixed_batch_model_refuses_other_batches(tmp_path: Path) -> None:
    fixed = make_mlp_onnx(tmp_path / "fixed.onnx", batch=1)
    proc = run_cli("bench", str(fixed), "--batch", "4", *QUICK)
    assert proc.returncode == EXIT_USAGE
    assert "fixed batch of 1" in proc.stderr and "hint: use --batch 1" in proc.stderr
    assert "Traceback" not in proc.stderr


def _crafted(baseline: Path, out: Path, scale: float) -> Path:
    """The saved baseline with every latency multiplied (throughput divided) by `scale`."""
    data = json.loads(baseline.read_text())
    for p in data["points"]:
        for k in ("p50", "p90", "p99", "mean", "min", "max"):
            p["latency_ms"][k] *= scale
        p["p50_ci95_ms"] = [v * scale for v in p["p50_ci95_ms"]]
        p["throughput"] /= scale
    out.write_text(json.dumps(data))
    return out


def test_regression_gate_passes_and_fails(mlp_onnx: Path, tmp_path: Path) -> None:
    saved = tmp_path / "baseline.json"
    proc = run_cli("bench", str(mlp_onnx), "--batch", "1,2", "--save-baseline", str(saved), *QUICK)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(saved.read_text())["kind"] == "optcli-bench"
    # A baseline 100x slower than anything this machine does: no regression, exit 0.
    slow = _crafted(saved, tmp_path / "slow.json", 100.0)
    ok = run_cli("bench", str(mlp_onnx), "--batch", "1,2", "--compare-baseline", str(slow), "--max-regression", "10%",
                 "--json", *QUICK)
    assert ok.returncode == 0, ok.stderr
    reg = json.loads(ok.stdout)["regression"]
    assert reg["regressed"] is False and reg["bound"] == pytest.approx(0.10) and len(reg["rows"]) == 2
    assert all(r["p50_change"] < -0.9 for r in reg["rows"])
    # A baseline 100x faster: every point regressed, exit 5 with a one-line error and a hint.
    fast = _crafted(saved, tmp_path / "fast.json", 0.01)
    bad = run_cli("bench", str(mlp_onnx), "--batch", "1,2", "--compare-baseline", str(fast), "--max-regression", "10%",
                  *QUICK)
    assert bad.returncode == EXIT_REGRESSION
    assert "REGRESSED" in bad.stdout
    assert "error: performance regression at batch" in bad.stderr and "beyond the 10% bound" in bad.stderr
    assert "hint: if the slowdown is expected" in bad.stderr and "Traceback" not in bad.stderr
    # The same gate on throughput, through the API.
    with pytest.raises(RegressionError, match="throughput fell") as info:
        optcli.bench(mlp_onnx, batch=[1, 2], baseline=fast, max_regression=0.5, regression_metric="throughput",
                     **QUICK_API)
    assert info.value.result.regression["regressed"]


def test_baseline_problems_are_usage_errors(mlp_onnx: Path, tmp_path: Path) -> None:
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    proc = run_cli("bench", str(mlp_onnx), "--compare-baseline", str(junk), *QUICK)
    assert proc.returncode == EXIT_USAGE and "not readable JSON" in proc.stderr
    saved = tmp_path / "b.json"
    optcli.bench(mlp_onnx, batch=[2], save_baseline=saved, **QUICK_API)
    # Hostile files end the same way (issue 30): was RecursionError / AttributeError (exit 1) and a NaN or
    # negative p50 that compared as `+0.0% ok`.
    nested = tmp_path / "nested.json"
    nested.write_text("[" * 100_000 + "]" * 100_000)
    listed = tmp_path / "listed.json"
    listed.write_text(json.dumps({**json.loads(saved.read_text()), "artifact": []}))
    for p50, name in ((float("nan"), "nan.json"), (-3.0, "negative.json")):
        data = json.loads(saved.read_text())
        data["points"][0]["latency_ms"]["p50"] = p50
        (tmp_path / name).write_text(json.dumps(data))
    for bad in (nested, listed, tmp_path / "nan.json", tmp_path / "negative.json"):
        proc = run_cli("bench", str(mlp_onnx), "--batch", "2", "--compare-baseline", str(bad), *QUICK)
        assert proc.returncode == EXIT_USAGE, (bad.name, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 2 and lines[0].startswith("error: baseline") and lines[1].startswith("hint:"), lines
    with pytest.raises(UsageError, match="no \\(batch, concurrency\\) point in common"):
        optcli.bench(mlp_onnx, batch=[1], baseline=saved, **QUICK_API)
    with pytest.raises(UsageError, match="ambiguous"):
        optcli.bench(mlp_onnx, baseline=saved, max_regression="10", **QUICK_API)


def test_bad_flags_are_one_line_errors(mlp_onnx: Path) -> None:
    proc = run_cli("bench", str(mlp_onnx), "--batch", "1,x")
    assert proc.returncode == EXIT_USAGE and "not a list of integers" in proc.stderr
    proc = run_cli("bench", str(mlp_onnx), "--concurrency", "0")
    assert proc.returncode == EXIT_USAGE and "values must be >= 1" in proc.stderr


def test_gpu_runners_add_cuda_event_times(mlp_onnx: Path, register_backend) -> None:
    from rich.console import Console

    from optcli.benchmark.sweep import BenchSettings, run_sweep
    from optcli.cli.bench_cmd import _table
    from optcli.loaded_model import ResolvedArtifact

    register_backend("measuring_models")  # its BACKEND runs the "gpu-timed" format
    result = run_sweep(ResolvedArtifact(mlp_onnx, "gpu-timed"),
                       BenchSettings(batches=[1, 2], concurrency=[1, 2], **{k: v for k, v in QUICK_API.items()}))
    by_key = {p.key: p for p in result.points}
    assert by_key[(1, 1)].device_ms["p50"] == 0.25 and by_key[(1, 1)].device_ms["timer"] == "cuda events"
    assert by_key[(2, 1)].device_ms["runs"] >= 20 and by_key[(1, 2)].device_ms is None
    console = Console(width=200, record=True)
    console.print(_table(result))
    assert "GPU p50 ms" in console.export_text()
    assert result.to_json()["points"][0]["device_ms"]["p50"] == 0.25


def test_bench_with_batching(mlp_onnx: Path, tmp_path: Path) -> None:
    """--batching measures each point again with the concurrent calls batched (optcli/batching.py)."""
    proc = run_cli("bench", str(mlp_onnx), "--concurrency", "1,4", "--batching",
                   "max_batch_size=8,max_queue_delay_microseconds=2000", "--json", *QUICK)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    keys = [(p["batch"], p["concurrency"], p["batches"] is not None) for p in data["points"]]
    assert keys == [(1, 1, False), (1, 1, True), (1, 4, False), (1, 4, True)]
    batched = [p for p in data["points"] if p["batches"]]
    assert batched[0]["batches"]["options"]["max_queue_delay_microseconds"] == 2000
    assert batched[1]["batches"]["mean"] > 1  # 4 callers and a 2 ms delay: batches form
    assert batched[1]["latency_ms"]["settings"]["batching"]["max_batch_size"] == 8
    table = run_cli("bench", str(mlp_onnx), "--concurrency", "2", "--batching", "on", "--batching-sessions", "2",
                    *QUICK)
    assert table.returncode == 0 and "batched (mean batch)" in table.stdout
    # A saved baseline with batched points still gates only the plain ones.
    optcli.bench(mlp_onnx, concurrency=[2], batching=True, save_baseline=tmp_path / "b.json", **QUICK_API)
    again = optcli.bench(mlp_onnx, concurrency=[2], batching=True, baseline=tmp_path / "b.json",
                         max_regression="900%", check=False, **QUICK_API)
    assert [(r["batch"], r["concurrency"]) for r in again.regression["rows"]] == [(1, 2)]
    bad = run_cli("bench", str(mlp_onnx), "--batching", "max_batch_size=0", *QUICK)
    assert bad.returncode == 2 and "error: batching max_batch_size 0" in bad.stderr


def test_bench_measures_the_adaptive_layout_and_refuses_bad_session_counts(mlp_onnx: Path) -> None:
    proc = run_cli("bench", str(mlp_onnx), "--concurrency", "4", "--batching", "on", "--batching-sessions",
                   "adaptive", "--json", *QUICK)
    assert proc.returncode == 0, proc.stderr
    batched = [p for p in json.loads(proc.stdout)["points"] if p["batches"]]
    assert [p["batches"]["sessions"] for p in batched] == ["adaptive"]
    assert batched[0]["latency_ms"]["settings"]["intra_op_threads"] == 1
    for args, what in ((("--batching-sessions", "0"), "--batching-sessions 0"),
                       (("--batching-sessions", "wide"), "--batching-sessions 'wide'"),
                       (("--batching-sessions", "adaptive", "--threads", "2"),
                        "--batching-sessions 'adaptive' lays out")):
        bad = run_cli("bench", str(mlp_onnx), "--batching", "on", *args, *QUICK)
        assert bad.returncode == 2 and f"error: {what}" in bad.stderr and "hint:" in bad.stderr, bad.stderr
