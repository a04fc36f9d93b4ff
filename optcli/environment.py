"""Facts about the machine and library versions, read without importing the heavy libraries."""
from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Mapping


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_name() -> str | None:
    """The first NVIDIA GPU's name via nvidia-smi, or None (no driver, no GPU)."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    name = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    return name


def cpu_isa() -> dict[str, object]:
    """The CPU's capability set (optcli/cpu/isa.py): what INT8 recipes and the fast search's priors key on."""
    from optcli.cpu.isa import detect

    return detect().to_json()


def environment() -> dict[str, object]:
    """Versions, CPU, GPU and load of this machine, as reports, bench and compare record them."""
    ort = package_version("onnxruntime") or package_version("onnxruntime-gpu")
    return {
        "python": platform.python_version(),
        "platform": f"{sys.platform}-{platform.machine()}",
        "torch": package_version("torch"),
        "onnx": package_version("onnx"),
        "onnxruntime": ort,
        "onnxruntime_package": "onnxruntime-gpu" if package_version("onnxruntime-gpu") else "onnxruntime",
        "tensorrt": package_version("tensorrt") or package_version("tensorrt-cu12") or package_version("tensorrt-cu13"),
        "openvino": package_version("openvino"),
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "cpu_isa": cpu_isa(),
        "load_average_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "gpu": gpu_name(),
    }


def busy_warning(env: Mapping[str, object]) -> str | None:
    """A warning when other work was running: PyTorch eager (OpenMP) timings degrade worst."""
    load, cores = env.get("load_average_1m"), env.get("cpu_count") or 1
    if isinstance(load, (int, float)) and isinstance(cores, int) and load > 0.75 * cores:
        return (f"the machine was busy (load average {load} on {cores} cores): latency figures are noisy, "
                f"PyTorch eager worst of all; rerun on an idle machine before trusting speedups")
    return None
