"""`make check-latest`: does optcli still work on the newest versions its ranges allow?

Run inside a throwaway venv that pip filled from pyproject.toml's ranges (not the lock). Prints the
packages that differ from the lock, then compiles the sample models the way the README and a user do:
the digits CNN FP32 and --int8 from its .pt2, and the tiny BERT --int8. Ends with one line,
`check-latest: PASS ...` or `check-latest: FAIL ...`, and exit 0 or 1.

    .venv-latest/bin/python .ci/check_latest.py --lock requirements/cpu.lock --venv .venv-latest
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(lines: list[str]) -> dict[str, str]:
    """{package: version} from lock or `pip freeze` lines (editable installs and comments left out)."""
    pins = {}
    for line in lines:
        m = _PIN.match(line.strip())
        if m:
            pins[_canonical(m.group(1))] = m.group(2)
    return pins


def drift(lock: dict[str, str], installed: dict[str, str]) -> list[str]:
    """`name lock -> installed` for every locked package installed at another version."""
    return [f"{name} {version} -> {installed[name]}" for name, version in sorted(lock.items())
            if name in installed and installed[name] != version]


def _run(cmd: list[str], log: Path) -> tuple[bool, float]:
    t0 = time.perf_counter()
    with log.open("a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        proc = subprocess.run(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT)
    return proc.returncode == 0, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lock", type=Path, required=True)
    ap.add_argument("--venv", type=Path, required=True)
    ap.add_argument("--samples", type=Path, help="sample models already built (else built in this venv)")
    args = ap.parse_args(argv)
    bindir = (args.venv / "bin").resolve()
    freeze = subprocess.run([str(bindir / "python"), "-m", "pip", "freeze"], capture_output=True, text=True,
                            check=True).stdout.splitlines()
    moved = drift(read_pins(args.lock.read_text().splitlines()), read_pins(freeze))
    print(f"{len(moved)} packages differ from {args.lock}:" if moved else f"every package as in {args.lock}")
    for line in moved:
        print(f"  {line}")
    work = Path(tempfile.mkdtemp(prefix="optcli-check-latest-"))
    log = work / "log.txt"
    optcli = str(bindir / "optcli")
    samples = args.samples.resolve() if args.samples else work / "samples"
    steps = [] if args.samples else [
        ("samples", [str(bindir / "python"), "-m", "sample_models.build_all", "--out", str(samples)])]
    steps += [
        ("digits_cnn fp32", [optcli, "compile", str(samples / "digits_cnn.pt2"), "--out", str(work / "cnn")]),
        ("digits_cnn int8", [optcli, "compile", str(samples / "digits_cnn.pt2"), "--out", str(work / "cnn-int8"),
                             "--int8", "--calib", "calibration/digits_cnn/calib",
                             "--eval", "calibration/digits_cnn/eval"]),
        ("tiny_bert int8", [optcli, "compile", str(samples / "tiny_bert.pt2"), "--out", str(work / "bert-int8"),
                            "--int8", "--calib", "calibration/tiny_bert/calib",
                            "--eval", "calibration/tiny_bert/eval"]),
    ]
    results = []
    for name, cmd in steps:
        ok, seconds = _run(cmd, log)
        ok = ok and (name == "samples" or _shipped_precision(work, name) is not None)
        results.append((name, ok, seconds))
        print(f"  {'ok  ' if ok else 'FAIL'} {name} ({seconds:.0f} s)")
        if not ok and name == "samples":
            break
    failed = [n for n, ok, _ in results if not ok]
    verdict = "FAIL" if failed or len(results) < len(steps) else "PASS"
    summary = f"failed: {', '.join(failed)}; log {log}" if failed else f"{len(results)} steps"
    print(f"check-latest: {verdict} ({summary}; {len(moved)} packages newer or older than the lock)")
    return 0 if verdict == "PASS" else 1


def _shipped_precision(work: Path, step: str) -> str | None:
    """The precision of what the compile shipped, from its report: an INT8 step must ship INT8."""
    import json

    folder = {"digits_cnn fp32": "cnn", "digits_cnn int8": "cnn-int8", "tiny_bert int8": "bert-int8"}[step]
    try:
        final = json.loads((work / folder / "report.json").read_text()).get("final") or {}
    except (OSError, ValueError):
        return None
    stages = {s.get("name"): s for s in json.loads((work / folder / "report.json").read_text()).get("stages", [])}
    export = stages.get("export") or {}
    if export.get("status") != "ok" or not str(export.get("artifact", "")).endswith(".onnx"):
        return None  # a run that went on without ONNX hides a broken exporter (issue 28)
    precision = final.get("precision")
    if step.endswith("int8") and precision != "int8":
        return None
    return precision


if __name__ == "__main__":
    sys.exit(main())
