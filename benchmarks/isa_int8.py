"""INT8 accuracy and speed against FP32 as the CPU's instruction set decides them (issue 31, part 3).

    python benchmarks/isa_int8.py [--out optcli-out/isa-int8] [--models minilm,resnet50] [--rounds 8]
                                  [--markdown FILE]

Models, random weights from configs (no hub):
- minilm: transformers BertModel with the all-MiniLM-L6-v2 shape (hidden 384, 6 layers, 12 heads,
  intermediate 1536), masked mean pooling + L2 normalisation, exported with the TorchScript exporter at
  a fixed 1 x 128; inputs input_ids and attention_mask, valid lengths 8-128 drawn at random.
- resnet50: transformers ResNetForImageClassification (the ResNet-50 layout; torchvision is not
  installed here), 1 x 3 x 224 x 224, random normal images; logits.

For each: FP32 on onnxruntime and OpenVINO, and every INT8 recipe build-cpu would make, each in its
VNNI form (before: 8-bit weights) and in its overflow-safe form (after: what optcli uses on a CPU without
VNNI): NNCF through optcli's own `nncf_int8` with overflow_fix first_layer_only (NNCF's default) vs
enable; onnxruntime's quantize_static u8/s8 Q/DQ (CNNs) or quantize_dynamic (encoders) with
reduce_range False vs True. Accuracy: mean cosine against the FP32 ONNX on held-out rows (top-1
agreement for ResNet-50); latency: batch 1, p50 of one interleaved run (every variant one block per round).
The table names the CPU's capability set (optcli/cpu/isa.py).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

SEQ = 128


def minilm(out: Path) -> tuple[Path, Callable[[int, int], dict[str, np.ndarray]]]:
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    bert = BertModel(BertConfig(hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                                intermediate_size=1536)).eval()

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    def data(n: int, seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        ids = rng.integers(1000, 30000, size=(n, SEQ), dtype=np.int64)
        lengths = rng.integers(8, SEQ + 1, size=n)
        mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int64)
        ids[:, 0], ids = 101, np.where(mask == 1, ids, 0)
        return {"input_ids": ids, "attention_mask": mask}

    path = out / "minilm.onnx"
    if not path.exists():
        ex = data(1, 99)
        torch.onnx.export(Encoder().eval(), (torch.from_numpy(ex["input_ids"]), torch.from_numpy(ex["attention_mask"])),
                          str(path), input_names=["input_ids", "attention_mask"], output_names=["embedding"],
                          opset_version=17, dynamo=False)
    return path, data


def resnet50(out: Path) -> tuple[Path, Callable[[int, int], dict[str, np.ndarray]]]:
    import torch
    from transformers import ResNetConfig, ResNetForImageClassification

    torch.manual_seed(0)
    model = ResNetForImageClassification(ResNetConfig(num_labels=1000)).eval()

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
            return self.m(pixel_values=pixel_values).logits

    def data(n: int, seed: int) -> dict[str, np.ndarray]:
        return {"pixel_values": np.random.default_rng(seed).standard_normal((n, 3, 224, 224)).astype(np.float32)}

    path = out / f"resnet50{'-dynamo' if DYNAMO else ''}.onnx"
    if not path.exists() and DYNAMO:  # as optcli's export stage does: batch 2 example, dynamic batch, opset 18
        batch = torch.export.Dim("batch", min=1, max=1024)
        torch.onnx.export(Net().eval(), (torch.from_numpy(data(2, 99)["pixel_values"]),), str(path),
                          input_names=["pixel_values"], output_names=["logits"], dynamo=True,
                          dynamic_shapes={"pixel_values": {0: batch}})
    elif not path.exists():
        torch.onnx.export(Net().eval(), (torch.from_numpy(data(1, 99)["pixel_values"]),), str(path),
                          input_names=["pixel_values"], output_names=["logits"], opset_version=17, dynamo=False)
    return path, data


DYNAMO = False  # --exporter dynamo (ResNet-50 only)
MODELS = {"minilm": (minilm, 48, 24, True), "resnet50": (resnet50, 24, 16, False)}


class _Reader:
    def __init__(self, rows: dict[str, np.ndarray]) -> None:
        n = len(next(iter(rows.values())))
        self.items = iter([{k: v[i:i + 1] for k, v in rows.items()} for i in range(n)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.items, None)


def ort_int8(src: Path, dst: Path, calib: dict[str, np.ndarray], encoder: bool, reduce_range: bool) -> Path:
    """onnxruntime INT8 as optcli's quantize stage makes it (optcli/quantize/int8.py, flavour.py)."""
    from onnxruntime import quantization as q

    from optcli.quantize.flavour import CPU_QDQ_OPS, DYNAMIC_OPS

    if dst.exists():
        return dst
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        if encoder:
            q.quantize_dynamic(str(src), str(dst), op_types_to_quantize=list(DYNAMIC_OPS), per_channel=False,
                               reduce_range=reduce_range, weight_type=q.QuantType.QInt8,
                               extra_options={"MatMulConstBOnly": True})
        else:
            q.quantize_static(str(src), str(dst), _Reader(calib), quant_format=q.QuantFormat.QDQ,
                              op_types_to_quantize=list(CPU_QDQ_OPS), per_channel=True, reduce_range=reduce_range,
                              activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QInt8,
                              extra_options={"ActivationSymmetric": False, "WeightSymmetric": True})
    return dst


def nncf(src: Path, folder: Path, calib: dict[str, np.ndarray], encoder: bool, overflow_fix: str) -> Path:
    """NNCF INT8 through optcli's own recipe function (optcli/backends/openvino/ir.py)."""
    from optcli.backends.openvino.ir import nncf_int8
    from optcli.backends.openvino.recipes.sources import precision_hint
    from optcli.calibration.dataset import SampleSet

    folder.mkdir(parents=True, exist_ok=True)
    if (folder / "model.xml").exists():
        return folder / "model.xml"
    xml, _ = nncf_int8(src, folder, SampleSet(calib, None, "random", "benchmark"), transformer=encoder,
                       exclude_nodes=[], exclude_ops=[], facts={}, precision=precision_hint("int8"),
                       overflow_fix=overflow_fix)
    return xml


def _ort(path: Path) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return lambda feed: s.run(None, feed)[0]


def _ov(path: Path, hint: str | None = None) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
    import openvino as ov

    cfg: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": 2}
    if hint:
        cfg["INFERENCE_PRECISION_HINT"] = hint
    compiled = ov.Core().compile_model(str(path), "CPU", cfg)
    req = compiled.create_infer_request()
    return lambda feed: next(iter(req.infer(feed).values())).copy()


def _accuracy(run: Callable, ev: dict[str, np.ndarray], ref: np.ndarray, encoder: bool) -> dict[str, float]:
    n = len(ref)
    got = np.concatenate([run({k: v[i:i + 1] for k, v in ev.items()}) for i in range(n)]).reshape(n, -1)
    r = ref.reshape(n, -1)
    cos = (got * r).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(r, axis=1) + 1e-12)
    out = {"cosine_mean": float(cos.mean()), "cosine_min": float(cos.min())}
    if not encoder:
        out["top1_agreement"] = float((got.argmax(1) == r.argmax(1)).mean())
    return out


def _interleaved(runs: dict[str, Callable], feed: dict[str, np.ndarray], rounds: int,
                 block_s: float) -> dict[str, float]:
    samples: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            run(feed)  # the switch between runtimes, untimed
            t_end = time.perf_counter() + block_s
            while True:
                t0 = time.perf_counter()
                run(feed)
                samples[name].append((time.perf_counter() - t0) * 1000)
                if time.perf_counter() > t_end and len(samples[name]) >= 2:
                    break
    return {k: float(np.median(v)) for k, v in samples.items()}


def bench(name: str, out: Path, rounds: int) -> list[dict[str, Any]]:
    from optcli.cpu import isa

    build, n_calib, n_eval, encoder = MODELS[name]
    out.mkdir(parents=True, exist_ok=True)
    src, data = build(out)
    name = src.stem
    calib, ev = data(n_calib, 1), data(n_eval, 2)
    ref_run = _ort(src)
    ref = np.concatenate([ref_run({k: v[i:i + 1] for k, v in ev.items()}) for i in range(n_eval)])
    int8_ort = "onnxruntime dynamic" if encoder else "onnxruntime u8/s8 Q/DQ"
    variants: dict[str, tuple[str, Callable[[], Callable]]] = {
        "fp32 onnxruntime": ("fp32", lambda: ref_run),
        "fp32 openvino": ("fp32", lambda: _ov(src, "f32")),
        f"{int8_ort}, 8-bit weights": ("before", lambda: _ort(ort_int8(src, out / f"{name}-ort8.onnx", calib, encoder,
                                                                       False))),
        f"{int8_ort}, reduce_range (7-bit)": ("after", lambda: _ort(ort_int8(src, out / f"{name}-ort7.onnx", calib,
                                                                             encoder, True))),
    }
    label = "NNCF transformer" if encoder else "NNCF default"
    for fix, when in (("first_layer_only", "before"), ("enable", "after")):
        variants[f"{label}, overflow_fix {fix}"] = (
            when, lambda fix=fix: _ov(nncf(src, out / f"{name}-nncf-{fix}", calib, encoder, fix)))
    runs, rows = {}, []
    for vname, (when, make) in variants.items():
        t0 = time.perf_counter()
        logging.getLogger("nncf").setLevel(logging.ERROR)
        runs[vname] = make()
        acc = _accuracy(runs[vname], ev, ref, encoder)
        rows.append({"model": name, "variant": vname, "recipe": when, "build_s": round(time.perf_counter() - t0, 1),
                     **{k: round(v, 5) for k, v in acc.items()}})
        print(json.dumps(rows[-1]), flush=True)
    p50 = _interleaved(runs, {k: v[:1] for k, v in ev.items()}, rounds, 0.3)
    best_fp32 = min(v for k, v in p50.items() if k.startswith("fp32"))
    for r in rows:
        r["p50_ms"] = round(p50[r["variant"]], 3)
        r["vs_best_fp32"] = round(best_fp32 / p50[r["variant"]], 2)
        r["isa"] = isa.detect().label
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    cols = ["model", "variant", "recipe", "cosine_mean", "cosine_min", "top1_agreement", "p50_ms", "vs_best_fp32",
            "isa"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r.get(c, "-")) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("optcli-out/isa-int8"))
    ap.add_argument("--models", default="minilm,resnet50")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--exporter", choices=("torchscript", "dynamo"), default="torchscript",
                    help="ResNet-50's exporter: dynamo is optcli's export stage's (opset 18, BatchNorm folded)")
    args = ap.parse_args()
    global DYNAMO
    DYNAMO = args.exporter == "dynamo"
    rows = [r for m in args.models.split(",") for r in bench(m, args.out, args.rounds)]
    text = markdown(rows)
    print(text)
    if args.markdown:
        args.markdown.write_text(text)


if __name__ == "__main__":
    main()
