"""OpenVINO and the unpad rewrite: dynamic shapes inside one model (what optcli ships) against one
static model per bucket (inputs sliced to the bucket on the host, the model reshaped to it), in one
interleaved run per bucket.

    python benchmarks/openvino_buckets.py MODEL.xml [--buckets 16,32,64,128] [--batch 1] [--rounds 5]

MODEL.xml is an IR built from a graph the unpad stage rewrote (its `source-unpadded.onnx`, or an
artifact optcli chose): it takes inputs padded to S and computes up to the batch's bucketed extent.
`dynamic`: that model as built, fed a batch padded to S whose longest row fills the bucket.
`static`: the same model reshaped to [batch, bucket] (OpenVINO compiles it for that shape), fed the
same rows cut to the bucket on the host: what unpadding in the runner with one model per bucket costs.
Outputs are compared on the valid positions.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from unpad_cpu import SEQ, padded  # noqa: E402


class Compiled:
    """A compiled OpenVINO model as the interleaved measurement wants it (run_normalized, backend)."""

    backend = "openvino"
    settings: dict = {}

    def __init__(self, compiled) -> None:
        self.compiled = compiled
        self.request = compiled.create_infer_request()

    def normalize(self, feeds: dict) -> dict:
        return feeds

    def run_normalized(self, feeds: dict) -> list:
        self.request.infer(feeds)
        return [self.request.get_output_tensor(i).data.copy() for i in range(len(self.compiled.outputs))]


def main() -> None:
    import openvino as ov

    from optcli.cpu.measure import interleaved

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--buckets", default="16,32,64,128")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    core = ov.Core()
    config = {"INFERENCE_NUM_THREADS": os.cpu_count() or 1}
    dynamic = Compiled(core.compile_model(core.read_model(args.model), "CPU", config))
    names = [p.get_any_name() for p in core.read_model(args.model).inputs]
    print(f"{os.cpu_count()} cores, batch {args.batch}, padded length {SEQ}; p50 ms (95% CI); load "
          f"{os.getloadavg()[0]:.2f}")
    print(f"{'bucket':>6} {'dynamic (padded to S)':>24} {'static per bucket':>24} {'static vs dynamic':>17} "
          f"{'max abs diff':>12} {'compile s':>9}")
    for bucket in (int(b) for b in args.buckets.split(",")):
        import time

        lens = np.full(args.batch, bucket)
        lens[1:] = np.maximum(1, bucket - 7)  # the longest row fills the bucket
        full = {k: v for k, v in padded(lens, seed=bucket).items() if k in names}
        cut = {k: np.ascontiguousarray(v[:, :bucket]) for k, v in full.items()}
        model = core.read_model(args.model)
        model.reshape({n: ov.PartialShape([args.batch, bucket]) for n in names})
        t0 = time.perf_counter()
        static = Compiled(core.compile_model(model, "CPU", config))
        compile_s = time.perf_counter() - t0
        stats, _ = interleaved({"dynamic": dynamic, "static": static}, {"dynamic": full, "static": cut},
                               batch=args.batch, min_rounds=args.rounds, calls_per_round=3, min_seconds=0.0,
                               max_seconds=30.0, block_ms=150.0, switch_ms=20.0)
        a, b = dynamic.run_normalized(full)[0], static.run_normalized(cut)[0]
        diff = float(np.abs(a[:, :bucket] - b[:, :bucket]).max()) if a.ndim >= 2 else float(np.abs(a - b).max())
        d, s = stats["dynamic"], stats["static"]
        ci = lambda x: f"{x['p50']:.2f} ({x['p50_ci'][0]:.2f}-{x['p50_ci'][1]:.2f})"  # noqa: E731
        print(f"{bucket:>6} {ci(d):>24} {ci(s):>24} {d['p50'] / s['p50']:>16.2f}x {diff:>12.3g} {compile_s:>9.2f}",
              flush=True)


if __name__ == "__main__":
    main()
