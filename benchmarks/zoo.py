"""The model zoo: every family in benchmarks/zoo_models.py compiled FP32 and INT8 the way users hand
models over, rotating the input form per family (file.py:factory, a Hugging Face folder, .pt2, .onnx),
with a row per compile: exporter, stages, compile seconds, speedup of the final artifact over PyTorch
eager, cosine against FP32, pass/fail with the one-line reason.

    python benchmarks/zoo.py [--families bert,resnet] [--out optcli-out/zoo] [--markdown docs/benchmarks/zoo.md]
    python benchmarks/zoo.py --target tensorrt-rtx --markdown docs/benchmarks/zoo-tensorrt-rtx.md

With `--target tensorrt-rtx` each compile ends in TensorRT-RTX's builder (no GPU needed): the row says
whether it built the engine, its size and build time, or the builder's reason.

Each compile runs `python -m optcli compile ... --json` in a subprocess (a real CLI run). Calibration
and held-out data are drawn like the example inputs (gaussian floats; token ids inside the example's
range; masks of ones). Latency uses a short measurement (benchmarks/zoo.toml-style [bench] below), so
speedups are indicative; docs/benchmarks/cpu.md has the careful ones.
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
FAST_BENCH = "[bench]\nwarmup-runs = 2\nwarmup-seconds = 0.05\nruns = 20\nmin-seconds = 0.2\nmax-seconds = 1.0\n" \
             "[cpu]\nmin-seconds = 0.5\nmax-seconds = 3.0\n"
FORMS = ("factory", "hf-folder", "pt2", "onnx")


def _arrays(example: Any, n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for name, t in example.items():
        a = t.numpy()
        shape = (n, *a.shape[1:])
        if np.issubdtype(a.dtype, np.floating):
            out[name] = rng.standard_normal(shape).astype(a.dtype)
        elif "mask" in name:
            out[name] = np.ones(shape, a.dtype)
        else:
            out[name] = rng.integers(int(a.min()), int(a.max()) + 1, size=shape).astype(a.dtype)
    return out


def _named(model: Any, example: Any) -> dict[str, Any]:
    if isinstance(example, dict):
        return example
    import inspect

    params = list(inspect.signature(model.forward).parameters)
    return dict(zip(params, example))


def prepare(family: str, form: str, root: Path) -> tuple[str, dict[str, Any]]:
    """Write the family in its input form under root; returns (MODEL argument, named example inputs)."""
    import torch

    import zoo_models

    model, example = getattr(zoo_models, family)()
    named = _named(model, example)
    root.mkdir(parents=True, exist_ok=True)
    if form == "hf-folder" and hasattr(model, "save_pretrained"):
        model.config.architectures = [type(model).__name__]
        model.save_pretrained(str(root / "hf"))
        from optcli.hf_folder import load_model_folder

        return str(root / "hf"), load_model_folder(root / "hf", "auto")[1]  # the folder's own inputs
    if form == "pt2":
        batch = torch.export.Dim("batch", min=1, max=64)
        kwargs = {**named, **({"use_cache": False} if "use_cache" in
                              __import__("inspect").signature(model.forward).parameters else {})}
        shapes = {k: ({0: batch} if k in named else None) for k in kwargs}
        ep = torch.export.export(model, (), kwargs=kwargs, dynamic_shapes=shapes, strict=False)
        torch.export.save(ep, str(root / "model.pt2"))
        return str(root / "model.pt2"), named
    if form == "onnx":
        kwargs = {**named, **({"use_cache": False} if "use_cache" in
                              __import__("inspect").signature(model.forward).parameters else {})}
        shapes = {k: ({0: torch.export.Dim.DYNAMIC} if k in named else None) for k in kwargs}
        prog = torch.onnx.export(model, (), kwargs=kwargs, dynamo=True, dynamic_shapes=shapes,
                                 input_names=list(named), external_data=False)
        prog.save(str(root / "model.onnx"))
        return str(root / "model.onnx"), named
    return f"{HERE / 'zoo_models.py'}:{family}", named


def _data(named: dict[str, Any], folder: Path, seed: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(4):
        np.savez(folder / f"{i}.npz", **_arrays(named, 8, seed + i))
    return folder


def compile_row(family: str, kind: str, form: str, precision: str, model: str, named: dict[str, Any],
                root: Path, target: str = "cpu") -> dict[str, Any]:
    out = root / f"out-{precision}"
    args = [sys.executable, "-m", "optcli", "compile", model, "--out", str(out), "--json", "--force",
            "--config", str(root / "zoo.toml"), "--target", target]
    if precision == "int8":
        args += ["--int8", "--calib", str(_data(named, root / "calib", 0)),
                 "--eval", str(_data(named, root / "eval", 100))]
    t0 = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True, timeout=900)
    seconds = time.perf_counter() - t0
    row: dict[str, Any] = {"family": family, "kind": kind, "form": form, "precision": precision,
                           "seconds": round(seconds, 1), "exit": proc.returncode}
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        err = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
        tail = proc.stderr.strip().splitlines()[-1:] or ["?"]
        row["reason"] = (err[0] if err else tail[0])[:200]
        return row
    stages = {s["name"]: s for s in report["stages"]}
    export = stages.get("export") or {}
    row["exporter"] = (export.get("details") or {}).get("exporter", "-" if export.get("status") == "skipped" else "?")
    row["stages"] = " ".join(f"{s['name']}:{s['status']}" for s in report["stages"] if s["status"] != "skipped")
    final = report.get("final") or {}
    dep, ref = final.get("latency_ms"), final.get("reference_latency_ms")
    if dep and ref and dep.get("p50"):
        row["speedup"] = round(ref["p50"] / dep["p50"], 2)
        row["baseline"] = ref.get("runtime")
    gated = stages.get("build") or stages.get("quantize-int8") or export
    acc = gated.get("accuracy") or {}
    if "cosine_mean" in acc:
        row["cosine"] = round(acc["cosine_mean"], 5)
    row["artifact"] = f"{final.get('backend', '-')}" if final else "-"
    build = stages.get("build") or {}
    if target != "cpu":
        details = build.get("details") or {}
        row["build"] = build.get("status", "-")
        row["build_s"] = details.get("build_seconds")
        row["engine_mb"] = round(details["engine_bytes"] / 1e6, 2) if details.get("engine_bytes") else None
    if report.get("error"):
        row["reason"] = report["error"]["message"][:300]
    return row


def builder_markdown(rows: list[dict[str, Any]], command: str, target: str) -> str:
    """The rows of a TensorRT-target sweep: did the builder build, in how long, how big; else its reason."""
    built = sum(r.get("build") in ("ok", "cached") for r in rows)
    lines = [f"# Model zoo through `--target {target}`", "",
             f"`{command}`: the builder built {built} of {len(rows)} engines, on an AVX2-only AMD EPYC with 2 shared "
             "cores and no GPU (TensorRT-RTX builds ahead of time without one; nothing ran on a GPU). Random weights "
             "from reduced configs; INT8 calibrated on random data drawn like the example inputs, with an FP16 base. "
             "Build s: the builder's own time for the engine; compile s: the whole `optcli compile`.", "",
             "| family | kind | form | precision | exit | build | build s | engine MB | compile s | reason |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['family']} | {r['kind']} | {r['form']} | {r['precision']} | {r['exit']} | "
                     f"{r.get('build', '-')} | {r.get('build_s') or '-'} | {r.get('engine_mb') or '-'} | "
                     f"{r['seconds']} | {r.get('reason', '').replace('|', '/').replace(chr(10), ' ')} |")
    return "\n".join(lines) + "\n"


def to_markdown(rows: list[dict[str, Any]], command: str) -> str:
    passed = sum(r["exit"] == 0 for r in rows)
    lines = ["# Model zoo", "",
             f"`{command}`: {passed} of {len(rows)} compiles passed, on this 2-core CPU machine (no GPU), "
             "random weights from reduced configs, calibration and held-out data drawn like the example inputs.",
             "Speedup: the final artifact's p50 at batch 1 over the baseline (PyTorch eager, or ONNX Runtime for "
             "an .onnx input), from a short measurement on a shared machine: indicative only. Cosine: mean "
             "cosine against FP32 on held-out data (INT8) or on random inputs (FP32), from the stage that gates.", "",
             "| family | kind | form | precision | exporter | exit | compile s | speedup | cosine | backend | reason |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['family']} | {r['kind']} | {r['form']} | {r['precision']} | {r.get('exporter', '-')} | "
                     f"{r['exit']} | {r['seconds']} | {r.get('speedup', '-')} | {r.get('cosine', '-')} | "
                     f"{r.get('artifact', '-')} | {r.get('reason', '').replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    import zoo_models

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", default=",".join(zoo_models.FAMILIES))
    parser.add_argument("--precisions", default="fp32,int8")
    parser.add_argument("--out", default="optcli-out/zoo")
    parser.add_argument("--markdown")
    parser.add_argument("--target", default="cpu", help="cpu, or tensorrt-rtx: every compile ends in its builder")
    args = parser.parse_args()
    kinds = {f: k for k, fams in zoo_models.KINDS.items() for f in fams}
    rows = []
    for family in (f for f in args.families.split(",") if f):
        i = zoo_models.FAMILIES.index(family)  # the form depends on the family alone, however many run
        form = FORMS[i % len(FORMS)] if kinds[family] != "plain torch" else ("factory", "pt2")[i % 2]
        root = Path(args.out) / family
        root.mkdir(parents=True, exist_ok=True)
        (root / "zoo.toml").write_text(FAST_BENCH)
        try:
            model, named = prepare(family, form, root)
        except Exception as exc:  # noqa: BLE001 - preparing the input form failed: say so, go on
            rows.append({"family": family, "kind": kinds[family], "form": form, "precision": "-", "exit": "-",
                         "seconds": 0, "reason": f"preparing the {form} failed: {type(exc).__name__}: {exc}"[:200]})
            continue
        for precision in args.precisions.split(","):
            row = compile_row(family, kinds[family], form, precision, model, named, root, args.target)
            rows.append(row)
            print(json.dumps(row), flush=True)
    command = "python benchmarks/zoo.py" + (f" --families {args.families}" if args.families != ",".join(
        zoo_models.FAMILIES) else "") + (f" --target {args.target}" if args.target != "cpu" else "")
    text = to_markdown(rows, command) if args.target == "cpu" else builder_markdown(rows, command, args.target)
    if args.markdown:
        Path(args.markdown).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
