"""Compile time: `optcli compile --int8` with the fast and the thorough CPU search beside the peer's own
INT8 preparation on the same model, in ONE run per model (fast, peer, thorough in turn, rotated per
repeat), and the chosen artifacts' speed (one interleaved measurement) and accuracy.

    make samples && python benchmarks/cpu_models.py --out optcli-out/cpu-models --only minilm,bert_base
    python benchmarks/compile_time.py [--models digits_cnn,minilm,bert_base] [--reps 1] [--json FILE]

Peers, timed as their own docs call them, from optcli's exported ONNX and the same calibration samples:
`nncf.quantize(ov.convert_model(onnx), nncf.Dataset(samples))` (defaults, and model_type=TRANSFORMER for
encoders; convert_model timed apart), and for the CNN ONNX Runtime's `quantize_static` (Q/DQ, a reader
over the samples). Every compile is cold (--force: export, calibration, candidates all rebuilt) and
uses the defaults a user gets (latency measured around stages). The bar (issue 16): fast compile <= 2x
the peer's preparation (`bar_peer`: for encoders NNCF's transformer setting, the call whose accuracy the
issue quotes; the ratio to every other peer call is printed too), the fast choice within 3% of the
thorough one's speed and accuracy.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's optcli, not an installed one
from cpu_backends import MODELS, _load  # noqa: E402

PEER = {"digits_cnn": "quantize_static", "tiny_bert": "nncf", "resnet50": "nncf", "bert_base": "nncf", "minilm": "nncf"}


def compile_once(name: str, search: str, out: Path, model: str | None = None) -> dict[str, Any]:
    """`optcli compile MODEL --int8 --force --search SEARCH` as a user runs it (a fresh process: imports
    count); MODEL is the eval model's .pt2, or `model` (the exported ONNX the peer starts from)."""
    import subprocess

    from optcli.report import RunReport

    model, data = model or MODELS[name][0], MODELS[name][1]
    shutil.rmtree(out, ignore_errors=True)
    root = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-m", "optcli", "compile", model, "--out", str(out), "--int8", "--calib", f"{data}/calib",
           "--eval", f"{data}/eval", "--force", "--search", search]
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - t0
    report = RunReport.load(out / "report.json", "the compile did not write a report")
    stages = {s.name: s.seconds for s in report.stages if s.seconds is not None}
    row: dict[str, Any] = {"wall_s": round(wall, 2), "status": report.status, "stages_s": stages,
                           "around_stages_s": round(wall - sum(stages.values()), 2)}
    build = report.stage("build")
    if report.status == "ok" and build is not None:
        d = build.details
        row.update(chosen=d.get("chosen"), why=d.get("why"), cosine=(build.accuracy or {}).get("cosine_mean"),
                   artifact=str(out / report.final["artifact"]), format=report.final["format"],
                   sha256=report.final.get("sha256"),
                   runner_options=report.final.get("runner_options") or {},
                   export=str(out / report.stage("export").artifact) if report.stage("export").artifact else None,
                   candidates={c["name"]: {"status": c["status"], **((c.get("search") or {}).get("seconds") or {})}
                               for c in d["candidates"]})
    else:
        row["error"] = (report.error or {}).get("message")
    return row


def nncf_seconds(onnx_path: str, calib: dict, transformer: bool, xml: Path | None = None) -> dict[str, float]:
    """NNCF's own INT8 as its docs show, timed (convert apart); the IR saved to `xml` where given."""
    import nncf
    import openvino as ov

    t0 = time.perf_counter()
    model = ov.convert_model(onnx_path)
    convert = time.perf_counter() - t0
    names = [p.get_any_name() for p in model.inputs]
    n = len(calib[names[0]])
    items = [{k: calib[k][i:i + 1] for k in names} for i in range(n)]
    kwargs: dict[str, Any] = {"subset_size": n}
    if transformer:
        kwargs["model_type"] = nncf.ModelType.TRANSFORMER
    logging.getLogger("nncf").setLevel(logging.ERROR)
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        quantized = nncf.quantize(model, nncf.Dataset(items), **kwargs)
    seconds = {"convert_s": round(convert, 2), "quantize_s": round(time.perf_counter() - t0, 2)}
    if xml is not None:
        ov.save_model(quantized, str(xml), compress_to_fp16=False)
    return seconds


def quantize_static_seconds(onnx_path: str, calib: dict, out: Path) -> dict[str, float]:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            n = len(next(iter(calib.values())))
            self.it = iter([{k: v[i:i + 1] for k, v in calib.items()} for i in range(n)])

        def get_next(self) -> dict | None:
            return next(self.it, None)

    out.mkdir(parents=True, exist_ok=True)
    logging.getLogger().setLevel(logging.ERROR)
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        quantize_static(onnx_path, str(out / "peer-int8.onnx"), Reader(), quant_format=QuantFormat.QDQ)
    return {"quantize_s": round(time.perf_counter() - t0, 2)}


def peer(name: str, export: str, out: Path, encoder: bool) -> dict[str, Any]:
    from optcli.onnx_model import io_specs, load_onnx

    specs, _ = io_specs(load_onnx(Path(export), load_weights=False))
    calib, _ = _load(Path(MODELS[name][1]) / "calib", [s.name for s in specs])
    if PEER[name] == "quantize_static":
        return {"quantize_static": quantize_static_seconds(export, calib, out / "peer"),
                "nncf default": nncf_seconds(export, calib, False)}
    rows = {"nncf default": nncf_seconds(export, calib, False)}
    if encoder:
        rows["nncf transformer"] = nncf_seconds(export, calib, True)
    return rows


def speed(rows: dict[str, dict[str, Any]], name: str, rounds: int) -> dict[str, dict[str, Any]]:
    """p50 of each search's chosen artifact at batch 1 in one interleaved run."""
    from optcli.cpu.measure import interleaved
    from optcli.runtime import open_runner

    runners = {k: open_runner(r["artifact"], r["format"], **r["runner_options"])
               for k, r in rows.items() if "artifact" in r}
    try:
        names = [i.name for i in next(iter(runners.values())).inputs]
        ev, _ = _load(Path(MODELS[name][1]) / "eval", names)
        feeds = {k: r.normalize({n: v[:1] for n, v in ev.items()}) for k, r in runners.items()}
        stats, _ = interleaved(runners, feeds, batch=1, min_rounds=rounds, min_seconds=0.0, max_seconds=600.0)
    finally:
        for r in runners.values():
            r.close()
    return {k: {"p50": v["p50"], "p50_ci": v["p50_ci"]} for k, v in stats.items()}


def bench(name: str, out: Path, reps: int, rounds: int,
          searches: tuple[str, ...] = ("fast", "thorough")) -> dict[str, Any]:
    from optcli.onnx_model import load_onnx, looks_like_encoder, op_histogram

    result: dict[str, Any] = {"model": name, "runs": []}
    for rep in range(reps):
        # The .pt2 compile first (the peer starts from its exported ONNX), then the peer and the two
        # searches from that ONNX, rotated per repeat.
        run: dict[str, Any] = {"fast from .pt2": compile_once(name, "fast", out / name / f"pt2-fast-{rep}")}
        export = run["fast from .pt2"].get("export")  # None: the compile failed
        if not export:
            result["runs"].append(run)
            continue
        order = ["peer", *searches]
        for step in order[rep % len(order):] + order[:rep % len(order)]:
            if step == "peer":
                encoder = looks_like_encoder(op_histogram(load_onnx(Path(export), load_weights=False)))
                run["peer"] = peer(name, export, out / name, encoder)
            else:
                run[step] = compile_once(name, step, out / name / f"onnx-{step}-{rep}", model=export)
        run["speed"] = speed({k: run[k] for k in searches}, name, rounds)
        result["runs"].append(run)
    return result


def same_model(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """The two runs shipped the same model: the same bytes, or for an OpenVINO IR the same weights and
    the same graph apart from node names (numbered per process) and optcli's records (rt_info)."""
    import xml.etree.ElementTree as ET

    if not a.get("artifact") or not b.get("artifact"):
        return False
    if a.get("sha256") == b.get("sha256"):
        return True
    pa, pb = Path(a["artifact"]), Path(b["artifact"])
    if pa.suffix != ".xml" or pb.suffix != ".xml" or \
            pa.with_suffix(".bin").read_bytes() != pb.with_suffix(".bin").read_bytes():
        return False

    def graph(path: Path) -> bytes:
        root = ET.parse(path).getroot()
        for parent in root.iter():
            for child in [c for c in parent if c.tag == "rt_info"]:
                parent.remove(child)
        for el in root.iter():
            el.attrib.pop("name", None)
        return ET.tostring(root)

    return graph(pa) == graph(pb)


def bar_peer(peers: dict[str, Any]) -> str:
    """The peer call issue 16's bar is read against: quantize_static for the CNN, NNCF's transformer
    setting for encoders (the issue's own peer: its cosines, 0.9997 on BERT-base and 0.9964 on MiniLM,
    are that setting's; NNCF's defaults give 0.998 and 0.64 there, docs/benchmarks/cpu.md), else
    NNCF's defaults."""
    for name in ("quantize_static", "nncf transformer", "nncf default"):
        if name in peers:
            return name
    return "nncf default"


def _int8_work(r: dict[str, Any]) -> float:
    return sum(r["stages_s"].get(k, 0.0) for k in ("quantize-int8", "build"))


def summary(res: dict[str, Any]) -> list[str]:
    lines = []
    for i, run in enumerate(res["runs"]):
        p, sp = run.get("peer", {}), run.get("speed", {})
        peers = ", ".join(f"{k} {v['quantize_s']:.1f} s"
                          + (f" (+ convert {v['convert_s']:.1f} s)" if "convert_s" in v else "")
                          for k, v in p.items())
        ref_name = bar_peer(p)
        ref = p.get(ref_name, {}).get("quantize_s")
        lines += [f"## {res['model']} (run {i + 1}; load average after {res.get('load_average', ['?'])[0]})",
                  f"peer preparation (from optcli's exported ONNX): {peers}"]
        for k in ("fast from .pt2", "fast", "thorough"):
            r = run.get(k)
            if r is None:
                continue
            label = k if k.endswith(".pt2") else f"{k} from ONNX"
            if r.get("error"):
                lines.append(f"{label}: failed: {r['error']}")
                continue
            ratio = f"{r['wall_s'] / ref:.1f}x {ref_name}; INT8 stages {_int8_work(r):.1f} s = " \
                    f"{_int8_work(r) / ref:.1f}x" if ref else "-"
            p50 = f"; p50 {sp[k]['p50']:.4g} ms {sp[k]['p50_ci']}" if k in sp else ""
            lines.append(f"{label}: {r['wall_s']:.1f} s ({ratio}); stages {json.dumps(r['stages_s'])}; "
                         f"outside stages {r['around_stages_s']:.1f} s; "
                         f"chose {r['chosen']} (cosine {r['cosine']:.5f}){p50}")
            others = [f"{r['wall_s'] / v['quantize_s']:.2f}x {k}" for k, v in p.items()
                      if k != ref_name and v.get("quantize_s")]
            if others:
                lines.append(f"    against the other peer calls: {', '.join(others)}")
            lines.append(f"    candidates: {json.dumps(r['candidates'])}")
        f, t = run.get("fast", {}), run.get("thorough", {})
        if same_model(f, t):
            # The speed ratio below is then this machine's spread between two compiled copies of one model.
            lines.append("fast and thorough shipped the same model (same weights and graph; their p50s differ by "
                         "noise alone)")
        elif f.get("chosen") and f.get("chosen") == t.get("chosen"):
            lines.append("fast and thorough chose the same candidate, built differently")
        if "fast" in sp and "thorough" in sp and f.get("cosine") and t.get("cosine"):
            lines.append(f"fast vs thorough: speed {sp['thorough']['p50'] / sp['fast']['p50']:.3f}x, "
                         f"cosine {f['cosine']:.5f} vs {t['cosine']:.5f}, "
                         f"compile {t['wall_s'] / f['wall_s']:.2f}x faster")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="digits_cnn,minilm,bert_base")
    parser.add_argument("--out", type=Path, default=Path("optcli-out/compile-time"))
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=8, help="interleaved rounds for the artifacts' speed")
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    parser.add_argument("--searches", default="fast,thorough", help="which searches to compile with from the ONNX")
    args = parser.parse_args()
    results = []
    for name in args.models.split(","):
        if not Path(MODELS[name][0]).exists():
            print(f"skipping {name}: {MODELS[name][0]} not built (see the docstring)")
            continue
        res = bench(name, args.out, args.reps, args.rounds, tuple(args.searches.split(",")))
        res["load_average"] = os.getloadavg()
        results.append(res)
        print("\n".join(summary(res)), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
