"""Train the sample models and save them as .pt2 (torch.export) and TorchScript, plus facts.

    python -m sample_models.build_all --out sample_models/out [--only NAME]
        [--calibration-dir calibration] [--check-onnx]

--calibration-dir also (re)writes the calibration/eval .npz sets (fixed seeds, independent of
training). --check-onnx exports each .pt2 with the dynamo ONNX exporter into a temporary folder and
checks that the batch dim stays symbolic and that ONNX Runtime runs batches 1 and 8.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import numpy as np
import torch

from sample_models import digits_cnn, tiny_bert

MODELS: dict[str, ModuleType] = {m.NAME: m for m in (digits_cnn, tiny_bert)}
MAX_BATCH = 1024
EXPORT_BATCH = 2  # never 1: a batch-1 example lets exporters specialise the batch dim
CHECK_BATCHES = (1, 8)
PARTS = 4
RTOL, ATOL = 1e-4, 1e-5


def _dynamic_shapes(spec: ModuleType) -> dict[str, dict[int, torch.export.Dim]]:
    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH)
    return {name: {0: batch} for name in spec.INPUT_NAMES}


def _check_close(name: str, got: torch.Tensor, want: torch.Tensor) -> None:
    if got.shape != want.shape or not torch.allclose(got, want, rtol=RTOL, atol=ATOL):
        diff = (got - want).abs().max().item() if got.shape == want.shape else float("nan")
        raise RuntimeError(f"{name}: output differs from eager (max abs diff {diff})")


def _io_facts(spec: ModuleType, model: torch.nn.Module) -> dict:
    args = spec.example_inputs(EXPORT_BATCH)
    with torch.no_grad():
        out = model(*args)
    def fact(name: str, t: torch.Tensor) -> dict:
        dtype = str(t.dtype).removeprefix("torch.")
        return {"name": name, "shape": ["batch", *t.shape[1:]], "dtype": dtype}
    return {
        "inputs": [fact(n, a) for n, a in zip(spec.INPUT_NAMES, args)],
        "outputs": [fact("logits", out)],
    }


def build_model(spec: ModuleType, out_dir: Path, seed: int = 0) -> dict:
    """Train, save .pt2/.ts/.json under out_dir, verify the saved files; returns the facts."""
    t0 = time.perf_counter()
    model, acc = spec.train(seed)
    train_s = time.perf_counter() - t0

    args = spec.example_inputs(EXPORT_BATCH)
    pt2 = out_dir / f"{spec.NAME}.pt2"
    ts = out_dir / f"{spec.NAME}.ts"
    with torch.no_grad():
        program = torch.export.export(model, args, dynamic_shapes=_dynamic_shapes(spec))
        torch.export.save(program, pt2)
        torch.jit.save(torch.jit.trace(model, args), ts)

    # Reload both files and compare with eager at batch sizes other than the example's.
    loaded_pt2 = torch.export.load(pt2).module()
    loaded_ts = torch.jit.load(ts)
    for b in CHECK_BATCHES:
        check_args = spec.example_inputs(b)
        with torch.no_grad():
            want = model(*check_args)
            _check_close(f"{pt2.name} batch {b}", loaded_pt2(*check_args), want)
            _check_close(f"{ts.name} batch {b}", loaded_ts(*check_args), want)

    # Accuracy on the eval folder written by --calibration-dir: the reference for INT8 checks.
    evalset = spec.calibration_sets()["eval"]
    with torch.no_grad():
        logits = model(*(torch.from_numpy(evalset[k]) for k in spec.INPUT_NAMES))
    eval_acc = float((logits.argmax(1).numpy() == evalset["labels"]).mean())

    facts = {
        "name": spec.NAME,
        "description": (spec.__doc__ or "").strip().splitlines()[0],
        **_io_facts(spec, model),
        "dynamic_batch": {"min": 1, "max": MAX_BATCH},
        "test_accuracy": round(acc, 4),
        "calibration_eval_accuracy": round(eval_acc, 4),
        "train_seconds": round(train_s, 2),
        "seed": seed,
        "torch_version": torch.__version__,
        "files": {"pt2": pt2.name, "torchscript": ts.name},
        "verified_batches": list(CHECK_BATCHES),
    }
    if hasattr(spec, "MEAN"):
        facts["preprocessing"] = {"mean": spec.MEAN, "std": spec.STD}
    (out_dir / f"{spec.NAME}.json").write_text(json.dumps(facts, indent=2) + "\n")
    return facts


def write_calibration(spec: ModuleType, root: Path) -> list[Path]:
    """Write root/<name>/{calib,eval}/part-NNN.npz (PARTS files per folder); returns the folders."""
    folders = []
    for split, arrays in spec.calibration_sets().items():
        folder = root / spec.NAME / split
        if folder.exists():
            shutil.rmtree(folder)  # no stale parts from an older layout
        folder.mkdir(parents=True)
        n = len(next(iter(arrays.values())))
        for i, idx in enumerate(np.array_split(np.arange(n), PARTS)):
            part = {k: v[idx] for k, v in arrays.items()}
            np.savez_compressed(folder / f"part-{i:03d}.npz", **part)
        folders.append(folder)
    return folders


CALIBRATION_README = """\
# Calibration and evaluation data for the sample models

Written by `python -m sample_models.build_all --out sample_models/out --calibration-dir calibration`
(deterministic: fixed seeds, independent of training; rerun to regenerate). Regenerating
rewrites only the `<model>/` folders below and this README; other files here are left alone.

```
<model>/calib/part-000.npz ... part-003.npz   samples for quantization calibration
<model>/eval/part-000.npz  ... part-003.npz   held-out samples with labels, for accuracy checks
```

- One `.npz` holds one batch of samples: every array has a leading batch dimension.
- Keys are the model's input names; `eval` folders add a `labels` key (int64, N).
- Load a part with `dict(np.load(path))` and feed it (minus `labels`) to the model or ONNX session.
- The FP32 models' accuracy on the eval folders is `calibration_eval_accuracy` in
  `sample_models/out/<model>.json`.

| model | input keys | calib | eval |
|---|---|---|---|
| digits_cnn | `x` float32 N x 1 x 32 x 32, preprocessed (8x8 digits upsampled bilinear to 32x32, \
normalised with mean 0.3058, std 0.3242) | 128 training-split images, 4 x 32 | first 256 test-split images, 4 x 64 |
| tiny_bert | `input_ids`, `attention_mask` int64 N x 64 (pad id 0, mask 0 on padding) \
| 128 synthetic sequences (seed 1234), 4 x 32 | 256 sequences (seed 5678), 4 x 64 |

The digits split is scikit-learn's `train_test_split(test_size=0.25, random_state=0)` of
`load_digits()`; tiny_bert's label is 1 when tokens in [10, 60) outnumber tokens in [60, 110).
"""


def check_onnx(spec: ModuleType, pt2: Path) -> str:
    """Export the .pt2 with the dynamo ONNX exporter; check the batch dim stays symbolic and ORT
    matches the program at batches 1 and 8."""
    import onnx
    import onnxruntime as ort

    program = torch.export.load(pt2)
    eager = program.module()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{spec.NAME}.onnx"
        torch.onnx.export(program, args=(), f=str(path), dynamo=True, verbose=False)
        graph = onnx.load(str(path)).graph
        dims = [inp.type.tensor_type.shape.dim[0] for inp in graph.input]
        if not all(d.dim_param for d in dims):
            raise RuntimeError(f"{spec.NAME}.onnx: batch dim specialised: {dims}")
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        for b in CHECK_BATCHES:
            args = spec.example_inputs(b)
            (got,) = session.run(None, {n: a.numpy() for n, a in zip(names, args)})
            with torch.no_grad():
                want = eager(*args).numpy()
            if not np.allclose(got, want, rtol=1e-3, atol=1e-4):
                diff = np.abs(got - want).max()
                raise RuntimeError(f"{spec.NAME}.onnx batch {b}: max diff {diff}")
    dim0 = [d.dim_param for d in dims]
    return f"onnx inputs {names} dim0={dim0}, ORT ok at batches {CHECK_BATCHES}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("sample_models/out"))
    parser.add_argument("--only", choices=sorted(MODELS))
    parser.add_argument("--calibration-dir", type=Path)
    parser.add_argument("--check-onnx", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    ns = parser.parse_args(argv)

    t0 = time.perf_counter()
    ns.out.mkdir(parents=True, exist_ok=True)
    names = [ns.only] if ns.only else list(MODELS)
    for name in names:
        spec = MODELS[name]
        facts = build_model(spec, ns.out, ns.seed)
        print(
            f"{name}: test_accuracy={facts['test_accuracy']:.4f} "
            f"train_seconds={facts['train_seconds']:.1f} "
            f"files={', '.join(str(ns.out / (name + ext)) for ext in ('.pt2', '.ts', '.json'))}",
            flush=True,
        )
        if ns.calibration_dir:
            folders = write_calibration(spec, ns.calibration_dir)
            print(f"{name}: calibration data in {', '.join(map(str, folders))}", flush=True)
        if ns.check_onnx:
            print(f"{name}: {check_onnx(spec, ns.out / (name + '.pt2'))}", flush=True)
    if ns.calibration_dir:
        (ns.calibration_dir / "README.md").write_text(CALIBRATION_README)
    print(f"done in {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
