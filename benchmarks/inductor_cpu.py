"""AOTInductor beside the other CPU candidates on the sample models, in ONE interleaved run per model.

    python benchmarks/inductor_cpu.py [--models digits_cnn,tiny_bert] [--rounds 10] [--threads N]
                                      [--json] [--markdown FILE] [--out optcli-out/inductor-cpu]

Variants: PyTorch eager FP32 (the reference), ONNX Runtime FP32 and OpenVINO FP32 (on the dynamo
exporter's ONNX), OpenVINO+NNCF INT8 (NNCF defaults, the calibration set), AOTInductor FP32 (dynamic
batch) and INT8 (PT2E with torchao's X86InductorQuantizer; one package per batch size: optcli's INT8
packages have a fixed batch, see optcli/backends/inductor/int8.py). Each at batch 1 and 8: every
(variant, batch) is one entry of the same interleaved run (optcli/cpu/measure.py), so a shared
machine's load hits them alike. Compile seconds: what it takes from the .pt2 to a runnable artifact
(ONNX export, + conversion, + quantization; torch.export is free for a .pt2), with no cache.
Accuracy: on the first 128 evaluation samples against PyTorch eager FP32.

Needs the sample models (`make samples`), `optcli[openvino]` and, for INT8, `optcli[inductor]`.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from cpu_backends import MODELS, _load, _nncf  # benchmarks/ is on sys.path when run as a script

BATCHES = (1, 8)
EVAL_SAMPLES = 128


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _export_onnx(tm: Any, folder: Path) -> tuple[Path, float]:
    import torch

    path = folder / "model.onnx"

    def export() -> None:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            torch.onnx.export(tm.exported_program, args=(), dynamo=True, external_data=False).save(str(path))

    return path, _timed(export)[1]


def _openvino_fp32(onnx_path: Path, folder: Path) -> tuple[Path, float]:
    import openvino as ov

    xml = folder / "openvino-fp32.xml"
    _, seconds = _timed(lambda: ov.save_model(ov.convert_model(str(onnx_path)), str(xml), compress_to_fp16=False))
    return xml, seconds


def _inductor(tm: Any, inputs: list, folder: Path, precision: str, calib: Any, batch: int) -> tuple[Path, float]:
    from optcli.backends.inductor.package import build_package

    out = folder / f"inductor-{precision}-b{batch}.pt2"
    info = build_package(tm, inputs, out, precision=precision, calib=calib, batch=batch, cache=None)
    return out, info["export_seconds"] + info["compile_seconds"]


Factories = dict[str, dict[int, Callable[[], Any]]]


def build_variants(name: str, out: Path, threads: int | None) -> tuple[Factories, dict[str, float], Any]:
    """{variant: {batch: runner factory}}, {variant: compile seconds}, the loaded PyTorch model."""
    from optcli.backends.inductor.runner import InductorRunner
    from optcli.backends.onnxruntime.runner import OnnxRuntimeRunner
    from optcli.backends.openvino.runner import OpenVINORunner
    from optcli.backends.torch.loader import detect, load_torch
    from optcli.backends.torch.runner import TorchRunner
    from optcli.calibration.dataset import SampleSet
    from optcli.tensor_spec import with_batch

    model, data = MODELS[name]
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    tm = load_torch(detect(model), [])
    inputs = with_batch(tm.inputs, "batch")
    names = [s.name for s in inputs]
    calib_arrays, _ = _load(Path(data) / "calib", names)
    calib = SampleSet(calib_arrays, None, f"{data}/calib", "npz")
    onnx_path, export_s = _export_onnx(tm, folder)
    xml, convert_s = _openvino_fp32(onnx_path, folder)
    nncf_xml, nncf_s = _timed(lambda: _nncf(onnx_path, calib_arrays, False, folder))
    fp32_pkg, fp32_s = _inductor(tm, inputs, folder, "fp32", None, 1)
    factories: Factories = {
        "pytorch eager fp32": {b: lambda: TorchRunner(tm.module, inputs, threads=threads) for b in BATCHES},
        "onnxruntime fp32": {b: lambda: OnnxRuntimeRunner(onnx_path, threads=threads) for b in BATCHES},
        "openvino fp32": {b: lambda: OpenVINORunner(xml, precision="fp32", threads=threads) for b in BATCHES},
        "openvino+nncf int8": {b: lambda: OpenVINORunner(nncf_xml, precision="auto", threads=threads)
                               for b in BATCHES},
        "inductor fp32": {b: lambda: InductorRunner(fp32_pkg, threads=threads) for b in BATCHES},
    }
    seconds = {"pytorch eager fp32": 0.0, "onnxruntime fp32": export_s, "openvino fp32": export_s + convert_s,
               "openvino+nncf int8": export_s + convert_s + nncf_s, "inductor fp32": fp32_s}
    try:
        int8 = {b: _inductor(tm, inputs, folder, "int8", calib, b) for b in BATCHES}
    except Exception as exc:  # noqa: BLE001 - a benchmark reports what failed and goes on
        print(f"{name}: inductor int8 failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
    else:
        factories["inductor int8"] = {b: (lambda p=int8[b][0]: InductorRunner(p, threads=threads)) for b in BATCHES}
        seconds["inductor int8"] = int8[1][1]
    return factories, seconds, tm


def _accuracy(runner: Any, ev: dict[str, np.ndarray], ref: np.ndarray | None) -> tuple[np.ndarray, dict[str, float]]:
    from optcli.calibration.dataset import SampleSet
    from optcli.quantize.evaluate import runner_outputs

    got = np.asarray(runner_outputs(runner, SampleSet(ev, None, "eval", "npz"))[0])
    if ref is None:
        return got, {}
    r, g = ref.reshape(len(ref), -1).astype(np.float64), got.reshape(len(got), -1).astype(np.float64)
    cos = (r * g).sum(1) / np.maximum(np.linalg.norm(r, axis=1) * np.linalg.norm(g, axis=1), 1e-30)
    return got, {"max_abs_diff": float(np.abs(r - g).max()), "cosine_mean": float(cos.mean())}


def bench_model(name: str, out: Path, rounds: int, threads: int | None) -> list[dict[str, Any]]:
    from optcli.cpu.measure import interleaved

    factories, seconds, tm = build_variants(name, out, threads)
    names = [s.name for s in tm.inputs]
    ev, _ = _load(Path(MODELS[name][1]) / "eval", names)
    ev = {k: v[:EVAL_SAMPLES] for k, v in ev.items()}
    runners = {(v, b): f() for v, per in factories.items() for b, f in per.items()}
    ref, _ = _accuracy(runners[("pytorch eager fp32", 1)], ev, None)
    acc = {v: _accuracy(runners[(v, 1)], ev, ref)[1] for v in factories}
    keys = {f"{v} @{b}": k for k in runners for v, b in [k]}
    feeds = {label: runners[k].normalize({n: np.resize(ev[n], (k[1], *ev[n].shape[1:])) for n in names})
             for label, k in keys.items()}
    stats, info = interleaved({label: runners[k] for label, k in keys.items()}, feeds, batch=1,
                              min_rounds=rounds, calls_per_round=3, min_seconds=0.0, max_seconds=3600.0)
    for r in runners.values():
        r.close()
    rows = []
    for v in factories:
        p50 = {b: stats[f"{v} @{b}"]["p50"] for b in BATCHES}
        rows.append({"model": name, "variant": v, **{f"p50_ms_b{b}": round(p50[b], 4) for b in BATCHES},
                     "x_eager_b1": round(stats["pytorch eager fp32 @1"]["p50"] / p50[1], 2),
                     "compile_s": round(seconds[v], 1), **{k: round(x, 6) for k, x in acc[v].items()},
                     "rounds": info["rounds"]})
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | variant | p50 ms b1 | p50 ms b8 | x eager (b1) | compile s | max abs diff | cosine vs FP32 |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        diff = f"{r['max_abs_diff']:.2g}" if "max_abs_diff" in r else "(reference)"
        cos = f"{r['cosine_mean']:.5f}" if "cosine_mean" in r else "-"
        lines.append(f"| {r['model']} | {r['variant']} | {r['p50_ms_b1']:.3f} | {r['p50_ms_b8']:.3f} | "
                     f"{r['x_eager_b1']:.2f}x | {r['compile_s']:.1f} | {diff} | {cos} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="digits_cnn,tiny_bert")
    parser.add_argument("--out", type=Path, default=Path("optcli-out/inductor-cpu"))
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, help="intra-op threads of every variant [all cores]")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--markdown", type=Path, help="also write the table to this file")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    for name in args.models.split(","):
        if not Path(MODELS[name][0]).exists():
            print(f"skipping {name}: {MODELS[name][0]} not built (make samples)")
            continue
        rows += bench_model(name, args.out, args.rounds, args.threads)
        print(markdown([r for r in rows if r["model"] == name]), flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))
    if args.markdown:
        args.markdown.write_text(markdown(rows) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
