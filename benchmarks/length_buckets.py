"""Length bucketing (`optcli.load(path, length_buckets=True)`) against the plain padded batch, on an
artifact compiled with the unpad stage, in one interleaved run per batch size and length distribution.

    python benchmarks/length_buckets.py ARTIFACT [ARTIFACT...] [--batches 8,32] [--rounds 5]
        [--lengths short,uniform,mixed]

ARTIFACT is anything optcli.load opens (a report.json: its final artifact) taking input_ids and
attention_mask at 128 tokens. Lengths (benchmarks/unpad_cpu.py's): short = median 14 (5..40), uniform
16-128, mixed = 90% short and 10% uniform (a long sentence now and then: where one row makes a batch
pay for its length). Per point: the p50 of a whole batch's call, plain and bucketed (interleaved
blocks, benchmarks' usual interval), their ratio, and the sub-batches per call; answers compared.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from unpad_cpu import SEQ, lengths, padded  # noqa: E402


def draw(kind: str, n: int, seed: int) -> np.ndarray:
    if kind != "mixed":
        return lengths(kind, n, seed)
    short, long = lengths("short", n, seed), lengths("uniform", n, seed + 1)
    return np.where(np.random.default_rng(seed + 2).random(n) < 0.1, long, short)


def main() -> None:
    import optcli
    from optcli.accuracy import compare_outputs, sequence_mask
    from optcli.cpu.measure import interleaved

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifacts", nargs="+")
    parser.add_argument("--batches", default="8,32")
    parser.add_argument("--lengths", default="short,uniform,mixed")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores; padded length {SEQ}; p50 ms per batch call (95% CI); load before: "
          f"{os.getloadavg()[0]:.2f}")
    print(f"{'artifact':<34} {'lengths':<8} {'batch':>5} {'plain p50':>22} {'bucketed p50':>22} {'speedup':>8} "
          f"{'sub-batches':>11} {'max abs diff':>12}")
    for path in args.artifacts:
        plain, bucketed = optcli.load(path), optcli.load(path, length_buckets=True)
        try:
            names = [i.name for i in plain.inputs]
            for kind in args.lengths.split(","):
                for batch in (int(b) for b in args.batches.split(",")):
                    arrays = padded(draw(kind, batch, seed=batch), seed=batch)
                    arrays = {k: v for k, v in arrays.items() if k in names}
                    feeds = {"plain": plain.normalize(arrays), "bucketed": bucketed.normalize(arrays)}
                    before = bucketed.stats()
                    stats, _ = interleaved({"plain": plain, "bucketed": bucketed}, feeds, batch=batch,
                                           min_rounds=args.rounds, calls_per_round=2, min_seconds=0.0,
                                           max_seconds=60.0, block_ms=200.0, switch_ms=20.0)
                    after = bucketed.stats()
                    per_call = (after["sub_batches"] - before["sub_batches"]) / max(1, after["calls"] - before["calls"])
                    want, got = plain.run_normalized(feeds["plain"]), bucketed.run_normalized(feeds["bucketed"])
                    acc = compare_outputs(want, got, [o.name for o in plain.outputs], valid=sequence_mask(arrays))
                    p, b = stats["plain"], stats["bucketed"]
                    ci = lambda s: f"{s['p50']:.2f} ({s['p50_ci'][0]:.2f}-{s['p50_ci'][1]:.2f})"  # noqa: E731
                    label = Path(path).parent.name if Path(path).name == "report.json" else Path(path).name
                    print(f"{label[:34]:<34} {kind:<8} {batch:>5} {ci(p):>22} {ci(b):>22} "
                          f"{p['p50'] / b['p50']:>7.2f}x {per_call:>11.1f} {acc['max_abs_err']:>12.3g}", flush=True)
        finally:
            plain.close()
            bucketed.close()
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
