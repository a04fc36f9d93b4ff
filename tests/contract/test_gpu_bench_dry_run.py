"""benchmarks/gpu_bench.py end to end against the TensorRT double (--dry-run): every step the GPU
run takes (export, optcli's TensorRT INT8 flavour, preflight, build, runner, timing) reaches its
row, and rows are printed as they are measured, so the first real GPU run cannot crash before its
first row."""
from __future__ import annotations

import subprocess
import sys

import pytest

from compile_testkit import REPO, cli_env

pytest.importorskip("torch")


@pytest.mark.slow
def test_gpu_bench_dry_run_prints_every_row(tmp_path):
    out = tmp_path / "gpu.md"
    proc = subprocess.run([sys.executable, "benchmarks/gpu_bench.py", "--dry-run", "--runs", "2", "--warmup", "0",
                           "--batch", "1", "2", "--models", "resnet-small", "--out", str(out)],
                          cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| resnet-small |")]
    runtimes = [(r.split("|")[3].strip(), r.split("|")[4].strip(), r.split("|")[2].strip()) for r in rows]
    assert runtimes == [("PyTorch eager", "fp32", "1"), ("PyTorch eager", "fp32", "2")] + [
        ("TensorRT", p, b) for p in ("fp32", "fp16", "int8") for b in ("1", "2")], proc.stdout
    assert not [r for r in rows if "failed" in r]
    assert proc.stdout.startswith("DRY RUN") and "| resnet-small | 2 | TensorRT | int8 |" in out.read_text()
