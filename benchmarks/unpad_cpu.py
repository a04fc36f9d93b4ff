"""Padding costs nothing: optcli `--int8` with and without the unpad rewrite against OpenVINO + NNCF INT8
on padded encoders, in ONE interleaved run per model and length distribution, batch 1 and 8, with
accuracy against PyTorch FP32 on the valid tokens.

    python benchmarks/unpad_cpu.py [--models minilm,bert_base] [--rounds 5] [--batches 1,8]
                                   [--lengths short,uniform,full] [--out optcli-out/unpad-bench]

Models (transformers, built from configs, random weights, padded length 128, no hub):
- minilm: a MiniLM-L6-sized BertModel (6 layers, hidden 384, 12 heads) mean-pooled over the mask and
  L2-normalised like sentence-transformers: the sentence-embedding shape (output without a sequence axis).
- bert_base: BERT-base (12 layers, hidden 768) returning the last hidden state (an output with a
  sequence axis: padded back with 0 by the rewrite; accuracy on valid tokens only).

Valid lengths (the repository holds no tokenized real sentences, so they are drawn; documented here):
- short: "short sentences", round(exp(N(ln 14, 0.45))) clipped to 5..40: median 14, like a sentence-
  embedding set of real paraphrase pairs padded to 128.
- uniform: uniform 16..128.
- full: every token valid (no padding): what the rewrite costs when there is nothing to skip.
Token ids are random in [1000, 30000) with [CLS] first, [SEP] last and pad id 0 after it.

Every variant sees the same requests in the same order: per round and variant, 20 ms of untimed
calls, then each of the distribution's requests once, timed (mean latency per request = the cost of
serving that distribution). Calibration (optcli and NNCF alike): 64 samples, half short, half uniform.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

SEQ = 128
REQUESTS = 32        # requests per distribution (batch 1: 32 calls; batch 8: 4 calls of 8)
EVAL = 64


def lengths(kind: str, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "short":
        return np.clip(np.round(np.exp(rng.normal(np.log(14), 0.45, n))), 5, 40).astype(int)
    if kind == "uniform":
        return rng.integers(16, SEQ + 1, n)
    return np.full(n, SEQ)


def padded(lens: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, 30000, size=(len(lens), SEQ), dtype=np.int64)
    pos = np.arange(SEQ)[None, :]
    mask = (pos < lens[:, None]).astype(np.int64)
    ids[:, 0] = 101
    ids = np.where(pos == lens[:, None] - 1, 102, ids)
    return {"input_ids": np.where(mask == 1, ids, 0), "attention_mask": mask}


def build_model(name: str) -> Any:
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    size = {"minilm": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536),
            "bert_base": {}}[name]
    bert = BertModel(BertConfig(attn_implementation="eager", **size), add_pooling_layer=False).eval()

    class SentenceEncoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = bert

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            h = self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            m = attention_mask.unsqueeze(-1).to(h.dtype)
            return torch.nn.functional.normalize((h * m).sum(1) / m.sum(1).clamp(min=1e-9), p=2.0, dim=1)

    class Hidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = bert

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    return (SentenceEncoder() if name == "minilm" else Hidden()).eval()


def prepare(name: str, out: Path) -> tuple[Path, Path, Any]:
    """The .pt2 (dynamic batch, padded length 128) and its calibration/eval folders."""
    import torch

    net = build_model(name)
    folder = out / name
    pt2 = folder / f"{name}.pt2"
    if not pt2.exists():
        folder.mkdir(parents=True, exist_ok=True)
        ex = padded(lengths("uniform", 2, 0), 0)
        batch = torch.export.Dim("batch", min=1, max=1024)
        with torch.no_grad():
            prog = torch.export.export(net, tuple(torch.from_numpy(ex[k]) for k in ex),
                                       dynamic_shapes={k: {0: batch} for k in ex})
        torch.export.save(prog, pt2)
    data = folder / "data"
    for part, seed in (("calib", 1), ("eval", 2)):
        (data / part).mkdir(parents=True, exist_ok=True)
        lens = np.concatenate([lengths("short", 32 if part == "calib" else 16, seed),
                               lengths("uniform", 32 if part == "calib" else 16, seed + 10)])
        np.savez_compressed(data / part / "part-000.npz", **padded(lens, seed))
    return pt2, data, net


def compile_variant(pt2: Path, data: Path, out: Path, unpad: bool) -> Any:
    import optcli

    return optcli.compile(str(pt2), out=out, int8=True, calib=data / "calib", eval=data / "eval", unpad=unpad,
                          check=True)


def nncf_ir(onnx_path: Path, calib: dict[str, np.ndarray], transformer: bool, out: Path) -> Path:
    """NNCF as its docs show, from the exported ONNX: every calibration sample, defaults (+ model_type)."""
    import nncf
    import openvino as ov

    xml = out / ("nncf-transformer.xml" if transformer else "nncf-default.xml")
    if xml.exists():
        return xml
    model = ov.convert_model(str(onnx_path))
    n = len(calib["input_ids"])
    items = [{k: v[i:i + 1] for k, v in calib.items()} for i in range(n)]
    kwargs: dict[str, Any] = {"subset_size": n}
    if transformer:
        kwargs["model_type"] = nncf.ModelType.TRANSFORMER
    logging.getLogger("nncf").setLevel(logging.ERROR)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        q = nncf.quantize(model, nncf.Dataset(items), **kwargs)
    ov.save_model(q, str(xml), compress_to_fp16=False)
    return xml


def runners(name: str, out: Path) -> tuple[dict[str, Callable[[], Any]], dict[str, Any], Any]:
    from optcli.backends.onnxruntime.runner import OnnxRuntimeRunner
    from optcli.backends.openvino.runner import OpenVINORunner

    pt2, data, net = prepare(name, out)
    facts: dict[str, Any] = {}
    factories: dict[str, Callable[[], Any]] = {}
    export = None
    for label, unpad in (("optcli int8", True), ("optcli int8 --no-unpad", False)):
        folder = out / name / ("unpad" if unpad else "no-unpad")
        t0 = time.perf_counter()
        rep = compile_variant(pt2, data, folder, unpad)
        stage = rep.stage("unpad")
        build = rep.stage("build")
        facts[label] = {"chosen": (build.details or {}).get("chosen"), "compile_s": round(time.perf_counter() - t0, 1),
                        "unpad": stage.status + (f": {stage.reason}" if stage.reason else "") if stage else "off"}
        final = rep.final
        path, options = folder / final["artifact"], dict(final.get("runner_options") or {})
        factories[label] = (lambda p=path, o=options: OpenVINORunner(p, **o)) if final["format"] == "openvino" \
            else (lambda p=path, o=options: OnnxRuntimeRunner(p, **o))
        if not unpad:
            export = folder / rep.stage("export").artifact
    with np.load(data / "calib" / "part-000.npz") as z:
        calib = {k: z[k] for k in z.files}
    for transformer in (False, True):
        xml = nncf_ir(export, calib, transformer, out / name)
        factories[f"openvino+nncf int8 ({'transformer' if transformer else 'default'})"] = \
            lambda p=xml: OpenVINORunner(p, precision="auto")
    return factories, facts, net


def torch_reference(net: Any, feeds: dict[str, np.ndarray]) -> np.ndarray:
    import torch

    with torch.inference_mode():
        return net(*(torch.from_numpy(feeds[k]) for k in ("input_ids", "attention_mask"))).numpy()


def accuracy(runner: Any, net: Any, kind: str) -> float:
    """Mean cosine against PyTorch FP32 on 64 held-out requests of this distribution, valid tokens only."""
    from optcli.accuracy import compare_outputs

    feeds = padded(lengths(kind, EVAL, 100), 100)
    got = np.concatenate([np.asarray(runner.run_normalized(runner.normalize(
        {k: v[i:i + 8] for k, v in feeds.items()}))[0]) for i in range(0, EVAL, 8)])
    acc = compare_outputs([torch_reference(net, feeds)], [got], ["out"], valid=feeds["attention_mask"] != 0)
    return acc["cosine_mean"]


def measure(opened: dict[str, Any], kind: str, batch: int, rounds: int) -> dict[str, list[float]]:
    feeds = padded(lengths(kind, REQUESTS, 7), 7)
    calls = [{k: v[i:i + batch] for k, v in feeds.items()} for i in range(0, REQUESTS, batch)]
    prepared = {name: [r.normalize(c) for c in calls] for name, r in opened.items()}
    times: dict[str, list[float]] = {name: [] for name in opened}
    for _ in range(rounds):
        for name, r in opened.items():
            t_block = time.perf_counter()
            while time.perf_counter() - t_block < 0.02:
                r.run_normalized(prepared[name][0])
            for c in prepared[name]:
                t0 = time.perf_counter()
                r.run_normalized(c)
                times[name].append((time.perf_counter() - t0) * 1000.0 / batch)
    return times


def bench_model(name: str, out: Path, rounds: int, batches: list[int], kinds: list[str]) -> list[dict[str, Any]]:
    factories, facts, net = runners(name, out)
    opened = {k: f() for k, f in factories.items()}
    rows = []
    for kind in kinds:
        cos = {k: accuracy(r, net, kind) for k, r in opened.items()}
        for batch in batches:
            times = measure(opened, kind, batch, rounds)
            peer = float(np.mean(times["openvino+nncf int8 (default)"]))
            base = float(np.mean(times["optcli int8 --no-unpad"]))
            for k, t in times.items():
                ms = float(np.mean(t))
                rows.append({"model": name, "lengths": kind, "batch": batch, "variant": k,
                             "ms_per_request": round(ms, 3), "x_nncf_default": round(peer / ms, 2),
                             "x_no_unpad": round(base / ms, 2), "cosine_valid": round(cos[k], 5), **facts.get(k, {})})
            print(markdown([r for r in rows if r["lengths"] == kind and r["batch"] == batch]), flush=True)
    for r in opened.values():
        r.close()
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | lengths | batch | variant | ms / request | x NNCF default | x no-unpad "
             "| cosine (valid tokens) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['lengths']} | {r['batch']} | {r['variant']} | {r['ms_per_request']:.3f} | "
                     f"{r['x_nncf_default']:.2f}x | {r['x_no_unpad']:.2f}x | {r['cosine_valid']:.5f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="minilm,bert_base")
    parser.add_argument("--out", type=Path, default=Path("optcli-out/unpad-bench"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--lengths", default="short,uniform,full", help="length distributions to measure")
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    for name in args.models.split(","):
        rows += bench_model(name, args.out, args.rounds, [int(b) for b in args.batches.split(",")],
                            args.lengths.split(","))
    print(f"load average after: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores", file=sys.stderr)
    facts = {(r["model"], r["variant"]): {k: r[k] for k in ("chosen", "unpad", "compile_s") if k in r} for r in rows}
    for (model, variant), f in facts.items():
        if f:
            print(f"{model} / {variant}: {f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
