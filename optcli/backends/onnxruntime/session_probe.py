"""Load and run an ONNX model once in a child process, so a native crash in onnxruntime (seen with
FP16 graphs at the ALL level) is reported instead of killing optcli.

    python -m optcli.backends.onnxruntime.session_probe MODEL [--level all] [--disable NchwcTransformer ...]
"""
from __future__ import annotations

import argparse
import signal
import subprocess
import sys
from pathlib import Path


def probe(path: Path, level: str = "all", disabled: list[str] | None = None, timeout: float = 300) -> tuple[bool, str]:
    """(ok, message): whether onnxruntime loads and runs the model in a child process."""
    cmd = [sys.executable, "-m", "optcli.backends.onnxruntime.session_probe", str(path), "--level", level]
    for d in disabled or []:
        cmd += ["--disable", d]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"onnxruntime did not load and run the model within {timeout:.0f} s"
    if proc.returncode == 0:
        return True, "ok"
    if proc.returncode < 0:
        try:
            name = signal.Signals(-proc.returncode).name
        except ValueError:
            name = f"signal {-proc.returncode}"
        return False, f"onnxruntime crashed ({name}) loading the model at optimization level {level}"
    last = [ln for ln in (proc.stderr or proc.stdout).strip().splitlines() if ln.strip()]
    return False, (last[-1] if last else f"exit code {proc.returncode}")[:300]


def _main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--level", default="all")
    parser.add_argument("--disable", action="append", default=[])
    args = parser.parse_args()
    from optcli.backends.onnxruntime.runner import OnnxRuntimeRunner
    from optcli.onnx_model import int_bounds_onnx
    from optcli.tensor_spec import random_inputs

    runner = OnnxRuntimeRunner(args.model, optimization=args.level, disabled_optimizers=args.disable, threads=1)
    dims = {str(d): 8 for s in runner.inputs for d in s.shape if not isinstance(d, int)}
    # Token ids inside the embedding tables they index: a vocabulary under 100 failed the probe (Gather
    # out of bounds) and with it every --fp16 of such a model.
    feeds = random_inputs(runner.inputs, 1, dims=dims, int_high=int_bounds_onnx(Path(args.model)))
    runner.run_normalized(runner.normalize(feeds))
    runner.close()
    return 0


if __name__ == "__main__":
    sys.exit(_main())
