"""The first GPU run in one command (issue 29, part 5): tests/gpu and the engine benchmark within
10 minutes, and docs/benchmarks/gpu.md written from what ran.

    python benchmarks/gpu_first_run.py                               # on the GPU machine
    python benchmarks/gpu_first_run.py --allow-no-gpu --out X.md     # anywhere: the page says what skipped

Steps, each inside its share of the budget (--budget, 570 s by default):
1. the machine: nvidia-smi's GPU and driver, the TensorRT probe, torch and its CUDA, TensorRT-RTX;
2. `python -m pytest -m gpu tests/gpu` (at most --test-share of the budget): every test's outcome
   with its reason, and what the tests measured ($OPTCLI_GPU_RESULTS, one JSON line each);
3. `benchmarks/gpu_bench.py --batch 1 8 --runs 100` with what is left, where the probe found TensorRT:
   its rows as far as it got.
Exit 0 when nothing failed, 1 when a test or the benchmark failed, 4 without an NVIDIA GPU unless
--allow-no-gpu. Written without a GPU; tests/contract/test_gpu_first_run.py runs it on CPU.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def run(cmd: list[str], timeout: float, env: dict[str, str] | None = None) -> tuple[int | None, str]:
    """(exit code or None on timeout, stdout and stderr so far)."""
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=max(timeout, 1))
        return proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"") + (exc.stderr or b"")
        return None, out.decode(errors="replace") if isinstance(out, bytes) else out


def machine() -> dict[str, Any]:
    from optcli.backends.tensorrt.probe import tensorrt_status
    from optcli.environment import gpu_name

    facts: dict[str, Any] = {"gpu": gpu_name(), "python": sys.version.split()[0]}
    code, out = run(["nvidia-smi", "--query-gpu=driver_version,compute_cap,memory.total", "--format=csv,noheader"],
                    20) if facts["gpu"] else (1, "")
    facts["driver"] = out.strip().splitlines()[0] if code == 0 and out.strip() else None
    status = tensorrt_status()
    facts["tensorrt"] = status.summary()
    facts["tensorrt_usable"] = status.usable
    facts["tensorrt_cuda"] = status.tensorrt_cuda
    try:
        import torch

        facts["torch"] = f"{torch.__version__} (CUDA {torch.version.cuda}, sees a GPU: {torch.cuda.is_available()})"
    except Exception as exc:  # a broken torch is a fact about this machine, not a reason to stop
        facts["torch"] = f"not importable: {exc}"
    try:
        import tensorrt_rtx_bindings

        facts["tensorrt_rtx"] = str(tensorrt_rtx_bindings.__version__)
    except Exception as exc:
        facts["tensorrt_rtx"] = f"not importable ({type(exc).__name__})"
    return facts


_RESULT = re.compile(r"^tests/gpu/(\S+?)\.py::(\S+) (PASSED|FAILED|ERROR|SKIPPED)", re.M)


def _junit(path: Path) -> dict[str, dict[str, str]]:
    """test -> outcome and reason, from pytest's JUnit XML (per test, unlike the terminal summary)."""
    import xml.etree.ElementTree as ET

    rows = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "").rsplit(".", 1)[-1] or case.get("name", "").rsplit(".", 1)[-1]
        name = f"{module}::{case.get('name')}" if case.get("classname") else f"{module} (every test)"
        outcome, reason = "passed", ""
        for tag in ("failure", "error", "skipped"):
            found = case.find(tag)
            if found is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
                reason = (found.get("message") or "").splitlines()[0][:300] if found.get("message") else ""
                if reason == "collection skipped":   # the text is (file, line, 'Skipped: why')
                    said = re.search(r"Skipped: (.*)['\"]\)\s*$", found.text or "", re.S)
                    reason = said.group(1) if said else reason
                break
        rows[name] = {"test": name, "outcome": outcome, "reason": reason.removeprefix("Skipped: ")}
    return rows


def tests(budget: float, results: Path) -> tuple[list[dict[str, str]], bool, str]:
    """Every tests/gpu test's outcome and reason; after a timeout, those pytest -v printed."""
    env = {**os.environ, "OPTCLI_GPU_RESULTS": str(results)}
    junit = results.with_name("junit.xml")
    code, out = run([sys.executable, "-m", "pytest", "-v", "-m", "gpu", "-p", "no:cacheprovider",
                     f"--junitxml={junit}", "tests/gpu"], budget, env)
    if junit.is_file():
        rows = _junit(junit)
    else:
        rows = {f"{m}::{n}": {"test": f"{m}::{n}", "outcome": o.lower(), "reason": ""}
                for m, n, o in _RESULT.findall(out)}
    failed = code is None or code not in (0, 5) or any(r["outcome"] in ("failed", "error") for r in rows.values())
    last = (out.strip().splitlines() or [""])[-1]
    note = f"pytest did not finish within {budget:.0f} s: the tests not listed did not run" if code is None else last
    return list(rows.values()), failed, note


def bench(budget: float, usable: bool, reason: str) -> tuple[str, bool]:
    if not usable:
        return f"Not run: {reason}.", False
    if budget < 60:
        return f"Not run: {budget:.0f} s of the budget were left.", False
    with tempfile.TemporaryDirectory() as tmp:
        table = Path(tmp) / "bench.md"
        code, out = run([sys.executable, "benchmarks/gpu_bench.py", "--batch", "1", "8", "--runs", "100",
                         "--warmup", "10", "--out", str(table)], budget)
        if code == 0 and table.is_file():
            return table.read_text(encoding="utf-8").split("\n", 2)[2], "failed:" in table.read_text()
    rows = [line for line in out.splitlines() if line.startswith("|") or line.startswith("GPU:")]
    why = f"stopped after {budget:.0f} s" if code is None else f"exit {code}"
    return f"gpu_bench.py {why}; the rows it printed:\n\n" + "\n".join(rows), True


def page(facts: dict[str, Any], rows: list[dict[str, str]], note: str, measured: list[dict[str, Any]],
         bench_text: str, seconds: float) -> str:
    lines = ["# GPU: the first run (issue 29)", "",
             f"Written by `python benchmarks/gpu_first_run.py` on {time.strftime('%Y-%m-%d %H:%M')} "
             f"in {seconds:.0f} s. "
             "Everything below is what ran on this machine; a skipped test says why.", "",
             "## The machine", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in facts.items() if k != "tensorrt_usable"]
    lines += ["", "## tests/gpu", "", "| test | outcome | reason |", "|---|---|---|"]
    lines += [f"| {r['test']} | {r['outcome']} | {r.get('reason', '').replace('|', '/')} |" for r in rows]
    lines += ["", f"pytest: {note}", "", "## What the tests measured", ""]
    if not measured:
        lines.append("Nothing: the tests that measure were skipped or failed (see above).")
    for m in measured:
        lines.append(f"- {m.pop('kind')}: " + ", ".join(f"{k} {v}" for k, v in m.items()))
    lines += ["", "## Engine latency (benchmarks/gpu_bench.py)", "", bench_text.strip(), ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks" / "gpu.md")
    parser.add_argument("--budget", type=float, default=570.0, help="seconds for everything (default 570)")
    parser.add_argument("--test-share", type=float, default=0.6, help="share of the budget for tests/gpu")
    parser.add_argument("--allow-no-gpu", action="store_true", help="run and write the page without an NVIDIA GPU")
    args = parser.parse_args()
    start = time.monotonic()
    facts = machine()
    if facts["gpu"] is None and not args.allow_no_gpu:
        print("error: no NVIDIA GPU here (nvidia-smi finds none)", file=sys.stderr)
        print("hint: run it on the GPU machine, or pass --allow-no-gpu to write a page of skips", file=sys.stderr)
        return 4
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "results.jsonl"
        left = args.budget - (time.monotonic() - start)
        rows, tests_failed, note = tests(left * args.test_share, results)
        measured = [json.loads(line) for line in results.read_text().splitlines()] if results.is_file() else []
    bench_text, bench_failed = bench(args.budget - (time.monotonic() - start) - 10, facts["tensorrt_usable"],
                                     facts["tensorrt"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(page(facts, rows, note, measured, bench_text, time.monotonic() - start), encoding="utf-8")
    print(f"wrote {args.out}: {sum(r['outcome'] == 'passed' for r in rows)} passed, "
          f"{sum(r['outcome'] == 'skipped' for r in rows)} skipped, "
          f"{sum(r['outcome'] in ('failed', 'error') for r in rows)} failed")
    return 1 if tests_failed or bench_failed else 0


if __name__ == "__main__":
    sys.exit(main())
