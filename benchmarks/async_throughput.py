"""Does predict_async at concurrency 2-4 raise throughput over sequential predict at batch 1?

    python benchmarks/async_throughput.py [MODEL] [--turn-seconds 2] [--rounds 3] [--json]

MODEL is anything optcli.load opens (.onnx, report.json, .pt2, ...); without one, a small CNN
(3x64x64 -> 10) is built inline with onnx.helper. Each configuration runs with optcli.load's
defaults: sequential `predict` on one session with every core; `predict_async` with N sessions,
the cores split between them, and 2N requests kept queued. The configurations take turns
(seq, c1, c2, c4, seq, c1, ...) for `--rounds` rounds so machine drift hits all of them alike;
ratios are requests/s over sequential's, from the summed turns, with the per-round range.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

import numpy as np


def build_cnn(path: Path) -> Path:
    """conv3x3(3->16)+relu, conv3x3 stride 2 (16->32)+relu, global average pool, gemm -> 10."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def init(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)

    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2], name="conv2"),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="pool"),
             helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "w3", "b3"], ["y"], transB=1, name="fc")]
    graph = helper.make_graph(nodes, "small_cnn",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 64, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])],
                              [init("w1", 16, 3, 3, 3), init("b1", 16), init("w2", 32, 16, 3, 3), init("b2", 32),
                               init("w3", 10, 32), init("b3", 10)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def sequential_turn(model, feeds, seconds: float) -> tuple[int, float]:
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        model.predict(feeds)
        n += 1
    return n, time.perf_counter() - t0


def async_turn(model, feeds, seconds: float, depth: int) -> tuple[int, float]:
    queue: deque = deque()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        while len(queue) < depth:
            queue.append(model.predict_async(feeds))
        queue.popleft().result()
        n += 1
    while queue:  # what is in flight finishes inside the measured time
        queue.popleft().result()
        n += 1
    return n, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", help="artifact to run [a small CNN built inline]")
    parser.add_argument("--levels", default="1,2,4", help="predict_async concurrency levels")
    parser.add_argument("--turn-seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import optcli
    from optcli.benchmark.feeds import FeedSource

    tmp = tempfile.TemporaryDirectory()
    model_path = Path(args.model) if args.model else build_cnn(Path(tmp.name) / "small_cnn.onnx")
    levels = [int(v) for v in args.levels.split(",")]
    models = {"sequential": optcli.load(model_path)}
    models.update({f"async c={c}": optcli.load(model_path, concurrency=c) for c in levels})
    feeds = FeedSource.for_runner(models["sequential"]).batch(1)
    for m in models.values():  # warm-up: first calls allocate
        for _ in range(20):
            m.predict(feeds)
    totals = {name: [0, 0.0] for name in models}
    per_round: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(args.rounds):
        for name, m in models.items():
            if name == "sequential":
                n, secs = sequential_turn(m, feeds, args.turn_seconds)
            else:
                n, secs = async_turn(m, feeds, args.turn_seconds, depth=2 * m.concurrency)
            totals[name][0] += n
            totals[name][1] += secs
            per_round[name].append(n / secs)
    for m in models.values():
        m.close()
    seq_rate = totals["sequential"][0] / totals["sequential"][1]
    rows = []
    for name in models:
        rate = totals[name][0] / totals[name][1]
        ratios = [r / s for r, s in zip(per_round[name], per_round["sequential"])]
        rows.append({"config": name, "requests_per_s": round(rate, 1), "ratio": round(rate / seq_rate, 3),
                     "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
                     "intra_op_threads": models[name].threads})
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    info = {"model": str(args.model or "small CNN 3x64x64 (inline)"), "batch": 1, "rounds": args.rounds,
            "turn_seconds": args.turn_seconds, "cpu_count": os.cpu_count(), "load_average_after": load,
            "python": sys.version.split()[0], "rows": rows}
    if args.json:
        print(json.dumps(info, indent=2))
        return
    load_text = f"{load:.2f}" if load is not None else "n/a"
    print(f"model: {info['model']}; batch 1; {args.rounds} interleaved rounds of {args.turn_seconds:g} s per config; "
          f"{os.cpu_count()} cores; load average after: {load_text}")
    print(f"{'config':<14}{'threads':>8}{'req/s':>11}{'vs sequential':>15}{'per-round range':>20}")
    for r in rows:
        lo, hi = r["ratio_range"]
        print(f"{r['config']:<14}{r['intra_op_threads']:>8}{r['requests_per_s']:>11.1f}{r['ratio']:>14.2f}x"
              f"{f'{lo:.2f}x - {hi:.2f}x':>20}")


if __name__ == "__main__":
    main()
