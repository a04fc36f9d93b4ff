"""OpenVINO runner: runs an OpenVINO IR (`model.xml` + `model.bin`) on the CPU.

One compiled model per runner; each handle (`concurrency` of them) is an infer request of it, and
with concurrency > 1 the model is compiled with that many CPU streams so the requests really run
side by side. OpenVINO releases the GIL while a request runs, which is what lets the base class's
thread pool raise throughput.

Precision: OpenVINO's CPU plugin computes in BF16 by default on CPUs that have it (AVX-512 BF16,
AMX), also for an FP32 IR, and it does NOT read a precision from the IR. optcli records the
precision it measured and gated in the IR's rt_info (`optcli/inference_precision`), and this runner
passes it as INFERENCE_PRECISION_HINT; the `precision=` option overrides it. An IR without that
record runs with OpenVINO's own default ("auto"). Deploying the IR elsewhere (Triton's OpenVINO
backend, benchmark_app): pass the same hint, or FP32 IRs silently run in BF16 on such CPUs.
"""
from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, TypedDict

from optcli.errors import UsageError
from optcli.input_limits import MAX_DIMS_KEY, max_dims
from optcli.optional_imports import require
from optcli.runtime.base import BackendFeeds, Feeds, Runner
from optcli.tensor_spec import TensorSpec

MODEL_FILE = "model.xml"
WEIGHTS_FILE = "model.bin"
RT_INFO_PRECISION = ["optcli", "inference_precision"]
# optcli's names -> OpenVINO's element type names for INFERENCE_PRECISION_HINT.
PRECISIONS = {"fp32": "f32", "f32": "f32", "bf16": "bf16", "fp16": "f16", "f16": "f16", "auto": None}


@functools.lru_cache(maxsize=1)
def core() -> Any:
    """One OpenVINO Core per process (it holds the loaded plugins)."""
    ov = require("openvino", "running OpenVINO models")
    return ov.Core()


def cpu_capabilities() -> list[str]:
    """OpenVINO's CPU optimization capabilities, e.g. ['BF16', 'FP32', 'INT8', ...]."""
    return [str(c) for c in core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")]


def cpu_supports_bf16() -> bool:
    """True where the CPU has native BF16 arithmetic (OpenVINO lists BF16 among its capabilities)."""
    return "BF16" in cpu_capabilities()


def resolve_model_path(path: str | Path) -> Path:
    """The .xml of an IR: the path itself, or model.xml inside a folder; its .bin must sit beside it."""
    p = Path(path)
    if p.is_dir():
        p = p / MODEL_FILE
    if not p.is_file():
        raise UsageError(f"OpenVINO model not found: {p}", hint="pass the IR's .xml file (its .bin beside it)")
    if p.suffix.lower() != ".xml":
        raise UsageError(f"{p.name} is not an OpenVINO IR (.xml)", hint="pass the IR's .xml file")
    if not p.with_suffix(".bin").is_file():
        raise UsageError(f"{p.name} has no weights file {p.with_suffix('.bin').name} beside it",
                         hint="copy the .bin along with the .xml; they are one model")
    return p


def recorded_precision(model: Any) -> str | None:
    """The inference precision optcli recorded in an IR, or None."""
    if model.has_rt_info(RT_INFO_PRECISION):
        return str(model.get_rt_info(RT_INFO_PRECISION).astype(str))
    return None


def read_model(path: Path) -> Any:
    """The IR at `path` (a resolved .xml), or a one-line UsageError saying why OpenVINO cannot read it."""
    try:
        return core().read_model(str(path))
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"OpenVINO cannot read {path.name}: {first[:300]}",
                         hint="the .xml/.bin pair is corrupt or from a newer OpenVINO; re-run optcli compile"
                         ) from exc


def _element_dtype(element_type: Any) -> str:
    try:
        return str(element_type.to_dtype())
    except Exception:  # bf16 and other types numpy has no dtype for
        return element_type.get_type_name()


def framework_metadata(model: Any, *keys: str) -> dict[str, str]:
    """The source graph's metadata the IR converter kept (rt_info "framework"), for `keys`."""
    return {k: str(model.get_rt_info(["framework", k]).astype(str)) for k in keys
            if model.has_rt_info(["framework", k])}


def port_spec(port: Any, index: int) -> TensorSpec:
    """A model port as a TensorSpec: dynamic dims named (dim 0 `batch`), element type as numpy's name."""
    name = port.get_any_name()
    shape = []
    for i, d in enumerate(port.get_partial_shape()):
        if d.is_static:
            shape.append(d.get_length())
        else:
            shape.append("batch" if i == 0 else f"{name}_dim{i}")
    return TensorSpec(name or f"port{index}", tuple(shape), _element_dtype(port.get_element_type()))



class LayerTime(TypedDict):
    """One executed layer in `layer_profile`: OpenVINO's node name and type, the kernel it chose, its times."""
    name: str
    op_type: str
    exec_type: str
    total_ms: float
    calls: int
    per_run_ms: float
    share: float  # of the summed layer time

class OpenVINORunner(Runner):
    """Runs an OpenVINO IR on the CPU.

    Options: `precision` (fp32 | bf16 | auto; default: what optcli recorded in the IR, else auto),
    `threads` (intra-op threads in all; default all cores), `concurrency` (infer requests, and as
    many CPU streams), `perf_count=True` to collect per-layer times (see `layer_profile`).
    """

    backend = "openvino-cpu"

    def __init__(self, path: str | Path, *, precision: str | None = None, threads: int | None = None,
                 concurrency: int = 1, perf_count: bool = False, device: str = "cpu") -> None:
        if device.lower() != "cpu":
            raise UsageError(f"the OpenVINO runner runs on the CPU, not {device!r}", hint="pass device='cpu'")
        if precision is not None and precision not in PRECISIONS:
            raise UsageError(f"unknown OpenVINO precision {precision!r}", hint="use fp32, bf16 or auto")
        self.path = resolve_model_path(path)
        self.threads = threads or (os.cpu_count() or 1)
        self.perf_count = perf_count
        model = read_model(self.path)
        self.requested_precision = precision or recorded_precision(model) or "auto"
        config: dict[str, object] = {"INFERENCE_NUM_THREADS": self.threads, "PERF_COUNT": perf_count}
        hint = PRECISIONS.get(self.requested_precision)
        if hint is not None:
            config["INFERENCE_PRECISION_HINT"] = hint
        if concurrency > 1:
            config["NUM_STREAMS"] = min(concurrency, self.threads)
        else:
            config["PERFORMANCE_HINT"] = "LATENCY"
        try:
            self.compiled = core().compile_model(model, "CPU", config)
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UsageError(f"OpenVINO cannot compile {self.path.name} for the CPU: {first[:300]}",
                             hint="try precision='fp32', or rerun with --debug") from exc
        actual = self.compiled.get_property("INFERENCE_PRECISION_HINT")
        self.precision = actual.get_type_name() if hasattr(actual, "get_type_name") else str(actual)
        super().__init__([port_spec(p, i) for i, p in enumerate(self.compiled.inputs)],
                         [port_spec(p, i) for i, p in enumerate(self.compiled.outputs)], concurrency)
        self.max_dims = max_dims(framework_metadata(model, MAX_DIMS_KEY), self.inputs)
        self._start()

    @property
    def settings(self) -> dict[str, object]:
        return {"inference_precision": self.precision, "requested_precision": self.requested_precision,
                "inference_threads": self.threads, "streams": int(self.compiled.get_property("NUM_STREAMS")),
                "perf_count": self.perf_count}

    def _make_handle(self) -> Any:
        return self.compiled.create_infer_request()

    def _run(self, handle: Any, feeds: BackendFeeds) -> list[Any]:
        try:
            # share_inputs: the arrays are already contiguous numpy; outputs are copied out of the
            # request's buffers, which the next call on this handle overwrites.
            return list(handle.infer(feeds, share_inputs=True).to_tuple())
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UsageError(f"OpenVINO could not run {self.path.name}: {first[:300]}",
                             hint=f"inputs: {self.describe_inputs()}") from exc

    def layer_profile(self, feeds: Feeds, runs: int = 50, warmup: int = 5) -> list[LayerTime]:
        """Per-layer times over `runs` calls (the runner needs perf_count=True): one row per executed
        layer, slowest first, with OpenVINO's node name and type, the kernel it chose (exec_type,
        e.g. `brgemm_avx512_amx_I8` shows INT8 really ran) and total/per-run milliseconds."""
        if not self.perf_count:
            raise UsageError("per-layer times need the runner opened with perf_count=True")
        normalized = self.normalize(feeds)
        handle = self._handles.get()
        try:
            for _ in range(warmup):
                handle.infer(normalized, share_inputs=True)
            totals: dict[str, LayerTime] = {}
            for _ in range(runs):
                handle.infer(normalized, share_inputs=True)
                for info in handle.get_profiling_info():
                    if str(info.status).endswith("NOT_RUN"):
                        continue
                    row = totals.setdefault(info.node_name, LayerTime(
                        name=info.node_name, op_type=info.node_type, exec_type=info.exec_type, total_ms=0.0, calls=0,
                        per_run_ms=0.0, share=0.0))
                    row["total_ms"] += info.real_time.total_seconds() * 1000.0
                    row["calls"] += 1
        finally:
            self._handles.put(handle)
        rows = sorted(totals.values(), key=lambda r: (-r["total_ms"], r["name"]))
        total = sum(r["total_ms"] for r in rows) or 1.0
        for r in rows:
            r["per_run_ms"] = r["total_ms"] / runs
            r["share"] = r["total_ms"] / total
        return rows
