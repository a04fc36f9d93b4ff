"""`--target tensorrt-rtx`: usable wherever TensorRT-RTX's builder works (no GPU needed); its engines run
only on an RTX GPU.

The builder is probed once per process in a child (`python -m optcli.backends.tensorrt_rtx.target`):
TensorRT-RTX builds without a GPU here, but a TensorRT builder that cannot work may abort the whole
process rather than raise, and optcli's own process must survive to say so.
"""
from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TypedDict

from optcli.backends.tensorrt.toolkit import TENSORRT_RTX
from optcli.errors import DeviceUnavailableError, MissingDependencyError, OptcliError

MARKER = "OPTCLI_RTX_PROBE "
PROBE_TIMEOUT_S = 180.0


class RTXBuilderUnavailableError(OptcliError):
    """TensorRT-RTX is installed but its builder does not work here: exit 4, like a missing dependency."""

    exit_code = MissingDependencyError.exit_code


class RTXFacts(TypedDict, total=False):
    """What the probe child found (version, builder, error), with whether the bindings are installed."""

    installed: bool
    version: str
    builder: bool
    error: str


@functools.lru_cache(maxsize=1)
def builder_facts() -> RTXFacts:
    """{"version", "builder": bool, "error"} from the child; {"installed": False} without the bindings."""
    if not TENSORRT_RTX.installed():
        return {"installed": False}
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        proc = subprocess.run([sys.executable, "-m", "optcli.backends.tensorrt_rtx.target"], capture_output=True,
                              text=True, timeout=PROBE_TIMEOUT_S, env=env, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"installed": True, "builder": False, "error": f"the probe did not finish: {type(exc).__name__}"}
    line = next((ln[len(MARKER):] for ln in reversed(proc.stdout.splitlines()) if ln.startswith(MARKER)), None)
    if line is None:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
        return {"installed": True, "builder": False, "error": f"the probe exited {proc.returncode}: {last}"}
    try:
        return {"installed": True, **json.loads(line)}
    except json.JSONDecodeError:
        return {"installed": True, "builder": False, "error": "the probe printed unreadable output"}


def check_target() -> str:
    """A summary for the report, or exit 4 naming what is missing, before any stage runs."""
    facts = builder_facts()
    if not facts.get("installed"):
        raise MissingDependencyError("tensorrt-rtx-cu12-bindings", TENSORRT_RTX.extra,
                                     "--target tensorrt-rtx (TensorRT-RTX's builder)")
    if not facts.get("builder"):
        raise RTXBuilderUnavailableError(f"TensorRT-RTX's builder does not work here: {facts.get('error')}",
                                         hint="reinstall with pip install --force-reinstall 'optcli[tensorrt-rtx]'")
    problem = runtime_problem()
    runs = "engines run here" if problem is None else f"engines are built ahead of time; not run: {problem}"
    return f"TensorRT-RTX {facts.get('version')} builder ({runs})"


def runtime_problem() -> str | None:
    """Why a TensorRT-RTX engine cannot run here (None: an RTX GPU is present; the runner checks the rest).
    TensorRT-RTX runs on GeForce RTX and RTX workstation GPUs, not on data-center ones (H100, A100, L4)."""
    from optcli.environment import gpu_name

    gpu = gpu_name()
    if gpu is None:
        return "no RTX GPU here (nvidia-smi finds no NVIDIA GPU)"
    if "RTX" not in gpu.upper():
        return (f"no RTX GPU here ({gpu} is not an RTX-class GPU; "
                "TensorRT-RTX runs on GeForce RTX and RTX workstation cards)")
    return None


def require_rtx_gpu(path: Path) -> None:
    """DeviceUnavailableError (exit 4, one line) where a TensorRT-RTX engine cannot run."""
    problem = runtime_problem()
    if problem is not None:
        raise DeviceUnavailableError(f"cannot run the TensorRT-RTX engine {path}: {problem}",
                                     hint="run it on a machine with an RTX GPU (compute 8.0+), or compile for this "
                                          "one with --target cpu")


# -- the child ---------------------------------------------------------------------------------
def _child_facts() -> RTXFacts:
    try:
        import tensorrt_rtx_bindings as trt
    except Exception as exc:  # ImportError, or OSError from its libraries
        return {"builder": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    facts: RTXFacts = {"version": str(trt.__version__)}
    try:
        builder = trt.Builder(trt.Logger(trt.Logger.ERROR))
        facts["builder"] = builder is not None and builder.create_network(0) is not None
    except Exception as exc:
        facts.update({"builder": False, "error": f"{type(exc).__name__}: {exc}"[:300]})
    return facts


def main() -> None:
    print(MARKER + json.dumps(_child_facts()), flush=True)


if __name__ == "__main__":
    main()
