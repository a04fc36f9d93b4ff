"""Does in-process dynamic batching (optcli.load(..., batching=...)) raise batch-1 request throughput
over concurrency alone?

    python benchmarks/batching_throughput.py MODEL [--clients 4,16] [--max-batch-size 16]
        [--delay-us 0] [--turn-seconds 2] [--rounds 5] [--json]

MODEL is anything optcli.load opens (report.json, .onnx, ...). At each client count N, N threads
send batch-1 requests back to back to one of these configurations, which take turns (A B C A B C
...) for --rounds rounds so drift in the machine's load hits all of them alike:

- `concurrency N`: optcli.load(MODEL, concurrency=N): N sessions, the cores split between them;
  every request runs alone (what `optcli bench --concurrency N` measures);
- `batched 1 session`: optcli.load(MODEL, batching=...): one session with every core; requests in
  flight are gathered into batches of up to --max-batch-size;
- `batched 2 sessions`: concurrency=2 sessions of one thread each, batching on top.

Requests/s are summed over the rounds; p50/p99 latency per request come from every timed call.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing


def configs(model: str, clients: int, batching: dict[str, Any]) -> dict[str, Any]:
    import optcli

    cores = os.cpu_count() or 1
    return {
        f"concurrency {clients}": lambda: optcli.load(model, concurrency=clients),
        "batched 1 session": lambda: optcli.load(model, threads=cores, batching=batching),
        "batched 2 sessions": lambda: optcli.load(model, concurrency=2, threads=max(1, cores // 2),
                                                  batching=batching),
    }


def turn(make: Any, clients: int, seconds: float) -> tuple[int, float, list[float], float | None]:
    """One timed turn: (calls, wall seconds, per-call ms, mean batch where batched)."""
    from optcli.latency import time_concurrent

    model = make()
    try:
        from optcli.benchmark.feeds import FeedSource

        feeds = model.normalize(FeedSource.for_runner(model).batch(1))
        before = model.stats() if hasattr(model, "stats") else None
        samples, wall = time_concurrent(lambda: model.run_normalized(feeds), clients, warmup_runs=20,
                                        warmup_seconds=0.3, runs=50, min_seconds=seconds, max_seconds=seconds * 2)
        mean = None
        if before is not None:
            after = model.stats()
            batches = after["batches"] - before["batches"]
            mean = (after["rows"] - before["rows"]) / batches if batches else None
        return len(samples), wall, samples, mean
    finally:
        model.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--clients", default="4,16")
    parser.add_argument("--max-batch-size", type=int, default=16)
    parser.add_argument("--delay-us", type=int, default=0)
    parser.add_argument("--turn-seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    batching = {"max_batch_size": args.max_batch_size, "max_queue_delay_microseconds": args.delay_us}
    results = []
    for clients in (int(c) for c in args.clients.split(",")):
        table = configs(args.model, clients, batching)
        acc: dict[str, dict[str, Any]] = {k: {"calls": 0, "wall": 0.0, "ms": [], "batch": [], "rates": []}
                                          for k in table}
        for _ in range(args.rounds):
            for name, make in table.items():
                calls, wall, ms, mean = turn(make, clients, args.turn_seconds)
                a = acc[name]
                a["calls"] += calls
                a["wall"] += wall
                a["ms"] += ms
                a["rates"].append(calls / wall)
                if mean is not None:
                    a["batch"].append(mean)
        base = acc[f"concurrency {clients}"]["calls"] / acc[f"concurrency {clients}"]["wall"]
        for name, a in acc.items():
            rate = a["calls"] / a["wall"]
            results.append({"clients": clients, "config": name, "req_per_s": round(rate, 1),
                            "vs_concurrency": round(rate / base, 2),
                            "round_range": [round(min(a["rates"]) / base, 2), round(max(a["rates"]) / base, 2)],
                            "p50_ms": round(float(np.percentile(a["ms"], 50)), 3),
                            "p99_ms": round(float(np.percentile(a["ms"], 99)), 3),
                            "mean_batch": round(float(np.mean(a["batch"])), 2) if a["batch"] else None})
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    if args.json:
        print(json.dumps({"model": args.model, "batching": batching, "rounds": args.rounds,
                          "turn_seconds": args.turn_seconds, "load_average_after": load, "results": results},
                         indent=2))
        return
    print(f"model: {args.model}; batch-1 requests; batching {batching}; {args.rounds} interleaved rounds of "
          f"{args.turn_seconds:g} s per config; {os.cpu_count()} cores; load average after: {load:.2f}")
    print(f"{'clients':>7}  {'config':<20} {'req/s':>9} {'vs conc':>8} {'per-round':>13} {'p50 ms':>8} "
          f"{'p99 ms':>8} {'mean batch':>10}")
    for r in results:
        lo, hi = r["round_range"]
        print(f"{r['clients']:>7}  {r['config']:<20} {r['req_per_s']:>9.1f} {r['vs_concurrency']:>7.2f}x "
              f"{lo:>5.2f}-{hi:<5.2f}x {r['p50_ms']:>8.3f} {r['p99_ms']:>8.3f} "
              f"{r['mean_batch'] if r['mean_batch'] is not None else '-':>10}")


if __name__ == "__main__":
    main()
