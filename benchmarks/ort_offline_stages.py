"""onnxruntime at optimization "all" on the exporter's graph beside optcli's simplified and fused ones:
whether the offline stages give onnxruntime anything it does not do itself at load (the evidence behind
the fast search's route at FP32 and BF16, optcli/cpu/route.py). Batch 1, the bench threads, the graphs
interleaved in rounds (alternating order), the median of every call; ratios to the first graph.

    optcli compile MODEL.onnx --out OUT --search thorough --force   # writes 02-simplify and 03-fuse
    python benchmarks/ort_offline_stages.py MODEL.onnx OUT/02-simplify/model.onnx OUT/03-fuse/model.onnx
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's optcli, not an installed one


def main() -> None:
    import onnxruntime as ort

    from optcli.onnx_model import io_specs, load_onnx
    from optcli.tensor_spec import random_inputs

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("graphs", nargs="+", type=Path, help="ONNX files of one model; the first is the reference")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=1.0, help="per graph per round")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=1000, help="upper bound of integer inputs (token ids)")
    args = parser.parse_args()
    specs, _ = io_specs(load_onnx(args.graphs[0], load_weights=False))
    feeds = random_inputs(specs, 1, seed=1, int_high={s.name: (2 if "type" in s.name else args.vocab) for s in specs})
    sessions = {}
    for path in args.graphs:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = args.threads
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        wanted = {i.name for i in sess.get_inputs()}
        sessions[path] = (sess, {k: v for k, v in feeds.items() if k in wanted})
        for _ in range(3):
            sess.run(None, sessions[path][1])
    times: dict[Path, list[float]] = {p: [] for p in args.graphs}
    for r in range(args.rounds):
        for path in (args.graphs if r % 2 == 0 else args.graphs[::-1]):
            sess, f = sessions[path]
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < args.seconds:
                a = time.perf_counter()
                sess.run(None, f)
                times[path].append((time.perf_counter() - a) * 1000.0)
    base = float(np.median(times[args.graphs[0]]))
    for path in args.graphs:
        m = float(np.median(times[path]))
        print(f"{m:9.3f} ms  {m / base:.3f}x  ({len(times[path])} calls)  {path}")


if __name__ == "__main__":
    main()
