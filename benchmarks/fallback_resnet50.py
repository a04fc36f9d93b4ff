"""The INT8 fallback on a transformers ResNet-50 (random weights): issue 13's hardest case.

    python benchmarks/fallback_resnet50.py --out optcli-out/fallback-resnet50 [--budget 300] [--images white]
        [--int8-flavour qdq-s8s8] [--cosine 0.9999] [--backend onnxruntime]

Builds ResNetForImageClassification from its default config (the ResNet-50 layout, random weights:
errors in the pooled features are magnified in the logits), exports it to ONNX (TorchScript exporter,
whose node names carry the module paths), writes smooth-noise images (noise at 28x28, upsampled to
224x224) as calibration and evaluation .npz, and runs `optcli compile --int8 --target cpu` through
the Python API. Prints the fallback's round table, what it kept in float, the budget and seconds,
and the build-cpu candidates; the report is OUT/run/report.json.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np


def noise_images(n: int, seed: int, kind: str) -> np.ndarray:
    """`smooth`: noise at 28x28 upsampled (image-like spatial correlation); `white`: i.i.d. per pixel
    (what benchmarks/cpu_models.py feeds, and the data of issue 13's table)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    if kind == "white":
        return torch.randn((n, 3, 224, 224), generator=g).numpy().astype(np.float32)
    low = torch.randn((n, 3, 28, 28), generator=g)
    img = torch.nn.functional.interpolate(low, size=(224, 224), mode="bilinear", align_corners=False)
    img = (img - img.mean(dim=(0, 2, 3), keepdim=True)) / img.std(dim=(0, 2, 3), keepdim=True)
    return img.numpy().astype(np.float32)


def build(out: Path, images: str) -> Path:
    import torch

    model_path = out / "resnet50.onnx"
    if model_path.exists() and (out / f"{images}-images").exists():
        return model_path
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*-images"):
        old.unlink()
    from cpu_models import resnet50  # the same model as the CPU benchmarks (benchmarks/ is on sys.path)

    net = resnet50()[0]
    with torch.inference_mode():
        torch.onnx.export(net, (torch.randn(2, 3, 224, 224),), str(model_path), dynamo=False,
                          input_names=["pixel_values"], output_names=["logits"], opset_version=17,
                          dynamic_axes={"pixel_values": {0: "batch"}, "logits": {0: "batch"}})
    for name, n, seed in (("calib", 64, 1), ("eval", 64, 2)):
        (out / name).mkdir(exist_ok=True)
        np.savez(out / name / "images.npz", pixel_values=noise_images(n, seed, images))
    (out / f"{images}-images").touch()  # which data the folder holds
    return model_path


def measure(run: Path, fb: dict, flavour: str) -> None:
    """FP32, plain INT8 and the fallback's INT8 in ONE interleaved ONNX Runtime run (batch 1, all
    optimizations): the speed claim, measured the way build-cpu measures candidates."""
    from optcli.backends.onnxruntime.runner import OnnxRuntimeRunner
    from optcli.cpu.measure import interleaved
    from optcli.quantize.flavour import TABLE
    from optcli.quantize.int8 import name_nodes, quantize

    fp32 = next(run.glob("*-fuse/model.onnx"))
    named, plain = run / "bench-fp32-named.onnx", run / "bench-int8-plain.onnx"
    name_nodes(fp32, named)
    ranges = max((p for p in run.glob("calibration-cache/ranges-minmax-*.json") if not p.name.endswith(".check.json")),
                 key=lambda p: p.stat().st_mtime)
    quantize(named, plain, TABLE[flavour], ranges, "minmax", [])
    models = {"fp32": fp32, "int8 (plain)": plain, "int8 (fallback)": next(run.glob("*-quantize-int8/model.onnx"))}
    runners = {k: OnnxRuntimeRunner(v) for k, v in models.items()}
    try:
        x = np.load(run.parent / "eval" / "images.npz")["pixel_values"][:1]
        feeds = {k: r.normalize({"pixel_values": x}) for k, r in runners.items()}
        stats, info = interleaved(runners, feeds, batch=1, min_rounds=8, min_seconds=20.0, max_seconds=90.0,
                                  block_ms=300.0, switch_ms=50.0)
    finally:
        for r in runners.values():
            r.close()
    base = stats["fp32"]["p50"]
    print(f"interleaved ONNX Runtime, batch 1, {info.get('rounds')} rounds:")
    for k in models:
        print(f"  {k}: p50 {stats[k]['p50']:.2f} ms (95% CI {stats[k].get('p50_ci')}), "
              f"{base / stats[k]['p50']:.2f}x FP32")
    for p in (named, plain):
        p.unlink(missing_ok=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("optcli-out/fallback-resnet50"))
    ap.add_argument("--budget", type=float, default=300.0)
    ap.add_argument("--backend", default="auto", help="auto lets build-cpu's OpenVINO/NNCF INT8 candidates try")
    ap.add_argument("--images", choices=("smooth", "white"), default="smooth")
    ap.add_argument("--int8-flavour", dest="flavour", default="auto",
                    help="qdq-s8s8 is what --target tensorrt gets (symmetric int8 activations): the harder case")
    ap.add_argument("--cosine", type=float, help="the tolerance (default: INT8's, mean cosine 0.99)")
    ap.add_argument("--measure-only", action="store_true", help="only the interleaved timing of OUT/run")
    args = ap.parse_args()
    from optcli import api

    if args.measure_only:
        from optcli.report import RunReport

        st = RunReport.load(args.out / "run" / "report.json",
                            "run the benchmark once without --measure-only").stage("quantize-int8")
        measure(args.out / "run", st.details["fallback"], st.details["flavour"]["name"])
        return
    model = build(args.out, args.images)
    t0 = time.perf_counter()
    report = api.compile(model, out=args.out / "run", int8=True, calib=args.out / "calib", eval=args.out / "eval",
                         target="cpu", backend=args.backend, bench=False, check=False, force=True,
                         fallback_budget=args.budget, flavour=args.flavour,
                         **({"cosine": args.cosine} if args.cosine else {}))
    wall = time.perf_counter() - t0
    st = report.stage("quantize-int8")
    fb = st.details.get("fallback") or {}
    print(f"status {report.status} (exit {report.exit_code}), compile wall {wall:.0f} s")
    if report.error:
        print("error:", report.error.get("message"))
    print(f"quantize-int8: {st.status}; accuracy {st.accuracy.get('cosine_mean'):.4f}, "
          f"top-1 agreement {st.accuracy.get('top1_agreement')}")
    if fb:
        print(f"fallback: {fb['units']} units, budget {fb['budget_s']} s, {fb['seconds']} s, "
              f"{fb['evaluations']} evaluations, stopped: {fb['stopped']}, search samples {fb['search_samples']}")
        print("| round | phase | changed (module) | trial cosine | kept | units in float | cosine after round | s |")
        print("|---|---|---|---|---|---|---|---|")
        for r in fb["rounds"]:
            changed = ", ".join(r["changed"][:2]) + (f" +{len(r['changed']) - 2}" if len(r["changed"]) > 2 else "")
            print(f"| {r['round']} | {r['phase']} | {changed} | {r['trial_cosine']:.4f} "
                  f"| {'yes' if r['kept'] else 'undone'} | {r['excluded']} | {r['cosine']:.4f} | {r['seconds']} |")
        print(f"kept in float ({fb['float_flops_share']:.2%} of FLOPs):")
        for u in fb["kept_in_float"]:
            print(f"  {u['module']}  ({u['op_type']}, {u['node']}, {u['flops_share']:.2%} FLOPs)")
        print(f"accuracy before {fb['accuracy_before']}, after {fb['accuracy_after']}")
        print(f"latency p50 ms (ORT, batch 1): fp32 {fb['latency_p50_ms_fp32']}, int8 {fb['latency_p50_ms_before']}, "
              f"after fallback {fb['latency_p50_ms_after']}")
        print("ranking (local damage, top 10):")
        for u in fb["ranking"][:10]:
            print(f"  {u['module']}  {u['local_damage']}")
    if fb and st.status in ("ok", "failed"):
        measure(args.out / "run", fb, st.details["flavour"]["name"])
    b = report.stage("build")
    if b is not None and b.details.get("candidates"):
        print(f"build-cpu: {b.status}, chose {b.details.get('chosen')}: {b.details.get('why')}")
        for c in b.details["candidates"]:
            acc = (c.get("accuracy") or {}).get("cosine_mean")
            lat = (c.get("latency_ms") or {}).get("p50")
            print(f"  {c['name']}: {c['status']}, cosine {acc}, p50 {lat} ms {c.get('reason') or ''}")


if __name__ == "__main__":
    main()
