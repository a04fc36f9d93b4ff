"""A model over protobuf's 2 GiB limit through every stage: peak memory per stage against the model's size.

    .venv/bin/python benchmarks/large_model.py [--layers 8] [--width 8192] [--precision int8] [--backend auto]

Builds an MLP of `layers` Linear(width, width) (8 x 8192^2 fp32 = 2.15 GB), calibration data, and runs
`optcli compile` in a subprocess while sampling the resident memory of its process tree every 0.2 s.
Prints each stage's seconds and peak RSS (the samples inside the stage's time window, from the
stage events' timestamps) and the ratio to the model's size.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

FACTORY = '''
import torch

class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear({w}, {w}) for _ in range({n}))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            x = torch.relu(x) if i < len(self.layers) - 1 else x
        return x

def make():
    torch.manual_seed(0)
    return Mlp().eval(), {{"x": torch.randn(1, {w})}}
'''


def tree_rss_mb(pid: int) -> float:
    """Resident memory of `pid` and its descendants, MB."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            total += int(next(line for line in open(f"/proc/{p}/status") if line.startswith("VmRSS")).split()[1])
            todo += [int(c) for c in open(f"/proc/{p}/task/{p}/children").read().split()]
        except (OSError, StopIteration, ValueError):
            pass
    return total / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--width", type=int, default=8192)
    ap.add_argument("--precision", choices=["fp32", "int8"], default="int8")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--keep", type=Path, help="work folder to keep (default: a temporary one)")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="optcli-large-"))
    work.mkdir(parents=True, exist_ok=True)
    (work / "mlp.py").write_text(FACTORY.format(w=args.width, n=args.layers))
    rng = np.random.default_rng(0)
    for sub, n in (("calib", 2), ("eval", 1)):
        (work / sub).mkdir(exist_ok=True)
        for i in range(n):
            np.savez(work / sub / f"part-{i}.npz", x=rng.standard_normal((16, args.width)).astype(np.float32))
    size_mb = args.layers * (args.width * args.width + args.width) * 4 / 1e6
    out = work / "out"
    cmd = [sys.executable, "-m", "optcli", "compile", f"{work / 'mlp.py'}:make", "--out", str(out), "--force",
           "--no-bench", "--backend", args.backend, "--json"]
    if args.precision == "int8":
        cmd += ["--int8", "--calib", str(work / "calib"), "--eval", str(work / "eval")]
    start = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    samples: list[tuple[float, float]] = []
    while proc.poll() is None:
        samples.append((time.time() - start, tree_rss_mb(proc.pid)))
        time.sleep(0.2)
    report = json.loads(proc.stdout.read() or "{}")
    wall = time.time() - start
    print(f"model: {args.layers} x Linear({args.width}, {args.width}) = {size_mb / 1000:.2f} GB fp32, "
          f"{args.precision}, exit {proc.returncode}, {wall:.0f} s")
    print(f"{'stage':16} {'status':10} {'seconds':>8} {'peak RSS GB':>12} {'x model':>8}")
    t = samples[0][0] if samples else 0.0
    t = 0.0
    overall = max((r for _, r in samples), default=0.0)
    for stage in report.get("stages", []):
        secs = stage.get("seconds") or 0.0
        window = [r for s, r in samples if t <= s <= t + secs + 0.5] if secs else []
        peak = max(window, default=0.0)
        print(f"{stage['name']:16} {stage['status']:10} {secs:8.1f} {peak / 1000:12.2f} {peak / size_mb:8.2f}")
        t += secs
    print(f"{'whole run':16} {report.get('status', '?'):10} {wall:8.1f} "
          f"{overall / 1000:12.2f} {overall / size_mb:8.2f}")
    print("(stage windows are approximate: they add stage seconds from the start; the model load before export and"
          " the report writing between stages shift them slightly)")


if __name__ == "__main__":
    main()
