"""CPU backends side by side: PyTorch eager, ONNX Runtime FP32, OpenVINO FP32 / default (BF16 where
the CPU has it) / NNCF INT8 with its default settings, and optcli's own choice for FP32, BF16 and
INT8, measured in ONE interleaved run per model (A B C ... A B C ..., so the load of a shared machine
hits every variant alike), with accuracy against PyTorch FP32 on each model's held-out data.

    python benchmarks/cpu_models.py --out optcli-out/cpu-models          # ResNet-50, BERT-base, MiniLM
    python benchmarks/cpu_backends.py [--models digits_cnn,tiny_bert,resnet50,bert_base,minilm]
                                      [--rounds 10] [--calls 3] [--json] [--markdown FILE]

Needs `optcli[openvino]` (openvino, nncf) and the sample models (`make samples`). Peers are built
the way their own docs show: `ov.convert_model` + `compile_model` (FP32 with the f32 hint, and the
default with no hint), and `nncf.quantize(model, nncf.Dataset(calibration samples))` with defaults;
for transformer encoders also with `model_type=nncf.ModelType.TRANSFORMER`, NNCF's documented
setting for them (plain defaults lose the pretrained MiniLM: see docs/openvino.md).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

BIG = Path("optcli-out/cpu-models")
MODELS = {
    "digits_cnn": ("sample_models/out/digits_cnn.pt2", "calibration/digits_cnn"),
    "tiny_bert": ("sample_models/out/tiny_bert.pt2", "calibration/tiny_bert"),
    "resnet50": (str(BIG / "resnet50.pt2"), str(BIG / "resnet50")),
    "bert_base": (str(BIG / "bert_base.pt2"), str(BIG / "bert_base")),
    "minilm": (str(BIG / "minilm.pt2"), str(BIG / "minilm")),
}


def _load(folder: Path, names: list[str]) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    arrays: dict[str, list[np.ndarray]] = {}
    labels: list[np.ndarray] = []
    for f in sorted(folder.glob("*.npz")):
        with np.load(f) as z:
            for k in names:
                arrays.setdefault(k, []).append(z[k])
            if "labels" in z.files:
                labels.append(z["labels"])
    return {k: np.concatenate(v) for k, v in arrays.items()}, (np.concatenate(labels) if labels else None)


def _compile(model: str, data: str, out: Path, precision: str) -> Any:
    import optcli

    opts: dict[str, Any] = {"out": out, "check": False}  # as `optcli compile` runs by default
    if precision != "fp32":
        opts[precision] = True
    if precision == "int8":
        opts.update(calib=f"{data}/calib", eval=f"{data}/eval")
    return optcli.compile(model, **opts)


def _nncf(onnx_path: Path, calib: dict[str, np.ndarray], transformer: bool, out: Path) -> Path:
    import nncf
    import openvino as ov

    xml = out / ("nncf-transformer.xml" if transformer else "nncf-default.xml")
    if xml.exists():
        return xml
    model = ov.convert_model(str(onnx_path))
    names = [p.get_any_name() for p in model.inputs]
    n = len(calib[names[0]])
    items = [{k: calib[k][i:i + 1] for k in names} for i in range(n)]
    kwargs = {"subset_size": n}
    if transformer:
        kwargs["model_type"] = nncf.ModelType.TRANSFORMER
    logging.getLogger("nncf").setLevel(logging.ERROR)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        q = nncf.quantize(model, nncf.Dataset(items), **kwargs)
    ov.save_model(q, str(xml), compress_to_fp16=False)
    return xml


def variants(name: str, out: Path) -> tuple[dict[str, Callable[[], Any]], dict[str, Any], Any]:
    """{label: runner factory}, facts about each, and the PyTorch model (inputs, int ranges)."""
    import openvino as ov

    from optcli.backends.onnxruntime.runner import OnnxRuntimeRunner
    from optcli.backends.openvino.runner import OpenVINORunner
    from optcli.backends.torch.loader import detect, load_torch
    from optcli.backends.torch.runner import TorchRunner
    from optcli.onnx_model import load_onnx, looks_like_encoder, op_histogram

    model, data = MODELS[name]
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    facts: dict[str, Any] = {}
    reports = {p: _compile(model, data, folder / p, p) for p in ("fp32", "bf16", "int8")}
    fp32 = reports["fp32"]
    if fp32.status != "ok":
        raise SystemExit(f"{name}: optcli fp32 failed: {fp32.error}")
    export = folder / "fp32" / fp32.stage("export").artifact
    tm = load_torch(detect(model), [])
    calib, _ = _load(Path(data) / "calib", [s.name for s in tm.inputs])
    encoder = looks_like_encoder(op_histogram(load_onnx(export, load_weights=False)))
    ir = folder / "peer-fp32.xml"
    if not ir.exists():
        ov.save_model(ov.convert_model(str(export)), str(ir), compress_to_fp16=False)
    nncf_default = _nncf(export, calib, False, folder)
    v: dict[str, Callable[[], Any]] = {
        "pytorch eager fp32": lambda: TorchRunner(tm.module, tm.inputs),
        "onnxruntime fp32": lambda: OnnxRuntimeRunner(export),
        "openvino fp32": lambda: OpenVINORunner(ir, precision="fp32"),
        "openvino default": lambda: OpenVINORunner(ir, precision="auto"),
        "openvino+nncf int8 (default)": lambda: OpenVINORunner(nncf_default, precision="auto"),
    }
    if encoder:
        p_tr = _nncf(export, calib, True, folder)
        v["openvino+nncf int8 (transformer)"] = lambda: OpenVINORunner(p_tr, precision="auto")
    for precision, rep in reports.items():
        label = f"optcli {precision}"
        if rep.status != "ok":
            facts[label] = {"error": (rep.error or {}).get("message")}
            continue
        final = rep.final
        path = folder / precision / final["artifact"]
        options = dict(final.get("runner_options") or {})
        build = rep.stage("build")
        facts[label] = {"artifact": final["artifact"], "format": final["format"], "flavour": final.get("flavour"),
                        "chosen": (build.details or {}).get("chosen") if build else None,
                        "why": (build.details or {}).get("why") if build else None}
        if final["format"] == "openvino":
            v[label] = lambda p=path, o=options: OpenVINORunner(p, **o)
        else:
            v[label] = lambda p=path, o=options: OnnxRuntimeRunner(p, **o)
    return v, facts, tm


def _cosine(ref: np.ndarray, got: np.ndarray) -> np.ndarray:
    r = ref.reshape(ref.shape[0], -1).astype(np.float64)
    g = got.reshape(got.shape[0], -1).astype(np.float64)
    return (r * g).sum(1) / np.maximum(np.linalg.norm(r, axis=1) * np.linalg.norm(g, axis=1), 1e-30)


def bench_model(name: str, out: Path, rounds: int, calls: int) -> list[dict[str, Any]]:
    from optcli.cpu.measure import interleaved

    factories, facts, tm = variants(name, out)
    names = [s.name for s in tm.inputs]
    ev, labels = _load(Path(MODELS[name][1]) / "eval", names)
    n = min(len(ev[names[0]]), 128)
    ev = {k: v[:n] for k, v in ev.items()}
    labels = labels[:n] if labels is not None else None
    runners = {k: f() for k, f in factories.items()}
    outputs = {}
    for k, r in runners.items():
        chunks = [r.run_normalized(r.normalize({kk: v[i:i + 32] for kk, v in ev.items()})) for i in range(0, n, 32)]
        outputs[k] = np.concatenate([np.asarray(c[0]) for c in chunks])
    ref = outputs["pytorch eager fp32"]
    feeds = {k: r.normalize({kk: v[:1] for kk, v in ev.items()}) for k, r in runners.items()}
    # optcli's own measurement (optcli/cpu/measure.py): blocks of >= 100 ms per variant, each after
    # 20 ms of untimed calls, so one runtime's spinning threads do not slow the next one's timing.
    stats, info = interleaved(runners, feeds, batch=1, min_rounds=rounds, calls_per_round=calls, min_seconds=0.0,
                              max_seconds=3600.0)
    for r in runners.values():
        r.close()
    base = stats["pytorch eager fp32"]["p50"]
    rows = []
    for k in runners:
        p50 = stats[k]["p50"]
        row = {"model": name, "variant": k, "p50_ms": round(p50, 3), "p50_ci": stats[k]["p50_ci"],
               "speedup": round(base / p50, 2), "rounds": info["rounds"],
               "cosine_mean": round(float(_cosine(ref, outputs[k]).mean()), 5), **facts.get(k, {})}
        if labels is not None and outputs[k].ndim == 2:
            row["top1"] = round(float((outputs[k].argmax(1) == labels).mean()), 4)
        rows.append(row)
    for k, f in facts.items():
        if "error" in f:
            rows.append({"model": name, "variant": k, **f})
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | variant | p50 ms (batch 1) | x PyTorch eager | cosine vs FP32 | top-1 | optcli chose |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['variant']} | failed: {r['error']} | | | | |")
            continue
        top1 = f"{r['top1']:.4f}" if "top1" in r else "-"
        lines.append(f"| {r['model']} | {r['variant']} | {r['p50_ms']:.2f} | {r['speedup']:.2f}x | "
                     f"{r['cosine_mean']:.5f} | {top1} | {r.get('chosen') or ''} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--out", type=Path, default=Path("optcli-out/cpu-backends"))
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--markdown", type=Path, help="also write the table to this file")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    for name in args.models.split(","):
        if not Path(MODELS[name][0]).exists():
            print(f"skipping {name}: {MODELS[name][0]} not built (see the docstring)")
            continue
        rows += bench_model(name, args.out, args.rounds, args.calls)
        print(markdown([r for r in rows if r["model"] == name]), flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))
    if args.markdown:
        args.markdown.write_text(markdown(rows) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
