"""Padding-aware batching (`optcli.load(path, batching=...)`) against OpenVINO+NNCF INT8 fed the way a
sentence-transformers user feeds it, on real-length traffic, in one interleaved run.

    python benchmarks/padding_serving.py prepare OUT        # model, corpus lengths, INT8 artifacts
    python benchmarks/padding_serving.py run OUT [--callers 1,4,16] [--seconds 3] [--rounds 3]

The model: a MiniLM-shaped encoder (BertConfig hidden 384, 6 layers, 12 heads, intermediate 1536,
random weights, eager attention), masked mean pooling + L2 in the graph, exported by the TorchScript
exporter with dynamic batch and sequence axes (dynamic_axes), opset 17.

The lengths: sentences of the English long descriptions in the METADATA of the Python packages
installed in this interpreter's site-packages (README text of numpy, torch, transformers, ...):
Markdown/RST markup lines dropped, split at sentence ends, 3..400 words kept. Tokens: a WordPiece
tokenizer (tokenizers' BertWordPieceTokenizer, 30522 vocab, lowercase) trained offline on that very
corpus; a request's length is its token count + [CLS] and [SEP], cut at 128.

Regimes (every one timed in the same interleaved run, rounds alternate the systems):
- batched: C callers, each sending batch-1 requests back to back for `--seconds`. optcli INT8 with
  padding-aware batching (padding "auto": a gathered batch runs as the calls of similar length that
  cost least, on one session with default threads, on one single-threaded session per core, and on
  the adaptive layout (those sessions plus one with every core for a request that runs alone);
  "longest": one call padded to the batch's longest) and the same artifact loaded with
  batching but padding off (only equal lengths share a batch), and the peer: OpenVINO+NNCF INT8 (same
  ONNX), each request run as it comes at its own length (dynamic padding of a batch of 1; OpenVINO's
  THROUGHPUT hint and one infer request per caller; the LATENCY hint at one caller).
- encode: the whole traffic as one call, sentence-transformers' `encode` (sort by length, batches of
  32, each padded to its longest), for both: throughput only.
- batch 1 dynamic padding: one caller, each sentence at its own length.
- batch 1 padded to 128: one caller, every sentence padded to 128.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MAX_LEN = 128
SIZE = dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)


# -- the corpus --------------------------------------------------------------------------------------
def corpus_sentences() -> list[str]:
    """English sentences from the long descriptions in site-packages' METADATA files."""
    import site

    folders = [Path(p) for p in site.getsitepackages()]
    out: list[str] = []
    for meta in sorted(m for f in folders for m in f.glob("*.dist-info/METADATA")):
        text = meta.read_text(encoding="utf-8", errors="replace")
        body = text.split("\n\n", 1)[1] if "\n\n" in text else ""
        lines = [ln for ln in body.splitlines()
                 if ln.strip() and not re.match(r"\s*([#=*\-`|<>\[!.:]|\d+\.|http)", ln)]
        for sentence in re.split(r"(?<=[.!?])\s+", " ".join(lines)):
            words = sentence.split()
            if 3 <= len(words) <= 400 and sum(w.isalpha() for w in words) >= len(words) / 2:
                out.append(" ".join(words))
    return out


def corpus_lengths(out: Path) -> np.ndarray:
    """Token counts (+2, cut at 128) of every corpus sentence under a WordPiece tokenizer trained here."""
    from tokenizers import BertWordPieceTokenizer

    sentences = corpus_sentences()
    tok = BertWordPieceTokenizer(lowercase=True)
    tok.train_from_iterator(sentences, vocab_size=30522, min_frequency=2, show_progress=False)
    lens = np.array([min(len(e.ids), MAX_LEN) for e in tok.encode_batch(sentences)], dtype=np.int64)
    np.save(out / "lengths.npy", lens)
    (out / "corpus.json").write_text(json.dumps({
        "source": "long descriptions in site-packages/*.dist-info/METADATA", "sentences": len(sentences),
        "tokenizer": "BertWordPieceTokenizer trained on the corpus (30522, lowercase); +[CLS]/[SEP]",
        "median": float(np.median(lens)), "p90": float(np.percentile(lens, 90)),
        "at_128": int((lens == MAX_LEN).sum())}, indent=1))
    return lens


def feeds_for(lens: np.ndarray, seed: int, pad_to: int | None = None) -> list[dict[str, np.ndarray]]:
    """One batch-1 request per length: input_ids [CLS] w... [SEP] (random ids), mask of ones."""
    rng = np.random.default_rng(seed)
    out = []
    for n in lens:
        width = pad_to or int(n)
        ids = np.zeros((1, width), np.int64)
        ids[0, :n] = rng.integers(1000, 30000, int(n))
        ids[0, 0], ids[0, n - 1] = 101, 102
        mask = np.zeros((1, width), np.int64)
        mask[0, :n] = 1
        out.append({"input_ids": ids, "attention_mask": mask})
    return out


# -- the model and its artifacts ---------------------------------------------------------------------
def build_encoder() -> Any:
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    bert = BertModel(BertConfig(attn_implementation="eager", **SIZE), add_pooling_layer=False).eval()

    class SentenceEncoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = bert

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            h = self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            m = attention_mask.unsqueeze(-1).to(h.dtype)
            return torch.nn.functional.normalize((h * m).sum(1) / m.sum(1).clamp(min=1e-9), p=2.0, dim=1)

    return SentenceEncoder().eval()


def export_onnx(path: Path) -> None:
    import torch

    net = build_encoder()
    ex = feeds_for(np.array([20, 33]), 0, pad_to=33)
    args = tuple(torch.from_numpy(np.concatenate([f[k] for f in ex])) for k in ("input_ids", "attention_mask"))
    axes = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"},
            "embedding": {0: "batch"}}
    with torch.no_grad():
        torch.onnx.export(net, args, str(path), dynamo=False, opset_version=17, input_names=list(axes)[:2],
                          output_names=["embedding"], dynamic_axes=axes)


def calib_folders(out: Path, lens: np.ndarray) -> None:
    """calib/ and eval/ npz parts: corpus lengths, padded to 128 (what optcli's readers take)."""
    rng = np.random.default_rng(1)
    for part, n in (("calib", 64), ("eval", 32)):
        (out / part).mkdir(parents=True, exist_ok=True)
        reqs = feeds_for(rng.choice(lens, n), seed=n, pad_to=MAX_LEN)
        np.savez_compressed(out / part / "part-000.npz",
                            **{k: np.concatenate([r[k] for r in reqs]) for k in ("input_ids", "attention_mask")})


def nncf_ir(onnx_path: Path, out: Path) -> Path:
    """NNCF as its docs show for a transformer: the ONNX converted, every calibration sample at its own
    length, model_type TRANSFORMER."""
    import nncf
    import openvino as ov

    xml = out / "nncf.xml"
    with np.load(out / "calib" / "part-000.npz") as z:
        ids, mask = z["input_ids"], z["attention_mask"]
    items = [{"input_ids": ids[i:i + 1, :n], "attention_mask": mask[i:i + 1, :n]}
             for i, n in enumerate(mask.sum(1))]
    logging.getLogger("nncf").setLevel(logging.ERROR)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        q = nncf.quantize(ov.convert_model(str(onnx_path)), nncf.Dataset(items), subset_size=len(items),
                          model_type=nncf.ModelType.TRANSFORMER)
    ov.save_model(q, str(xml), compress_to_fp16=False)
    return xml


def prepare(out: Path) -> None:
    import subprocess

    out.mkdir(parents=True, exist_ok=True)
    lens = corpus_lengths(out)
    print(json.loads((out / "corpus.json").read_text()))
    export_onnx(out / "minilm.onnx")
    calib_folders(out, lens)
    t0 = time.perf_counter()
    nncf_ir(out / "minilm.onnx", out)
    print(f"nncf: {time.perf_counter() - t0:.1f} s")
    cmd = [sys.executable, "-m", "optcli", "compile", str(out / "minilm.onnx"), "--int8", "--calib",
           str(out / "calib"), "--eval", str(out / "eval"), "-o", str(out / "optcli"),
           "--bench-runs", "5"]
    print("$", " ".join(cmd))
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    print(f"optcli compile: {time.perf_counter() - t0:.1f} s")



# -- the systems -------------------------------------------------------------------------------------
class Peer:
    """OpenVINO+NNCF INT8 as a user runs it: one compiled model, one infer request per calling thread."""

    def __init__(self, xml: Path, hint: str) -> None:
        import openvino as ov

        self.compiled = ov.Core().compile_model(str(xml), "CPU", {"PERFORMANCE_HINT": hint})
        self.local = threading.local()

    def __call__(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        request = getattr(self.local, "request", None)
        if request is None:
            request = self.local.request = self.compiled.create_infer_request()
        return np.array(request.infer(feeds)[0])


def encode_style(fn: Callable[[dict[str, np.ndarray]], np.ndarray], requests: list[dict[str, np.ndarray]],
                 batch: int = 32) -> list[np.ndarray]:
    """sentence-transformers' encode: sort by length (longest first), batches of 32, each padded to its
    longest; answers back in the input order."""
    order = sorted(range(len(requests)), key=lambda i: -requests[i]["input_ids"].shape[1])
    out: list[Any] = [None] * len(requests)
    for a in range(0, len(order), batch):
        members = order[a:a + batch]
        width = max(requests[i]["input_ids"].shape[1] for i in members)
        feeds = {k: np.concatenate([np.pad(requests[i][k], ((0, 0), (0, width - requests[i][k].shape[1])))
                                    for i in members]) for k in ("input_ids", "attention_mask")}
        got = fn(feeds)
        for j, i in enumerate(members):
            out[i] = got[j:j + 1]
    return out


def closed_loop(fn: Callable[[dict[str, np.ndarray]], Any], streams: list[list[dict[str, np.ndarray]]],
                seconds: float) -> tuple[int, float, list[float]]:
    """Each caller sends its stream's requests back to back (batch 1) for `seconds`:
    (requests done, wall seconds, per-request latencies in ms)."""
    gate = threading.Barrier(len(streams) + 1)
    lat: list[list[float]] = [[] for _ in streams]
    stop = [0.0]

    def caller(c: int) -> None:
        gate.wait()
        i = 0
        while time.perf_counter() < stop[0]:
            req = streams[c][i % len(streams[c])]
            t0 = time.perf_counter()
            fn(req)
            lat[c].append((time.perf_counter() - t0) * 1e3)
            i += 1

    threads = [threading.Thread(target=caller, args=(c,)) for c in range(len(streams))]
    for t in threads:
        t.start()
    stop[0] = time.perf_counter() + seconds
    t0 = time.perf_counter()
    gate.wait()
    for t in threads:
        t.join()
    flat = [x for per in lat for x in per]
    return len(flat), time.perf_counter() - t0, flat


def cosine(a: list[np.ndarray], b: list[np.ndarray]) -> tuple[float, float]:
    x, y = np.concatenate(a).astype(np.float64), np.concatenate(b).astype(np.float64)
    c = (x * y).sum(1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))
    return float(c.mean()), float(c.min())


def isa() -> str:
    text = Path("/proc/cpuinfo").read_text()
    name = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")), "?")
    flags = set(next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), []))
    have = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile") if f in flags]
    return f"{name}; {', '.join(have)}; {os.cpu_count()} cores"


def run(out: Path, callers: list[int], seconds: float, rounds: int, max_batch: int) -> dict[str, Any]:
    import optcli

    lens = np.load(out / "lengths.npy")
    rng = np.random.default_rng(7)
    stream_lens = rng.choice(lens, 4096)
    report = out / "optcli" / "report.json"
    plain = optcli.load(report)
    policy = {"max_batch_size": max_batch, "max_queue_delay_microseconds": 0}
    padded_b = optcli.load(report, batching=policy)
    longest_b = optcli.load(report, batching={**policy, "padding": "longest"})
    # One single-threaded session per core, each running gathered batches (docs/serve.md).
    cores_b = optcli.load(report, batching=policy, concurrency=os.cpu_count() or 1, threads=1)
    # The adaptive layout: those sessions plus one with every core for a request that runs alone.
    adaptive_b = optcli.load(report, batching=policy, concurrency="adaptive")
    off_b = optcli.load(report, batching={**policy, "padding": "off"})
    peer_lat, peer_tp = Peer(out / "nncf.xml", "LATENCY"), Peer(out / "nncf.xml", "THROUGHPUT")
    fp32 = optcli.load(out / "minilm.onnx")

    def ours(model: Any) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
        return lambda feeds: model.predict(feeds)["embedding"]

    eval_reqs = feeds_for(rng.choice(lens, 128), seed=99)
    eval_128 = feeds_for(np.array([r["input_ids"].shape[1] for r in eval_reqs]), seed=99, pad_to=MAX_LEN)
    ref = [fp32.predict(r)["embedding"] for r in eval_reqs]
    results: dict[str, Any] = {"isa": isa(), "corpus": json.loads((out / "corpus.json").read_text()),
                               "load_before": os.getloadavg()[0], "regimes": {}}

    def cos_concurrent(fn: Callable[[dict[str, np.ndarray]], np.ndarray], n: int = 16) -> tuple[float, float]:
        got: list[Any] = [None] * len(eval_reqs)

        def worker(c: int) -> None:
            for i in range(c, len(eval_reqs), n):
                got[i] = fn(eval_reqs[i])

        threads = [threading.Thread(target=worker, args=(c,)) for c in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return cosine(ref, got)

    # Regimes at one caller: dynamic padding and padded to 128 (interleaved rounds of one loop each).
    single = {
        "b1-dynamic: optcli int8": (ours(plain), False, lambda: cosine(ref, [ours(plain)(r) for r in eval_reqs])),
        "b1-dynamic: openvino+nncf int8": (peer_lat, False, lambda: cosine(ref, [peer_lat(r) for r in eval_reqs])),
        "b1-pad128: optcli int8": (ours(plain), True, lambda: cosine(ref, [ours(plain)(r) for r in eval_128])),
        "b1-pad128: openvino+nncf int8": (peer_lat, True, lambda: cosine(ref, [peer_lat(r) for r in eval_128])),
    }
    for fn in (ours(plain), ours(padded_b), ours(cores_b), ours(adaptive_b), ours(longest_b), ours(off_b), peer_lat,
               peer_tp):
        for r in eval_reqs[:24] + eval_128[:2]:  # warm-up: first runs at new shapes
            fn(r)
    systems: dict[str, dict[str, Any]] = {}
    streams1 = [feeds_for(stream_lens, seed=3)]
    streams1_128 = [feeds_for(stream_lens, seed=3, pad_to=MAX_LEN)]
    for r in range(rounds):
        names = list(single) if r % 2 == 0 else list(reversed(single))
        for name in names:
            fn, pad, _ = single[name]
            n, wall, lat = closed_loop(fn, streams1_128 if pad else streams1, seconds)
            acc = systems.setdefault(name, {"n": 0, "wall": 0.0, "lat": []})
            acc["n"] += n
            acc["wall"] += wall
            acc["lat"] += lat
    for name, (_, _, cos) in single.items():
        systems[name]["cos"] = cos()
    # The batched regime: C callers of batch-1 requests, each at its own length.
    concurrent = {
        "optcli int8, padding-aware batching (auto)": (ours(padded_b), lambda: cos_concurrent(ours(padded_b))),
        "optcli int8, padding-aware batching (auto), a 1-thread session per core":
            (ours(cores_b), lambda: cos_concurrent(ours(cores_b))),
        "optcli int8, padding-aware batching (auto), adaptive layout":
            (ours(adaptive_b), lambda: cos_concurrent(ours(adaptive_b))),
        "optcli int8, padded to the batch's longest": (ours(longest_b), lambda: cos_concurrent(ours(longest_b))),
        "optcli int8, batching without padding": (ours(off_b), lambda: cos_concurrent(ours(off_b))),
        "openvino+nncf int8, per request (dynamic padding)": (None, lambda: cos_concurrent(peer_tp)),
    }
    for c in callers:
        streams = [feeds_for(rng.choice(lens, 512), seed=100 + i) for i in range(c)]
        for r in range(rounds):
            names = list(concurrent) if r % 2 == 0 else list(reversed(concurrent))
            for name in names:
                fn = concurrent[name][0] or (peer_lat if c == 1 else peer_tp)
                n, wall, lat = closed_loop(fn, streams, seconds)
                acc = systems.setdefault(f"c{c}: {name}", {"n": 0, "wall": 0.0, "lat": []})
                acc["n"] += n
                acc["wall"] += wall
                acc["lat"] += lat
        for name, (_, cos) in concurrent.items():
            systems[f"c{c}: {name}"]["cos"] = cos()
    # encode(): the whole traffic as one call, sorted, batches of 32 (throughput only).
    bulk = feeds_for(rng.choice(lens, 256), seed=5)
    pair = [("encode: optcli int8", ours(plain)), ("encode: openvino+nncf int8", peer_lat)]
    for r in range(rounds):
        for name, fn in pair if r % 2 == 0 else pair[::-1]:
            t0 = time.perf_counter()
            encode_style(fn, bulk)
            wall = time.perf_counter() - t0
            acc = systems.setdefault(name, {"n": 0, "wall": 0.0, "lat": []})
            acc["n"] += len(bulk)
            acc["wall"] += wall
            acc["lat"].append(wall * 1e3)
    systems["encode: optcli int8"]["cos"] = cosine(ref, encode_style(ours(plain), eval_reqs))
    systems["encode: openvino+nncf int8"]["cos"] = cosine(ref, encode_style(peer_lat, eval_reqs))
    for name, acc in systems.items():
        lat = np.array(acc.pop("lat"))
        results["regimes"][name] = {"requests": acc["n"], "req_per_s": round(acc["n"] / acc["wall"], 2),
                                    "p50_ms": round(float(np.percentile(lat, 50)), 2),
                                    "p99_ms": round(float(np.percentile(lat, 99)), 2),
                                    "cosine_mean": round(acc["cos"][0], 5), "cosine_min": round(acc["cos"][1], 5)}
    results["batch_histograms"] = {"padding-aware (auto)": padded_b.stats(), "auto, session per core": cores_b.stats(),
                                   "auto, adaptive layout": adaptive_b.stats(),
                                   "longest": longest_b.stats(),
                                   "no padding": off_b.stats()}
    results["load_after"] = os.getloadavg()[0]
    for m in (plain, padded_b, cores_b, adaptive_b, longest_b, off_b, fp32):
        m.close()
    return results


def markdown(res: dict[str, Any]) -> str:
    rows = ["| regime | system | req/s | vs peer | p50 ms | p99 ms | cosine mean / min vs FP32 |",
            "|---|---|---:|---:|---:|---:|---|"]
    regimes = res["regimes"]
    for name, r in regimes.items():
        regime, system = name.split(": ", 1)
        peer = next((v for k, v in regimes.items() if k.startswith(regime + ": openvino")), None)
        ratio = f"{r['req_per_s'] / peer['req_per_s']:.2f}x" if peer else "-"
        rows.append(f"| {regime} | {system} | {r['req_per_s']:.1f} | {ratio} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} "
                    f"| {r['cosine_mean']:.5f} / {r['cosine_min']:.5f} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["prepare", "run"])
    parser.add_argument("out", type=Path)
    parser.add_argument("--callers", default="1,4,16")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-batch", type=int, default=32)
    args = parser.parse_args()
    if args.what == "prepare":
        prepare(args.out)
        return
    res = run(args.out, [int(c) for c in args.callers.split(",")], args.seconds, args.rounds, args.max_batch)
    res["command"] = " ".join(sys.argv)
    (args.out / "results.json").write_text(json.dumps(res, indent=1))
    print(json.dumps({k: v for k, v in res.items() if k != "regimes"}, indent=1))
    print(markdown(res))


if __name__ == "__main__":
    main()
