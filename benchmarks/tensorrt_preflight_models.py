"""The TensorRT graphs optcli makes for full-size transformers models, through the preflight.

    python benchmarks/tensorrt_preflight_models.py [--models resnet50 bert-base] [--precisions int8 fp16]

Builds transformers' ResNet-50 and BERT-base from their default configs with random weights (no
hub), exports them, and runs `optcli compile --target tensorrt` (--int8 with random calibration
data, or --fp16) through the TensorRT double and the torch.cuda stand-in of tests/contract, so the
quantize stages and the engine build run their preflight on exactly the graphs a GPU would get. Prints
one line per model and precision: the stage statuses and the preflight findings of the graph that
reached the engine build. Minutes on a 2-core CPU; the figures are not speed measurements.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "contract")]


def install_doubles(cache: Path) -> None:
    import os

    import optcli.backends.tensorrt.engine_build as stage_module
    import optcli.backends.tensorrt.probe as probe
    import optcli.backends.tensorrt.runner as runner_module
    from fake_cuda import TorchShim  # type: ignore[import-not-found]
    from fake_tensorrt import make_tensorrt  # type: ignore[import-not-found]

    trt = make_tensorrt("10.8.0.43", "8.9")
    shim = TorchShim(trt)
    status = probe.TensorRTStatus(True, gpu="NVIDIA L4", compute_capability="8.9", tensorrt_version="10.8.0.43")
    probe.tensorrt_status = lambda: status  # type: ignore[assignment]
    stage_module.require = lambda module, purpose: trt  # type: ignore[assignment]
    runner_module.require = lambda m, p: {"tensorrt": trt, "torch": shim}[m]  # type: ignore[assignment]
    os.environ["OPTCLI_CACHE_DIR"] = str(cache)


def models(torch: Any) -> dict[str, tuple[Any, tuple, list[str], dict[str, Any], list[str]]]:
    import transformers

    torch.manual_seed(0)
    resnet = transformers.ResNetForImageClassification(transformers.ResNetConfig()).eval()   # ResNet-50
    bert = transformers.BertModel(transformers.BertConfig(), add_pooling_layer=False).eval()  # BERT-base

    class ResNet(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return resnet(pixel_values=x).logits

    class Bert(torch.nn.Module):
        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    rng = np.random.default_rng(0)
    return {
        "resnet50": (ResNet().eval(), (torch.randn(2, 3, 224, 224),), ["x"],
                     {"x": lambda: rng.standard_normal((8, 3, 224, 224)).astype(np.float32)}, []),
        "bert-base": (Bert().eval(), (torch.randint(0, 30522, (2, 128)), torch.ones(2, 128, dtype=torch.int64)),
                      ["input_ids", "attention_mask"],
                      {"input_ids": lambda: rng.integers(0, 30522, (8, 128)),
                       "attention_mask": lambda: np.ones((8, 128), np.int64)},
                      ["input_ids:1x128:int64", "attention_mask:1x128:int64"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["resnet50", "bert-base"])
    parser.add_argument("--precisions", nargs="+", default=["int8", "fp16"])
    args = parser.parse_args()
    import torch

    from optcli import api
    from optcli.backends.tensorrt.preflight import check_file

    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory(prefix="optcli-preflight-") as tmp:
        work = Path(tmp)
        install_doubles(work / "cache")
        for name, (model, example, names, calib, pins) in models(torch).items():
            if name not in args.models:
                continue
            path = work / f"{name}.onnx"
            batch = torch.export.Dim("batch", min=1, max=64)
            torch.onnx.export(model, example, str(path), input_names=names, dynamo=True,
                              dynamic_shapes=tuple({0: batch} for _ in names))
            calib_dir = work / f"{name}-calib"
            calib_dir.mkdir()
            np.savez(calib_dir / "part-0.npz", **{k: make() for k, make in calib.items()})
            for precision in args.precisions:
                # Random weights and random calibration data: accuracy means nothing here, so the gate is
                # opened (cosine/top1 0) and the graph reaches build-tensorrt, which is what is checked.
                options = ({"int8": True, "calib": calib_dir, "fallback": False, "cosine": 0.0, "top1": 0.0}
                           if precision == "int8" else {"fp16": True})
                t0 = time.perf_counter()
                report = api.compile(path, out=work / f"out-{name}-{precision}", target="tensorrt", inputs=pins,
                                     check=False, tensorrt={"batch": "1/1/8"}, runs=2, min_seconds=0.0,
                                     max_seconds=0.1, warmup_runs=0, warmup_seconds=0.0, **options)
                stage = report.stage(f"quantize-{precision}")
                graph = work / f"out-{name}-{precision}" / stage.artifact if stage.artifact else None
                findings = check_file(graph) if graph and graph.is_file() else None
                statuses = ", ".join(f"{s.name}={s.status}" for s in report.stages)
                print(f"{name} {precision}: {len(findings) if findings is not None else 'no graph'} preflight "
                      f"finding(s); {statuses}; {time.perf_counter() - t0:.0f} s", flush=True)
                for s in report.stages:
                    if s.status == "failed":
                        print(f"  {s.name} failed: {s.reason}", flush=True)
                for f in (findings or [])[:5]:
                    print(f"  {f.describe()}", flush=True)


if __name__ == "__main__":
    main()
