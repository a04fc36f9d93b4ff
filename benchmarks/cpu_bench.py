"""Compile models in FP32, FP16 and INT8 with optcli, then measure in ONE interleaved run (A B C A B C ...,
so machine drift hits all alike): p50 latency at batch 1 and throughput at batch 8 for PyTorch eager,
ONNX Runtime FP32 (the exported ONNX, ORT's own optimizations on) and each optcli artifact, as ratios
to PyTorch eager, with accuracy from each compile report.

    python benchmarks/cpu_bench.py                       # the sample models (make samples first)
    python benchmarks/cpu_bench.py model.pt2 --calib DIR [--eval DIR]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

SAMPLES = {
    "digits_cnn": ("sample_models/out/digits_cnn.pt2", "calibration/digits_cnn/calib", "calibration/digits_cnn/eval"),
    "tiny_bert": ("sample_models/out/tiny_bert.pt2", "calibration/tiny_bert/calib", "calibration/tiny_bert/eval"),
}


def _runners(name: str, model: str, calib: str, evald: str | None, out: Path) -> dict:
    import optcli
    from optcli.backends.onnxruntime.runner import OnnxRuntimeRunner
    from optcli.backends.torch.loader import detect, load_torch
    from optcli.backends.torch.runner import TorchRunner

    variants = {}
    reports = {}
    for precision in ("fp32", "fp16", "int8"):
        opts = {"bench": False, "out": out / name / precision, "check": False}
        if precision != "fp32":
            opts[precision] = True
        if precision == "int8":
            opts.update(calib=calib, eval=evald)
        report = optcli.compile(model, **opts)
        reports[precision] = report
        if report.status == "ok":
            f = report.final
            path = out / name / precision / f["artifact"]
            options = {"disabled_optimizers": ["NchwcTransformer"]} if precision == "fp16" else {}
            variants[f"optcli {precision}"] = (lambda p=path, o=options: OnnxRuntimeRunner(p, **o))
    export = out / name / "fp32" / reports["fp32"].stage("export").artifact
    variants["onnxruntime fp32"] = lambda: OnnxRuntimeRunner(export)
    tm = load_torch(detect(model), [])
    variants["pytorch eager"] = lambda: TorchRunner(tm.module, tm.inputs)
    return {"variants": variants, "reports": reports, "inputs": tm.inputs, "int_high": tm.int_high}


def _interleaved(variants: dict, feeds_for, rounds: int, calls: int) -> dict[str, list[float]]:
    runners = {k: make() for k, make in variants.items()}
    feeds = {k: r.normalize(feeds_for()) for k, r in runners.items()}
    for k, r in runners.items():  # warm-up
        for _ in range(5):
            r.run_normalized(feeds[k])
    samples: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(rounds):
        for k, r in runners.items():
            for _ in range(calls):
                t0 = time.perf_counter()
                r.run_normalized(feeds[k])
                samples[k].append((time.perf_counter() - t0) * 1000)
    for r in runners.values():
        r.close()
    return samples


def bench_model(name: str, model: str, calib: str, evald: str | None, out: Path, rounds: int) -> list[dict]:
    from optcli.tensor_spec import random_inputs

    setup = _runners(name, model, calib, evald, out)
    rows = []
    lat = _interleaved(setup["variants"], lambda: random_inputs(setup["inputs"], 1, int_high=setup["int_high"]),
                       rounds, 20)
    thr = _interleaved(setup["variants"], lambda: random_inputs(setup["inputs"], 8, int_high=setup["int_high"]),
                       rounds, 5)
    base_p50 = float(np.median(lat["pytorch eager"]))
    base_thr = 8000.0 / float(np.median(thr["pytorch eager"]))
    for k in setup["variants"]:
        p50 = float(np.median(lat[k]))
        tput = 8000.0 / float(np.median(thr[k]))
        acc = {}
        precision = k.split()[-1]
        if k.startswith("optcli"):
            rep = setup["reports"][precision]
            st = rep.stage(f"quantize-{precision}") or rep.stage("fuse")
            acc = {"cosine_mean": st.accuracy.get("cosine_mean") if st.accuracy else None,
                   "top1": st.accuracy.get("top1_accuracy") if st.accuracy else None,
                   "flavour": rep.final.get("flavour") if rep.final else None}
        rows.append({"model": name, "variant": k, "p50_ms_b1": round(p50, 4), "speedup_b1": round(base_p50 / p50, 2),
                     "throughput_b8": round(tput, 1), "speedup_b8": round(tput / base_thr, 2), **acc})
    for precision, rep in setup["reports"].items():
        if rep.status != "ok":
            rows.append({"model": name, "variant": f"optcli {precision}", "error": rep.error})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?")
    parser.add_argument("--calib")
    parser.add_argument("--eval")
    parser.add_argument("--out", default="optcli-out/bench", type=Path)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    todo = {Path(args.model).stem: (args.model, args.calib, args.eval)} if args.model else {
        k: v for k, v in SAMPLES.items() if Path(v[0]).exists()}
    rows = []
    for name, (model, calib, evald) in todo.items():
        rows += bench_model(name, model, calib, evald, args.out, args.rounds)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print("| model | variant | p50 ms (b1) | x eager (b1) | samples/s (b8) | x eager (b8) | cosine vs FP32 | top-1 "
          "| flavour |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['model']} | {r['variant']} | failed: {r['error']['message'] if r['error'] else ''} |||||||")
            continue
        cos = f"{r['cosine_mean']:.5f}" if r.get("cosine_mean") is not None else "-"
        top1 = f"{r['top1']:.4f}" if r.get("top1") is not None else "-"
        print(f"| {r['model']} | {r['variant']} | {r['p50_ms_b1']:.3f} | {r['speedup_b1']:.2f}x | "
              f"{r['throughput_b8']:.0f} | {r['speedup_b8']:.2f}x | {cos} | {top1} | {r.get('flavour') or '-'} |")


if __name__ == "__main__":
    main()
