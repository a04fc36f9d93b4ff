"""GPU benchmark: TensorRT engine build time, and FP32/FP16/INT8 engine latency against PyTorch eager.

Run on a machine with an NVIDIA GPU, TensorRT and a CUDA build of torch (docs/tensorrt.md):

    python benchmarks/gpu_bench.py                       # both models, batch 1 and 8
    python benchmarks/gpu_bench.py --batch 16 --runs 500 --out docs/benchmarks/gpu.md
    python benchmarks/gpu_bench.py --dry-run             # any machine: the TensorRT double, CPU torch

Anywhere else it says what is missing and exits with code 4 without measuring anything, unless
--dry-run: then every step runs against tests/contract/fake_tensorrt.py and the torch.cuda stand-in
(tests/contract/fake_cuda.py), eager PyTorch on the CPU, so CI proves the script reaches its last
row; the figures it prints are meaningless and say so. Each engine's row is printed the moment it
is measured; an engine that fails to build or run prints a row with the error and the rest go on.

What is measured, per model (a small ResNet-style CNN at 3x224x224, a 4-layer transformer encoder
at 128 tokens) and batch:
- PyTorch eager FP32 and FP16 on the GPU (torch.inference_mode), device time from CUDA events;
- TensorRT engines built from the FP32 ONNX, the FP16 ONNX (the model exported in half precision)
  and an INT8 Q/DQ ONNX made by optcli's own TensorRT flavour (qdq-s8s8: symmetric, per channel,
  biases kept in float, as TensorRT's parser needs; random calibration data, so the INT8 accuracy
  figure says nothing about real data), each checked by the TensorRT preflight first;
- engine build time with a cold timing cache (the engine cache is off, so every build is real);
- GPU latency from CUDA events around each engine enqueue (TensorRTRunner.time_gpu), and the
  end-to-end latency of predict() with host numpy in and out (perf_counter);
- cosine similarity of every output against eager FP32 on the same input.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from optcli.backends.tensorrt.probe import tensorrt_status  # noqa: E402


def refuse_unless_gpu() -> Any:
    status = tensorrt_status()
    if not status.usable:
        print(f"gpu_bench: cannot run here: {status.summary()}", file=sys.stderr)
        print("hint: run it on a machine with an NVIDIA GPU, TensorRT and a CUDA build of torch "
              "(docs/tensorrt.md)", file=sys.stderr)
        sys.exit(4)
    return status


# -- models ------------------------------------------------------------------------------------
def make_models(torch: Any) -> dict[str, tuple[Any, tuple[int, ...]]]:
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, c: int, stride: int) -> None:
            super().__init__()
            out = c * stride
            self.conv1 = nn.Conv2d(c, out, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(out)
            self.conv2 = nn.Conv2d(out, out, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(out)
            self.skip = nn.Sequential(nn.Conv2d(c, out, 1, stride, bias=False), nn.BatchNorm2d(out)) \
                if stride != 1 else nn.Identity()

        def forward(self, x: Any) -> Any:
            y = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(y)) + self.skip(x))

    class SmallResNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                      nn.MaxPool2d(3, 2, 1))
            self.layers = nn.Sequential(Block(64, 1), Block(64, 2), Block(128, 2), Block(256, 2))
            self.head = nn.Linear(512, 1000)

        def forward(self, x: Any) -> Any:
            return self.head(self.layers(self.stem(x)).mean((2, 3)))

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layer = nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True, dropout=0.0)
            self.encoder = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
            self.head = nn.Linear(256, 2)

        def forward(self, x: Any) -> Any:
            return self.head(self.encoder(x).mean(1))

    torch.manual_seed(0)
    return {"resnet-small": (SmallResNet().eval(), (3, 224, 224)), "encoder-4x256": (Encoder().eval(), (128, 256))}


def export_onnx(torch: Any, model: Any, sample: tuple[int, ...], path: Path, half: bool, device: str) -> Path:
    """ONNX with a dynamic batch (example batch 2: a batch-1 example can specialise the dim)."""
    m = model.half().to(device) if half else model.float().to(device)
    x = torch.randn(2, *sample, device=device, dtype=torch.float16 if half else torch.float32)
    try:
        batch = torch.export.Dim("batch", min=1, max=1024)
        torch.onnx.export(m, (x,), str(path), input_names=["x"], output_names=["y"], dynamo=True,
                          dynamic_shapes={"x": {0: batch}})
    except Exception as exc:  # fall back to the TorchScript exporter, which takes dynamic_axes
        print(f"  dynamo export failed ({type(exc).__name__}), using the TorchScript exporter", file=sys.stderr)
        torch.onnx.export(m, (x,), str(path), input_names=["x"], output_names=["y"], dynamo=False, opset_version=17,
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    model.float()
    return path


def quantize_int8(fp32: Path, sample: tuple[int, ...], path: Path) -> Path:
    """optcli's TensorRT INT8 flavour (what `optcli compile --int8 --target tensorrt` writes):
    onnxruntime's quantize_static with symmetric per-channel Q/DQ and float biases."""
    from optcli.calibration.dataset import SampleSet
    from optcli.quantize.calibrate import compute_ranges
    from optcli.quantize.flavour import TABLE
    from optcli.quantize.int8 import quantize

    rng = np.random.default_rng(0)
    samples = SampleSet({"x": rng.standard_normal((32, *sample)).astype(np.float32)}, None, "random", "random")
    flavour = TABLE["qdq-s8s8"]
    ranges, _ = compute_ranges(fp32, fp32.stem, samples, "minmax", True, flavour.op_types, path.parent / "ranges")
    quantize(fp32, path, flavour, ranges, "minmax", [])
    return path


# -- measuring ---------------------------------------------------------------------------------
def eager_ms(torch: Any, model: Any, x: Any, runs: int, warmup: int, cuda: bool) -> list[float]:
    with torch.inference_mode():
        for _ in range(warmup):
            model(x)
        if not cuda:  # --dry-run: wall time on the CPU
            times = []
            for _ in range(runs):
                t0 = time.perf_counter()
                model(x)
                times.append((time.perf_counter() - t0) * 1000)
            return times
        pairs = []
        for _ in range(runs):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            model(x)
            end.record()
            pairs.append((start, end))
        torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in pairs]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def build(trt: Any, onnx_path: Path, batch_max: int, machine: Any, work: Path) -> tuple[Path, float]:
    import onnx

    from optcli.backends.tensorrt.builder import obtain_engine
    from optcli.backends.tensorrt.graph_check import require_clean
    from optcli.backends.tensorrt.options import TensorRTConfig
    from optcli.backends.tensorrt.profiles import build_profiles
    from optcli.onnx_model import io_specs

    require_clean(onnx_path, f"{onnx_path.name}")  # what the parser would refuse, said by node, before building
    cfg = TensorRTConfig(engine_cache_enabled=False, timing_cache=work / f"{onnx_path.stem}.timing")
    specs, _ = io_specs(onnx.load(str(onnx_path), load_external_data=False))
    t0 = time.perf_counter()
    got = obtain_engine(trt, onnx_path, build_profiles(specs, batch=(1, batch_max, batch_max)), cfg, machine)
    seconds = time.perf_counter() - t0
    engine = work / f"{onnx_path.stem}.engine"
    engine.write_bytes(got.engine_bytes)
    got.metadata.write(engine.with_name(engine.name + ".json"))
    return engine, seconds


def engine_row(runner_cls: Any, engine: Path, x: np.ndarray, args: Any) -> tuple[float, float, np.ndarray]:
    """(GPU ms p50, end-to-end ms p50, output) of one engine at one batch."""
    with runner_cls(engine) as runner:
        gpu = statistics.median(runner.time_gpu({"x": x}, runs=args.runs, warmup=args.warmup))
        feeds = runner.normalize({"x": x})
        for _ in range(args.warmup):
            runner.run_normalized(feeds)
        e2e = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            out = runner.run_normalized(feeds)
            e2e.append((time.perf_counter() - t0) * 1000)
    return gpu, statistics.median(e2e), out[0]


def dry_run_modules() -> tuple[Any, Any]:
    """The TensorRT double and the torch.cuda stand-in, wired into optcli's runner (--dry-run)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "contract"))
    import optcli.backends.tensorrt.runner as runner_module
    from fake_cuda import TorchShim  # type: ignore[import-not-found]
    from fake_tensorrt import make_tensorrt  # type: ignore[import-not-found]

    trt = make_tensorrt("10.8.0.43", "8.9")
    shim = TorchShim(trt)
    runner_module.require = lambda module, purpose: {"tensorrt": trt, "torch": shim}[module]  # type: ignore[assignment]
    # The stand-in's device (fake_cuda.FakeCuda): an engine is tied to the GPU model it was built for.
    status = type("DryStatus", (), {"gpu": "NVIDIA L4", "compute_capability": "8.9", "tensorrt_cuda": None})()
    return trt, status


def emit(row: str, rows: list[str]) -> None:
    rows.append(row)
    print(row, flush=True)


def bench_model(name: str, model: Any, sample: tuple[int, ...], trt: Any, torch: Any, machine: Any, work: Path,
                args: Any, rows: list[str]) -> None:
    from optcli.backends.tensorrt.runner import TensorRTRunner

    cuda = not args.dry_run
    device = "cuda" if cuda else "cpu"
    print(f"{name}: exporting", file=sys.stderr, flush=True)
    fp32 = export_onnx(torch, model, sample, work / f"{name}-fp32.onnx", half=False, device=device)
    sources = {"fp32": lambda: fp32,
               "fp16": lambda: export_onnx(torch, model, sample, work / f"{name}-fp16.onnx", half=True, device=device),
               "int8": lambda: quantize_int8(fp32, sample, work / f"{name}-int8.onnx")}
    bmax = max(args.batch)
    refs = {}
    for batch in args.batch:
        xt = torch.from_numpy(np.random.default_rng(batch).standard_normal((batch, *sample))
                              .astype(np.float32)).to(device)
        model.float().to(device)
        with torch.inference_mode():
            refs[batch] = model(xt).float().cpu().numpy()
        base = statistics.median(eager_ms(torch, model, xt, args.runs, args.warmup, cuda))
        emit(f"| {name} | {batch} | PyTorch eager | fp32 | - | {base:.3f} | - | 1.00x | 1.0000 |", rows)
        refs[(batch, "base")] = base
    for precision, make in sources.items():
        try:
            engine, build_s = build(trt, make(), bmax, machine, work)
        except Exception as exc:  # one failing engine must not hide the others' rows
            emit(f"| {name} | - | TensorRT | {precision} | failed: {type(exc).__name__}: "
                 f"{str(exc).splitlines()[0][:160] if str(exc) else ''} | - | - | - | - |", rows)
            continue
        for batch in args.batch:
            x = np.random.default_rng(batch).standard_normal((batch, *sample)).astype(np.float32)
            x = x.astype(np.float16) if precision == "fp16" else x
            try:
                gpu, e2e, out = engine_row(TensorRTRunner, engine, x, args)
            except Exception as exc:
                emit(f"| {name} | {batch} | TensorRT | {precision} | {build_s:.1f} | failed: {type(exc).__name__}: "
                     f"{str(exc).splitlines()[0][:160] if str(exc) else ''} | - | - | - |", rows)
                continue
            base = refs[(batch, "base")]
            emit(f"| {name} | {batch} | TensorRT | {precision} | {build_s:.1f} | {gpu:.3f} | {e2e:.3f} | "
                 f"{base / gpu:.2f}x | {cosine(out, refs[batch]):.4f} |", rows)


HEADER = ("| model | batch | runtime | precision | build s (cold timing cache) | GPU ms p50 (CUDA events) | "
          "end-to-end ms p50 (host numpy in/out) | speedup vs eager fp32 (GPU time) | cosine vs eager fp32 |\n"
          "|---|---|---|---|---|---|---|---|---|")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--models", nargs="+", default=None, help="resnet-small, encoder-4x256")
    parser.add_argument("--out", type=Path, help="also write the Markdown table here")
    parser.add_argument("--dry-run", action="store_true",
                        help="run every step against the TensorRT double on the CPU (CI); the figures mean nothing")
    args = parser.parse_args()
    if args.dry_run:
        trt, status = dry_run_modules()
    else:
        status = refuse_unless_gpu()
        import tensorrt as trt

    import torch

    from optcli.backends.tensorrt.builder import Machine

    machine = Machine(str(trt.__version__), status.gpu, status.compute_capability, status.tensorrt_cuda)
    note = "DRY RUN (TensorRT double, CPU torch): the figures are meaningless. " if args.dry_run else ""
    cuda_version = getattr(torch.version, "cuda", None)
    header = (f"{note}GPU: {status.gpu} (compute {status.compute_capability}); TensorRT {trt.__version__}; "
              f"torch {torch.__version__} (CUDA {cuda_version}); {time.strftime('%Y-%m-%d')}; "
              f"runs {args.runs}, median.")
    print(header + "\n\n" + HEADER, flush=True)
    rows: list[str] = []
    with tempfile.TemporaryDirectory(prefix="optcli-gpu-bench-") as tmp:
        for name, (model, sample) in make_models(torch).items():
            if args.models and name not in args.models:
                continue
            bench_model(name, model, sample, trt, torch, machine, Path(tmp), args, rows)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("# GPU benchmark (benchmarks/gpu_bench.py)\n\n" + header + "\n\n" + HEADER + "\n"
                            + "\n".join(rows) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
