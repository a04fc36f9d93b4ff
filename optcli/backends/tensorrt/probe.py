"""Is there a usable NVIDIA GPU and TensorRT here? Answered without risking this process.

A TensorRT builder created where no GPU is usable can abort the process (a C++ abort, not an
exception), so the real check runs in a child process (`python -m optcli.backends.tensorrt.probe`) that
imports tensorrt and torch, reads the GPU's name and compute capability, and creates a builder;
it prints one JSON line. The parent reads it, and a child that crashed, hung or printed nothing is
reported as such. Cheap checks (nvidia-smi on PATH, the tensorrt package findable) run first so a
machine without either never pays for the child.
"""
from __future__ import annotations

import functools
import importlib.util
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from optcli.environment import gpu_name
from optcli.errors import MissingDependencyError, OptcliError

MARKER = "OPTCLI_TENSORRT_PROBE "
PROBE_TIMEOUT_S = 180.0
INSTALL_HINT = ("on a machine with an NVIDIA GPU and driver: pip install 'optcli[tensorrt]' and a CUDA build of "
                "torch (tensorrt is for CUDA 13; beside a CUDA 12 torch: optcli[tensorrt-cu12]; see docs/tensorrt.md); "
                "or build for the CPU with --target cpu")


class ProbeFacts(TypedDict, total=False):
    """What the probe child prints (one JSON line after MARKER); each key only where it was found out."""

    python: str
    nvidia_smi_gpu: str | None
    tensorrt: str | None
    tensorrt_cuda: str | None
    tensorrt_error: str
    torch: str
    torch_cuda: str | None
    torch_error: str
    cuda_device: str
    compute_capability: str
    builder: bool
    builder_error: str


@dataclass(frozen=True)
class TensorRTStatus:
    """What the probe found. `missing` lists what keeps TensorRT from working here, in words."""

    usable: bool
    missing: tuple[str, ...] = ()
    gpu: str | None = None
    compute_capability: str | None = None
    tensorrt_version: str | None = None
    torch_cuda: str | None = None           # torch.version.cuda where torch can see the GPU
    tensorrt_cuda: str | None = None        # the CUDA major TensorRT was built for (its wheel's cuXX)
    facts: ProbeFacts = field(default_factory=lambda: ProbeFacts(), compare=False)

    def summary(self) -> str:
        if self.usable:
            return f"{self.gpu} (compute {self.compute_capability}) with TensorRT {self.tensorrt_version}"
        return "; ".join(self.missing) or "TensorRT is not usable here"


class TensorRTUnavailableError(MissingDependencyError):
    """`--target tensorrt` where TensorRT or the GPU is missing: exit code 4, saying what and how to install."""

    def __init__(self, status: TensorRTStatus) -> None:
        OptcliError.__init__(self, f"--target tensorrt needs an NVIDIA GPU and TensorRT: {status.summary()}",
                             hint=install_hint(status.torch_cuda))
        self.package = "tensorrt"
        self.extra = "tensorrt"
        self.status = status


def install_hint(torch_cuda: str | None) -> str:
    """INSTALL_HINT with the extra named where torch's CUDA major is known."""
    if not torch_cuda:
        return INSTALL_HINT
    from optcli.backends.tensorrt.cuda_build import extra_for

    return (f"pip install 'optcli[{extra_for(torch_cuda)}]' (TensorRT for CUDA {torch_cuda.split('.')[0]}, as torch "
            "is; see docs/tensorrt.md); or build for the CPU with --target cpu")


# TensorRT 10's support matrix starts at compute capability 7.5 (Turing): Volta (7.0) was dropped.
MIN_COMPUTE_CAPABILITY = (7, 5)


def _below_minimum(cc: str, tensorrt_version: str) -> bool:
    try:
        have = tuple(int(p) for p in cc.split(".")[:2])
        major = int(tensorrt_version.split(".")[0])
    except ValueError:
        return False
    return major >= 10 and have < MIN_COMPUTE_CAPABILITY


def _interpret(facts: ProbeFacts) -> TensorRTStatus:
    """Turn the child's facts into a status with the missing pieces named."""
    missing: list[str] = []
    gpu = facts.get("cuda_device") or facts.get("nvidia_smi_gpu")
    if not facts.get("nvidia_smi_gpu") and not facts.get("cuda_device"):
        missing.append("no NVIDIA GPU (nvidia-smi and torch.cuda find none)")
    if not facts.get("tensorrt"):
        err = facts.get("tensorrt_error") or ""
        detail = f" ({err})" if err and "No module named" not in err else ""
        missing.append(f"TensorRT not installed (no tensorrt Python package{detail})")
    if gpu and not facts.get("cuda_device"):
        if facts.get("torch") and not facts.get("torch_cuda"):
            missing.append(f"torch {facts['torch']} is a CPU build (TensorRT buffers need a CUDA build of torch)")
        elif facts.get("torch_error"):
            missing.append(f"torch is not importable ({facts['torch_error']})")
        else:
            missing.append("torch cannot use the GPU (driver or CUDA runtime problem)")
    cc = facts.get("compute_capability")
    if cc and facts.get("tensorrt") and _below_minimum(cc, str(facts["tensorrt"])):
        missing.append(f"{gpu} is compute capability {cc}; TensorRT {facts['tensorrt']} needs "
                       f"{'.'.join(map(str, MIN_COMPUTE_CAPABILITY))} or newer (Turing and later)")
    if facts.get("tensorrt") and facts.get("cuda_device") and not facts.get("builder"):
        missing.append(f"TensorRT cannot create a builder on this GPU "
                       f"({facts.get('builder_error', 'no reason given')})")
    return TensorRTStatus(usable=not missing, missing=tuple(missing), gpu=gpu,
                          compute_capability=facts.get("compute_capability"),
                          tensorrt_version=facts.get("tensorrt"), torch_cuda=facts.get("torch_cuda"),
                          tensorrt_cuda=facts.get("tensorrt_cuda"), facts=facts)


def probe_subprocess(command: list[str] | None = None, timeout: float = PROBE_TIMEOUT_S) -> TensorRTStatus:
    """Run the probe child (or `command`, for tests) and interpret what it printed."""
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = package_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = command or [sys.executable, "-m", "optcli.backends.tensorrt.probe"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return TensorRTStatus(False, (f"the TensorRT probe hung for {timeout:.0f} s (GPU or driver unresponsive)",))
    except OSError as exc:
        return TensorRTStatus(False, (f"the TensorRT probe could not start: {exc}",))
    line = next((ln[len(MARKER):] for ln in reversed(proc.stdout.splitlines()) if ln.startswith(MARKER)), None)
    if proc.returncode < 0:
        name = (signal.Signals(-proc.returncode).name if -proc.returncode in signal.valid_signals()
                else str(-proc.returncode))
        return TensorRTStatus(False, (f"the TensorRT probe crashed ({name}): "
                                      "TensorRT or the GPU driver is not usable here",))
    if line is None:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
        return TensorRTStatus(False, (f"the TensorRT probe failed (exit {proc.returncode}): {last}",))
    try:
        facts = json.loads(line)
    except json.JSONDecodeError:
        return TensorRTStatus(False, ("the TensorRT probe printed unreadable output",))
    return _interpret(facts)


@functools.lru_cache(maxsize=1)
def tensorrt_status() -> TensorRTStatus:
    """The machine's TensorRT status, cheap checks first, then the child; computed once per process."""
    smi = gpu_name()
    has_trt = importlib.util.find_spec("tensorrt") is not None
    if smi is not None and has_trt:
        return probe_subprocess()
    missing = []
    if smi is None:
        missing.append("no NVIDIA GPU (nvidia-smi finds none)")
    if not has_trt:
        missing.append("TensorRT not installed (no tensorrt Python package)")
    return TensorRTStatus(False, tuple(missing), gpu=smi)


# -- the child ---------------------------------------------------------------------------------
def _child_facts() -> ProbeFacts:
    facts: ProbeFacts = {"python": sys.version.split()[0], "nvidia_smi_gpu": gpu_name()}
    trt: Any = None
    try:
        import tensorrt

        trt = tensorrt
        facts["tensorrt"] = str(trt.__version__)
        from optcli.backends.tensorrt.cuda_build import tensorrt_cuda_major

        facts["tensorrt_cuda"] = tensorrt_cuda_major(trt)
    except Exception as exc:  # ImportError, or a broken install raising OSError from its libraries
        facts["tensorrt"] = None
        facts["tensorrt_error"] = f"{type(exc).__name__}: {exc}"[:300]
    try:
        import torch

        facts["torch"] = torch.__version__
        facts["torch_cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            facts["cuda_device"] = torch.cuda.get_device_name(0)
            major, minor = torch.cuda.get_device_capability(0)
            facts["compute_capability"] = f"{major}.{minor}"
    except Exception as exc:
        facts["torch_error"] = f"{type(exc).__name__}: {exc}"[:300]
    if trt is not None and facts.get("cuda_device"):
        try:
            # trt.Builder(logger): TensorRT Python API, Builder.__init__(logger). This is the call
            # that can abort the process where the GPU is unusable; hence the child.
            builder = trt.Builder(trt.Logger(trt.Logger.ERROR))
            facts["builder"] = builder is not None
        except Exception as exc:
            facts["builder"] = False
            facts["builder_error"] = f"{type(exc).__name__}: {exc}"[:300]
    return facts


def main() -> None:
    print(MARKER + json.dumps(_child_facts()), flush=True)


if __name__ == "__main__":
    main()
