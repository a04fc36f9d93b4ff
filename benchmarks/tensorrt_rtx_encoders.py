"""Issue 29's done-when, on a machine without a GPU: `optcli compile MODEL.onnx --target tensorrt-rtx --int8
--calib DIR`, as typed (no --input), for

- BERT-base as a user exports it: transformers' BertModel at its default (base) config, random weights,
  the dynamo exporter, batch AND sequence dynamic;
- a MiniLM-shaped sentence encoder: BertModel with hidden 384, 6 layers, 12 heads, mean pooling over the
  mask and L2 normalisation, exported with the TorchScript exporter at a fixed length of 128 (batch
  dynamic), inputs input_ids and attention_mask.

Nothing comes from a model hub. Each compile must end with an engine TensorRT-RTX's builder built; the
script prints one JSON line per model (exit code, build seconds, engine size, profiles, the INT8
graph's float parts, compile seconds) and, with --markdown, writes the table.

    python benchmarks/tensorrt_rtx_encoders.py --out optcli-out/rtx-encoders --markdown docs/benchmarks/tensorrt-rtx.md
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def bert_base(path: Path) -> dict[str, Any]:
    import torch
    import transformers as tf

    torch.manual_seed(0)
    model = tf.BertModel(tf.BertConfig(), add_pooling_layer=False).eval()

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = model

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    ids = torch.randint(0, 30522, (2, 16))
    batch, seq = torch.export.Dim("batch", min=1, max=64), torch.export.Dim("sequence", min=2, max=512)
    prog = torch.onnx.export(Encoder().eval(), (ids, torch.ones_like(ids)), input_names=["input_ids", "attention_mask"],
                             dynamo=True, dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq}), external_data=False)
    prog.save(str(path))
    return {"vocab": 30522, "length": 128}


def minilm(path: Path) -> dict[str, Any]:
    import torch
    import transformers as tf

    torch.manual_seed(0)
    bert = tf.BertModel(tf.BertConfig(hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                                      intermediate_size=1536), add_pooling_layer=False).eval()

    class SentenceEncoder(torch.nn.Module):
        """MiniLM's shape as sentence-transformers uses it: mean pooling over the mask, then L2 norm."""

        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    ids = torch.randint(0, 30522, (2, 128))
    torch.onnx.export(SentenceEncoder().eval(), (ids, torch.ones_like(ids)), str(path), dynamo=False,
                      input_names=["input_ids", "attention_mask"], output_names=["sentence_embedding"],
                      dynamic_axes={"input_ids": {0: "batch"}, "attention_mask": {0: "batch"}}, opset_version=17)
    return {"vocab": 30522, "length": 128}


def calib(folder: Path, vocab: int, length: int, rows: int = 32) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(2):
        rng = np.random.default_rng(i)
        ids = rng.integers(1000, vocab, (rows // 2, length)).astype(np.int64)
        np.savez(folder / f"{i}.npz", input_ids=ids, attention_mask=np.ones_like(ids))
    return folder


def compile_one(name: str, onnx_path: Path, calib_dir: Path, out: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "optcli", "compile", str(onnx_path), "--target", "tensorrt-rtx", "--int8",
           "--calib", str(calib_dir), "--out", str(out), "--json", "--force", "--no-bench"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=7200)
    row: dict[str, Any] = {"model": name, "exit": proc.returncode, "compile_s": round(time.perf_counter() - t0, 1),
                           "onnx_mb": round(onnx_path.stat().st_size / 1e6, 1)}
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        row["error"] = (proc.stderr.strip().splitlines() or ["?"])[-1][:300]
        return row
    stages = {s["name"]: s for s in report["stages"]}
    build = stages.get("build") or {}
    details = build.get("details") or {}
    q = (stages.get("quantize-int8") or {}).get("details") or {}
    acc = (stages.get("quantize-int8") or {}).get("accuracy") or {}
    row.update(build=build.get("status"), builder=f"{details.get('builder')} {details.get('tensorrt')}",
               build_s=details.get("build_seconds"), engine_mb=round((details.get("engine_bytes") or 0) / 1e6, 1),
               profiles=details.get("profiles"), float_parts=(q.get("flavour") or {}).get("float_parts"),
               int8_cosine_mean=round(acc["cosine_mean"], 5) if "cosine_mean" in acc else None,
               seconds={s["name"]: s["seconds"] for s in report["stages"] if s.get("seconds")},
               not_measured=(report.get("final") or {}).get("not_measured"))
    if report.get("error"):
        row["error"] = report["error"]["message"][:300]
    return row


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | exit | build | builder | build s | engine MB | ONNX MB | profiles | float parts | "
             "INT8 cosine (mean, random data) | compile s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['exit']} | {r.get('build', '-')} | {r.get('builder', '-')} | "
                     f"{r.get('build_s', '-')} | {r.get('engine_mb', '-')} | {r['onnx_mb']} | "
                     f"{'<br>'.join(r.get('profiles') or []) or '-'} | {r.get('float_parts', '-')} | "
                     f"{r.get('int8_cosine_mean', '-')} | {r['compile_s']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="optcli-out/rtx-encoders")
    parser.add_argument("--models", default="bert-base,minilm")
    parser.add_argument("--markdown")
    args = parser.parse_args()
    root = Path(args.out)
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.models.split(","):
        folder = root / name
        folder.mkdir(exist_ok=True)
        onnx_path = folder / f"{name}.onnx"
        facts = {"bert-base": bert_base, "minilm": minilm}[name](onnx_path)
        row = compile_one(name, onnx_path, calib(folder / "calib", facts["vocab"], facts["length"]), folder / "out")
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.markdown:
        Path(args.markdown).write_text(markdown(rows))
    print(markdown(rows))


if __name__ == "__main__":
    main()
