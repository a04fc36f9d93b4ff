"""TensorRT runner: executes a serialized engine (`model.engine`) on an NVIDIA GPU.

Each handle (`concurrency` of them) owns an execution context, its own CUDA stream, device buffers
allocated once for the largest shapes the profile allows, and pinned host buffers; a call copies
inputs host->device asynchronously, sets the input shapes when they changed (dynamic profiles),
enqueues the engine and copies outputs back, all on that stream. Device and pinned memory are
torch tensors (torch CUDA build), never pycuda. Options: `outputs="torch"` keeps outputs on the GPU
as torch CUDA tensors (no copy back); `cuda_graph=True` captures the enqueue in a CUDA graph per
set of input shapes and replays it whenever those shapes recur; `time_gpu()` measures device time with CUDA events.

TensorRT calls (10.x / 11.x Python API, name-based I/O; each row of tests/contract/tensorrt_api.py
cites its pyCore.cpp binding): trt.Runtime(logger).deserialize_cuda_engine (after
init_libnvinfer_plugins), engine.get_tensor_location / is_shape_inference_io / get_tensor_format,
engine.create_execution_context(), context.set_input_shape(name, shape), context.get_tensor_shape,
context.set_tensor_address(name, ptr), context.execute_async_v3(stream_handle) -> bool; TensorRT asks
for one enqueue after a shape change before a CUDA graph capture, which _capture does.

Never run on a real GPU by its author: see docs/tensorrt.md for what was verified and how.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from optcli.errors import UsageError
from optcli.optional_imports import require
from optcli.runtime.base import Runner, _to_numpy
from optcli.tensor_spec import DTYPES, TensorSpec, format_shape
from optcli.backends.tensorrt.builder import deserialize
from optcli.backends.tensorrt.logger import make_logger
from optcli.backends.tensorrt.metadata import ENGINE_FILE, EngineMetadata, engine_io, read_metadata
from optcli.backends.tensorrt.toolkit import TENSORRT

Shape = tuple[int, ...]


Key = tuple  # (input shapes, values of shape-tensor inputs): what a CUDA graph and output shapes depend on


@dataclass
class _Slot:
    """One execution context with its stream and buffers."""

    context: Any
    stream: Any
    device: dict[str, Any]          # name -> flat buffer TensorRT reads/writes (pinned host memory for HOST tensors)
    host: dict[str, Any]            # name -> flat pinned host buffer of the same size
    shapes: dict[str, Shape]        # input shapes the context is set to
    out_shapes: dict[str, Shape]
    inputs_copied: Any              # CUDA event: the pinned input buffers are free after it
    key: Key = ()
    graphs: dict[Key, Any] = field(default_factory=dict)   # one CUDA graph per key, replayed when it recurs
    out_cache: dict[Key, dict[str, Shape]] = field(default_factory=dict)


def _numel(shape: Shape) -> int:
    return math.prod(shape) if shape else 1


class TensorRTRunner(Runner):
    """Runs a TensorRT engine file (or an engine cache entry folder) on one GPU."""

    backend = "tensorrt"
    toolkit = TENSORRT  # the bindings it runs with (TensorRT-RTX's runner subclasses it)

    def __init__(self, path: str | Path, *, threads: int | None = None, concurrency: int = 1, device: int = 0,
                 outputs: str = "numpy", cuda_graph: bool = False, check_metadata: bool = True) -> None:
        del threads  # the pipeline passes CPU thread counts to every runner; an engine runs on the GPU
        if outputs not in ("numpy", "torch"):
            raise UsageError(f"unknown outputs mode {outputs!r}", hint="use numpy (copied to the host) or torch (stay on the GPU)")
        self.trt = require(self.toolkit.module, f"running {self.toolkit.label} engines")
        self.torch = torch = require("torch", "TensorRT device buffers (a CUDA build of torch)")
        if not torch.cuda.is_available():
            from optcli.backends.tensorrt.probe import TensorRTStatus, TensorRTUnavailableError

            raise TensorRTUnavailableError(TensorRTStatus(False, (
                f"torch {torch.__version__} sees no CUDA GPU (CPU build, or no driver)",)))
        self.device = torch.device("cuda", device)
        self.output_mode = outputs
        self.cuda_graph = cuda_graph
        self.graph_note: str | None = None
        self.engine_path = _engine_file(Path(path))
        self.metadata = self._check_metadata() if check_metadata else None
        self._logger = make_logger(self.trt)
        allow_host_code = bool(self.metadata and self.metadata.options.get("version_compat"))
        with torch.cuda.device(self.device):
            self.engine = deserialize(self.trt, self.engine_path.read_bytes(), self._logger, allow_host_code)
        if self.engine is None:
            raise UsageError(f"TensorRT cannot load {self.engine_path}: {self._logger.last_errors()}",
                             hint="engines only load on the TensorRT version and GPU that built them: rebuild it "
                                  "with optcli compile MODEL --target tensorrt --force")
        ins, outs = engine_io(self.trt, self.engine)
        self._check_formats([e["name"] for e in ins + outs])
        # HOST tensors (shape tensors) take host pointers; shape-inference inputs decide output shapes
        # by their values (pyCore.cpp ICudaEngine.get_tensor_location / is_shape_inference_io).
        self._on_host = {e["name"] for e in ins + outs
                         if self.engine.get_tensor_location(e["name"]) == self.trt.TensorLocation.HOST}
        self._value_inputs = [e["name"] for e in ins if self.engine.is_shape_inference_io(e["name"])]
        self._ranges = {i["name"]: (tuple(i["profile"][0]), tuple(i["profile"][2])) for i in ins if "profile" in i}
        self._max = {i["name"]: self._ranges[i["name"]][1] if i["name"] in self._ranges else tuple(i["shape"])
                     for i in ins}
        self._dtypes = {e["name"]: e["dtype"] for e in ins + outs}
        super().__init__([_spec(e) for e in ins], [_spec(e) for e in outs], concurrency)
        self._start()

    @classmethod
    def from_cache(cls, key: str, cache_dir: str | Path | None = None, **options: Any) -> TensorRTRunner:
        """Open the engine cache entry `key` (see optcli.backends.tensorrt.engine_cache)."""
        from optcli.backends.tensorrt.engine_cache import EngineCache
        from optcli.backends.tensorrt.options import default_cache_root

        root = Path(cache_dir) if cache_dir is not None else default_cache_root() / "engines"
        return cls(EngineCache(root).entry(key), **options)

    @property
    def settings(self) -> dict[str, Any]:
        return {"device": self.torch.cuda.get_device_name(self.device), "tensorrt": str(self.trt.__version__),
                "cuda_graph": self.cuda_graph, "cuda_graph_note": self.graph_note, "outputs": self.output_mode,
                "concurrency": self.concurrency}

    def _check_metadata(self) -> EngineMetadata | None:
        meta_path = self.engine_path.with_name(self.engine_path.name + ".json")
        if not meta_path.is_file():
            return None
        try:
            meta = read_metadata(meta_path)
        except ValueError:
            return None  # not ours or damaged: TensorRT's own check at deserialization still applies
        major, minor = self.torch.cuda.get_device_capability(self.device)
        problem = meta.mismatch(tensorrt_version=str(self.trt.__version__),
                                gpu=self.torch.cuda.get_device_name(self.device), compute_capability=f"{major}.{minor}",
                                cuda=getattr(self.torch.version, "cuda", None))
        if problem:
            raise UsageError(f"{self.engine_path} does not fit this machine: {problem}",
                             hint="rebuild it here with optcli compile MODEL --target tensorrt")
        return meta

    def _check_formats(self, names: list[str]) -> None:
        """Only linear (row-major) I/O is read and written correctly here; a vectorized format such as
        CHW32 lays the same tensor out differently (pyCore.cpp ICudaEngine.get_tensor_format)."""
        for name in names:
            fmt = self.engine.get_tensor_format(name)
            if fmt != self.trt.TensorFormat.LINEAR:
                raise UsageError(f"engine tensor {name!r} uses the {getattr(fmt, 'name', fmt)} format; optcli's "
                                 "runner reads and writes linear tensors only",
                                 hint="rebuild the engine without I/O format constraints (optcli never sets them)")

    # -- handles -----------------------------------------------------------------------------
    def _torch_dtype(self, name: str) -> Any:
        dtype = getattr(self.torch, self._dtypes[name], None)
        if dtype is None:
            raise UsageError(f"tensor {name!r} has dtype {self._dtypes[name]}, which torch cannot hold",
                             hint="keep FP8/INT4 inside the graph; engine inputs and outputs must be torch dtypes")
        return dtype

    def _make_handle(self) -> _Slot:
        torch = self.torch
        with torch.cuda.device(self.device):
            context = self.engine.create_execution_context()
            if context is None:
                raise UsageError(f"TensorRT could not create an execution context: {self._logger.last_errors()}",
                                 hint="the GPU may be out of memory")
            slot = _Slot(context, torch.cuda.Stream(device=self.device), {}, {}, {}, {}, torch.cuda.Event())
            if self._value_inputs:  # output sizes depend on values only a call brings: allocate inputs now
                for name, shape in self._max.items():
                    self._buffer(slot, name, _numel(shape))
            else:
                self._set_shapes(slot, dict(self._max))
            slot.inputs_copied.record(slot.stream)
        return slot

    def _buffer(self, slot: _Slot, name: str, numel: int) -> None:
        """Make sure `name` has the buffer TensorRT uses and a pinned host buffer of >= `numel` elements.
        A HOST tensor's only buffer is the pinned one: TensorRT reads or writes it from the CPU."""
        if name in slot.host and slot.host[name].numel() >= numel:
            return
        dtype = self._torch_dtype(name)
        slot.host[name] = self.torch.empty(max(numel, 1), dtype=dtype, pin_memory=True)
        if name in self._on_host:
            slot.device[name] = slot.host[name]
        else:
            # Allocated on the slot's stream, which uses it, so torch's caching allocator never hands
            # the block to another stream while this one may still be reading it.
            with self.torch.cuda.stream(slot.stream):
                slot.device[name] = self.torch.empty(max(numel, 1), dtype=dtype, device=self.device)
        if not slot.context.set_tensor_address(name, slot.device[name].data_ptr()):
            raise UsageError(f"TensorRT refused the buffer address for {name!r}: {self._logger.last_errors()}")
        slot.graphs.clear()  # captured graphs hold the old addresses

    def _set_shapes(self, slot: _Slot, shapes: dict[str, Shape], values: dict[str, Any] | None = None) -> None:
        """Set input shapes (and shape-tensor values, which TensorRT reads from host memory) and read
        the output shapes they give; those are remembered per key."""
        for name, shape in shapes.items():
            if name in self._ranges:
                lo, hi = self._ranges[name]
                if len(shape) != len(lo) or not all(a <= s <= b for a, s, b in zip(lo, shape, hi)):
                    raise UsageError(f"input {name!r} shape {format_shape(shape)} is outside the engine's profile "
                                     f"{format_shape(lo)} .. {format_shape(hi)}",
                                     hint="rebuild the engine with a wider range (--batch MIN/OPT/MAX or "
                                          "--input NAME:MIN/OPT/MAX)")
                if not slot.context.set_input_shape(name, shape):
                    raise UsageError(f"TensorRT refused shape {format_shape(shape)} for {name!r}: "
                                     f"{self._logger.last_errors()}")
            self._buffer(slot, name, _numel(shape))
        for name, value in (values or {}).items():
            self._copy_host(slot, name, value, shapes[name])
        key = _key(shapes, values)
        out_shapes = slot.out_cache.get(key)
        if out_shapes is None:
            out_shapes = {}
            for spec in self.outputs:
                shape = tuple(int(d) for d in slot.context.get_tensor_shape(spec.name))
                if any(d < 0 for d in shape):
                    raise UsageError(f"output {spec.name!r} has a data-dependent shape {format_shape(shape)}",
                                     hint="engines with data-dependent output shapes (NonZero, NMS) are not supported")
                out_shapes[spec.name] = shape
            slot.out_cache[key] = out_shapes
        for name, shape in out_shapes.items():
            self._buffer(slot, name, _numel(shape))
        slot.shapes, slot.out_shapes, slot.key = dict(shapes), out_shapes, key

    def _release_handle(self, handle: _Slot) -> None:
        handle.stream.synchronize()
        handle.graphs.clear()
        handle.context = None

    def close(self) -> None:
        super().close()
        self.engine = None

    # -- running -----------------------------------------------------------------------------
    def _to_backend(self, value: Any, spec: TensorSpec) -> Any:
        if isinstance(value, self.torch.Tensor):
            want = self._torch_dtype(spec.name)
            if value.dtype != want:
                raise UsageError(f"input {spec.name!r} is {value.dtype}, the engine takes {want}",
                                 hint=f"pass a {spec.dtype} tensor")
            return value.detach()  # CUDA tensors stay on the GPU: copied device-to-device
        if spec.dtype not in DTYPES:
            raise UsageError(f"input {spec.name!r} is {spec.dtype}: pass it as a torch tensor")
        return _to_numpy(value, spec)

    def _run(self, handle: _Slot, feeds: dict[str, Any]) -> list[Any]:
        torch, slot = self.torch, handle
        shapes = {s.name: tuple(int(d) for d in feeds[s.name].shape) for s in self.inputs}
        values = {n: feeds[n] for n in self._value_inputs}
        with torch.cuda.device(self.device):
            if _key(shapes, values) != slot.key:
                self._set_shapes(slot, shapes, values)
            caller = torch.cuda.current_stream(self.device)
            slot.inputs_copied.synchronize()  # the last call's async copies have left the pinned buffers
            with torch.cuda.stream(slot.stream):
                for spec in self.inputs:
                    self._copy_in(slot, spec.name, feeds[spec.name], shapes[spec.name], caller)
                slot.inputs_copied.record(slot.stream)
                self._execute(slot)
                views = [(slot.device[o.name][:_numel(slot.out_shapes[o.name])].view(slot.out_shapes[o.name]),
                          slot.host[o.name][:_numel(slot.out_shapes[o.name])].view(slot.out_shapes[o.name]))
                         for o in self.outputs]
                if self.output_mode == "torch":
                    outs = [dev.clone() for dev, _ in views]  # the slot's buffers are reused by the next call
                else:
                    for (dev, host), o in zip(views, self.outputs):
                        if o.name not in self._on_host:  # a HOST output is already in its pinned buffer
                            host.copy_(dev, non_blocking=True)
            if self.output_mode == "torch":
                caller.wait_stream(slot.stream)
                for t in outs:
                    t.record_stream(caller)
                return outs
            slot.stream.synchronize()
        return [_host_array(host) for _, host in views]

    def _copy_host(self, slot: _Slot, name: str, value: Any, shape: Shape) -> None:
        host = slot.host[name][:_numel(shape)].view(shape)
        if isinstance(value, self.torch.Tensor):
            host.copy_(value)
        else:
            np.copyto(host.numpy(), value, casting="no")

    def _copy_in(self, slot: _Slot, name: str, value: Any, shape: Shape, caller: Any) -> None:
        n = _numel(shape)
        if name in self._on_host:   # TensorRT reads it from host memory during the enqueue
            self._copy_host(slot, name, value, shape)
            return
        dev = slot.device[name][:n].view(shape)
        if isinstance(value, self.torch.Tensor) and value.is_cuda:
            slot.stream.wait_stream(caller)  # the caller's stream may still be writing it
            dev.copy_(value, non_blocking=True)
            return
        self._copy_host(slot, name, value, shape)
        dev.copy_(slot.host[name][:n].view(shape), non_blocking=True)

    def _execute(self, slot: _Slot) -> None:
        graph = slot.graphs.get(slot.key) if self.cuda_graph else None
        if graph is not None:
            graph.replay()
        elif self.cuda_graph:
            self._capture(slot)  # runs the engine once for real, then captures
        elif not slot.context.execute_async_v3(slot.stream.cuda_stream):
            raise UsageError(f"TensorRT execution failed: {self._logger.last_errors()}")

    def _capture(self, slot: _Slot) -> None:
        """Enqueue once for real (TensorRT finishes shape-dependent setup outside the capture; this
        call's outputs come from it), then capture the enqueue into a CUDA graph kept for this key.
        capture_begin/capture_end directly: torch.cuda.graph() would synchronize the whole device and
        empty the allocator cache on every capture. An enqueue that fails inside the capture leaves an
        empty graph whose replays would return stale outputs: it is discarded and graphs turned off."""
        torch = self.torch
        if not slot.context.execute_async_v3(slot.stream.cuda_stream):
            raise UsageError(f"TensorRT execution failed: {self._logger.last_errors()}")
        slot.stream.synchronize()
        graph = torch.cuda.CUDAGraph()
        mark = self._logger.mark()
        ok, problem = False, ""
        try:
            graph.capture_begin(capture_error_mode="thread_local")
            try:
                ok = bool(slot.context.execute_async_v3(slot.stream.cuda_stream))
            finally:
                graph.capture_end()
        except RuntimeError as exc:  # some engines cannot be captured: run them without a graph
            problem = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        if ok and not problem:
            slot.graphs[slot.key] = graph
            return
        self.cuda_graph = False
        slot.graphs.clear()
        reason = problem or f"the enqueue failed during capture ({self._logger.last_errors(1, since=mark)})"
        self.graph_note = f"capture failed, running without CUDA graphs: {reason}"

    def time_gpu(self, feeds: Any, runs: int = 100, warmup: int = 10) -> list[float]:
        """Device milliseconds per engine execution, from CUDA events recorded around each enqueue on
        the runner's stream (inputs copied once; host copies excluded)."""
        torch = self.torch
        normalized = self.normalize(feeds)
        slot = self._handles.get()
        try:
            self._run(slot, normalized)
            with torch.cuda.device(self.device), torch.cuda.stream(slot.stream):
                for _ in range(warmup):
                    self._execute(slot)
                pairs = []
                for _ in range(runs):
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record(slot.stream)
                    self._execute(slot)
                    end.record(slot.stream)
                    pairs.append((start, end))
                slot.stream.synchronize()
            return [start.elapsed_time(end) for start, end in pairs]
        finally:
            self._handles.put(slot)


def _key(shapes: dict[str, Shape], values: dict[str, Any] | None) -> Key:
    def flat(v: Any) -> tuple:
        v = v.detach().cpu() if hasattr(v, "detach") else v  # a torch tensor, maybe on the GPU
        return tuple(np.asarray(v).ravel().tolist())

    return tuple(sorted(shapes.items())), tuple((n, flat(v)) for n, v in sorted((values or {}).items()))


def _host_array(host: Any) -> np.ndarray:
    """A numpy copy of a pinned output. numpy has no bfloat16 (torch's .numpy() raises TypeError), so
    BF16 outputs come back as float32, which holds every bfloat16 value exactly."""
    if str(host.dtype) == "torch.bfloat16":
        return host.float().numpy()
    return host.numpy().copy()


def device_index(device: Any) -> Any:
    """The GPU index the runner takes, from the "cuda" / "cuda:1" the other backends take."""
    if not isinstance(device, str):
        return device
    if device != "cuda" and not device.startswith("cuda:"):
        raise UsageError(f"device {device!r}: a TensorRT engine runs on a GPU", hint="use device='cuda' or 'cuda:N'")
    return int(device.partition(":")[2] or 0)


def _engine_file(path: Path) -> Path:
    engine = path / ENGINE_FILE if path.is_dir() else path
    if not engine.is_file():
        raise UsageError(f"no TensorRT engine at {path}", hint="pass a .engine file or a folder holding model.engine")
    return engine


def _spec(entry: dict[str, Any]) -> TensorSpec:
    shape = tuple(d if d >= 0 else ("batch" if i == 0 else f"{entry['name']}_dim{i}")
                  for i, d in enumerate(entry["shape"]))
    return TensorSpec(entry["name"], shape, entry["dtype"])
