"""TensorRT runner: executes a serialized engine (`model.engine`) on an NVIDIA GPU.

Each handle (`concurrency` of them) owns a CUDA stream, device buffers allocated once for the
largest shapes the profile allows, pinned host buffers, and the device memory its execution
contexts share; a call copies inputs host->device asynchronously, sets the input shapes when they
changed (dynamic profiles), enqueues the engine and copies outputs back, all on that stream. Device
and pinned memory are torch tensors (torch CUDA build), never pycuda. Options: `outputs="torch"`
keeps outputs on the GPU as torch CUDA tensors (no copy back); `cuda_graph=True` captures the enqueue
in a CUDA graph per set of input shapes and replays it whenever those shapes recur; `time_gpu()`
measures device time with CUDA events.

With CUDA graphs, each set of input shapes gets its own execution context, and a handle's contexts
share one user-managed allocation of TensorRT's device memory: handles.py says why (second review, F1).

Contexts run with NVTX verbosity LAYER_NAMES_ONLY where the engine was built DETAILED (optcli builds
so, for the engine inspector): DETAILED "will generally increase latency in enqueueV3()"
(pyCoreDoc.h IExecutionContext.nvtx_verbosity). `detailed_nvtx=True` (`optcli profile`) keeps it.

TensorRT calls (10.1+ / 11.x Python API, name-based I/O; each row of tests/contract/tensorrt_api.py
cites its pyCore.cpp binding): trt.Runtime(logger).deserialize_cuda_engine (after
init_libnvinfer_plugins), engine.get_tensor_location / is_shape_inference_io / get_tensor_format,
engine.get_device_memory_size_for_profile_v2(0), engine.create_execution_context(strategy),
context.set_device_memory(ptr, size), context.nvtx_verbosity, context.set_input_shape(name, shape),
context.get_tensor_shape, context.set_tensor_address(name, ptr), context.execute_async_v3(stream_handle)
-> bool; TensorRT asks for one enqueue after a shape change before a CUDA graph capture, which
_capture does.

Never run on a real GPU by its author: see docs/tensorrt.md for what was verified and how.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from optcli.backends.tensorrt import handles, io_types
from optcli.backends.tensorrt.engine_loader import load_engine, tensor_spec
from optcli.backends.tensorrt.handles import Context, Feed, Handle, Shape, shape_key
from optcli.backends.tensorrt.logger import make_logger
from optcli.backends.tensorrt.toolkit import TENSORRT
from optcli.errors import UsageError
from optcli.optional_imports import require
from optcli.runtime.base import Runner, _to_numpy
from optcli.tensor_spec import DTYPES, TensorSpec, format_shape


def _numel(shape: Shape) -> int:
    return math.prod(shape) if shape else 1


class TensorRTRunner(Runner):
    """Runs a TensorRT engine file (or an engine cache entry folder) on one GPU."""

    backend = "tensorrt"
    toolkit = TENSORRT  # the bindings it runs with (TensorRT-RTX's runner subclasses it)

    def __init__(self, path: str | Path, *, threads: int | None = None, concurrency: int = 1, device: int = 0,
                 outputs: str = "numpy", cuda_graph: bool = False, check_metadata: bool = True,
                 detailed_nvtx: bool = False) -> None:
        del threads  # the pipeline passes CPU thread counts to every runner; an engine runs on the GPU
        if outputs not in ("numpy", "torch"):
            raise UsageError(f"unknown outputs mode {outputs!r}",
                             hint="use numpy (copied to the host) or torch (stay on the GPU)")
        self.trt = require(self.toolkit.module, f"running {self.toolkit.label} engines")
        self.torch = torch = require("torch", "TensorRT device buffers (a CUDA build of torch)")
        if not torch.cuda.is_available():
            from optcli.backends.tensorrt.probe import TensorRTStatus, TensorRTUnavailableError

            raise TensorRTUnavailableError(TensorRTStatus(False, (
                f"torch {torch.__version__} sees no CUDA GPU (CPU build, or no driver)",)))
        self.device = torch.device("cuda", device)
        self.output_mode = outputs
        self.cuda_graph = cuda_graph
        self.detailed_nvtx = detailed_nvtx
        self.graph_note: str | None = None
        self._profiler: Any = None
        self._logger = make_logger(self.trt)
        loaded = load_engine(self.trt, torch, Path(path), self.device, self._logger, check_metadata)
        self.engine_path, self.engine, self.metadata = loaded.path, loaded.engine, loaded.metadata
        ins, outs = loaded.inputs, loaded.outputs
        # HOST tensors (shape tensors) take host pointers; shape-inference inputs decide output shapes
        # by their values (pyCore.cpp ICudaEngine.get_tensor_location / is_shape_inference_io).
        self._on_host = {e["name"] for e in ins + outs
                         if self.engine.get_tensor_location(e["name"]) == self.trt.TensorLocation.HOST}
        self._value_inputs = [e["name"] for e in ins if self.engine.is_shape_inference_io(e["name"])]
        self._ranges = {i["name"]: (tuple(i["profile"][0]), tuple(i["profile"][2])) for i in ins if "profile" in i}
        self._max = {i["name"]: self._ranges[i["name"]][1] if i["name"] in self._ranges else tuple(i["shape"])
                     for i in ins}
        self._dtypes = {e["name"]: e["dtype"] for e in ins + outs}
        super().__init__([tensor_spec(e) for e in ins], [tensor_spec(e) for e in outs], concurrency)
        self._start()

    @classmethod
    def from_cache(cls, key: str, cache_dir: str | Path | None = None, **options: Any) -> TensorRTRunner:
        """Open the engine cache entry `key` (see optcli.backends.tensorrt.engine_cache)."""
        from optcli.backends.tensorrt.engine_cache import EngineCache
        from optcli.backends.tensorrt.options import default_cache_root

        root = Path(cache_dir) if cache_dir is not None else default_cache_root() / "engines"
        return cls(EngineCache(root).entry(key), **options)

    @property
    def settings(self) -> dict[str, object]:
        return {"device": self.torch.cuda.get_device_name(self.device), "tensorrt": str(self.trt.__version__),
                "cuda_graph": self.cuda_graph, "cuda_graph_note": self.graph_note, "outputs": self.output_mode,
                "concurrency": self.concurrency}

    def attach_profiler(self, profiler: Any) -> None:
        """Set a trt.IProfiler on every execution context, now and created later (`optcli profile`)."""
        self._profiler = profiler
        held = [self._handles.get() for _ in range(self.concurrency)]
        try:
            for slot in held:
                for ctx in slot.contexts():
                    ctx.context.profiler = profiler
        finally:
            for slot in held:
                self._handles.put(slot)

    # -- handles -----------------------------------------------------------------------------
    def _torch_dtype(self, name: str) -> Any:
        dtype = io_types.storage_dtype(self.torch, self._dtypes[name])
        if dtype is None:
            raise UsageError(f"tensor {name!r} has dtype {self._dtypes[name]}, which torch cannot hold",
                             hint="keep such types inside the graph; engine inputs and outputs must be torch dtypes")
        return dtype

    def _make_handle(self) -> Handle:
        torch = self.torch
        with torch.cuda.device(self.device):
            stream = torch.cuda.Stream(device=self.device)
            # One allocation for every context of this handle (USER_MANAGED): made on the stream that
            # uses it, like the I/O buffers, so torch's allocator never hands it to another stream.
            size = int(self.engine.get_device_memory_size_for_profile_v2(0))
            with torch.cuda.stream(stream):
                scratch = torch.empty(max(size, 1), dtype=torch.uint8, device=self.device)
            slot = Handle(stream, scratch, {}, {}, torch.cuda.Event())
            slot.current = self._new_context(slot)
            if self._value_inputs:  # output sizes depend on values only a call brings: allocate inputs now
                for name, shape in self._max.items():
                    self._buffer(slot, name, _numel(shape))
            else:
                self._set_shapes(slot, slot.current, dict(self._max))
            slot.inputs_copied.record(slot.stream)
        return slot

    def _new_context(self, slot: Handle) -> Context:
        trt = self.trt
        context = self.engine.create_execution_context(trt.ExecutionContextAllocationStrategy.USER_MANAGED)
        if context is None:
            raise UsageError(f"TensorRT could not create an execution context: {self._logger.last_errors()}",
                             hint="the GPU may be out of memory")
        context.set_device_memory(slot.scratch.data_ptr(), slot.scratch.numel())
        if not self.detailed_nvtx and self.engine.profiling_verbosity == trt.ProfilingVerbosity.DETAILED:
            context.nvtx_verbosity = trt.ProfilingVerbosity.LAYER_NAMES_ONLY
        if self._profiler is not None:
            context.profiler = self._profiler
        return Context(context)

    def _buffer(self, slot: Handle, name: str, numel: int) -> None:
        """Make sure `name` has the buffer TensorRT uses and a pinned host buffer for >= `numel` values.
        A HOST tensor's only buffer is the pinned one: TensorRT reads or writes it from the CPU.
        Contexts learn a new address in _bind, before their next enqueue."""
        size = io_types.storage_numel(self._dtypes[name], numel)
        if name in slot.host and slot.host[name].numel() >= size:
            return
        dtype = self._torch_dtype(name)
        slot.host[name] = self.torch.empty(max(size, 1), dtype=dtype, pin_memory=True)
        if name in self._on_host:
            slot.device[name] = slot.host[name]
        else:
            # Allocated on the slot's stream, which uses it, so torch's caching allocator never hands
            # the block to another stream while this one may still be reading it.
            with self.torch.cuda.stream(slot.stream):
                slot.device[name] = self.torch.empty(max(size, 1), dtype=dtype, device=self.device)

    def _bind(self, ctx: Context, slot: Handle, names: Any = None) -> None:
        """Give the context the current address of each buffer; a captured graph holds the old ones,
        so a context whose addresses changed loses its graph."""
        for name in names if names is not None else list(slot.device):
            ptr = slot.device[name].data_ptr()
            if ctx.addresses.get(name) == ptr:
                continue
            if not ctx.context.set_tensor_address(name, ptr):
                raise UsageError(f"TensorRT refused the buffer address for {name!r}: {self._logger.last_errors()}")
            ctx.addresses[name] = ptr
            ctx.graph = None

    def _check_range(self, shapes: dict[str, Shape]) -> None:
        for name, shape in shapes.items():
            if name in self._ranges:
                lo, hi = self._ranges[name]
                if len(shape) != len(lo) or not all(a <= s <= b for a, s, b in zip(lo, shape, hi)):
                    raise UsageError(f"input {name!r} shape {format_shape(shape)} is outside the engine's profile "
                                     f"{format_shape(lo)} .. {format_shape(hi)}",
                                     hint="rebuild the engine with a wider range (--batch MIN/OPT/MAX or "
                                          "--input NAME:MIN/OPT/MAX)")

    def _set_shapes(self, slot: Handle, ctx: Context, shapes: dict[str, Shape],
                    values: Mapping[str, Feed] | None = None) -> None:
        """Set input shapes (and shape-tensor values, which TensorRT reads from host memory) on `ctx`
        and read the output shapes they give; those are remembered per key."""
        self._check_range(shapes)
        for name, shape in shapes.items():
            if name in self._ranges and not ctx.context.set_input_shape(name, shape):
                raise UsageError(f"TensorRT refused shape {format_shape(shape)} for {name!r}: "
                                 f"{self._logger.last_errors()}")
            self._buffer(slot, name, _numel(shape))
        for name, value in (values or {}).items():
            self._copy_host(slot, name, value, shapes[name])
        self._bind(ctx, slot, list(shapes))  # shape-tensor values are read at their address
        key = shape_key(shapes, values)
        out_shapes = slot.out_cache.get(key)
        if out_shapes is None:
            out_shapes = {}
            for spec in self.outputs:
                shape = tuple(int(d) for d in ctx.context.get_tensor_shape(spec.name))
                if any(d < 0 for d in shape):
                    raise UsageError(f"output {spec.name!r} has a data-dependent shape {format_shape(shape)}",
                                     hint="engines with data-dependent output shapes (NonZero, NMS) are not supported")
                out_shapes[spec.name] = shape
            slot.out_cache[key] = out_shapes
        for name, shape in out_shapes.items():
            self._buffer(slot, name, _numel(shape))
        ctx.shapes, ctx.out_shapes, ctx.key = dict(shapes), out_shapes, key

    def _context_for(self, slot: Handle, shapes: dict[str, Shape], values: Mapping[str, Feed]) -> Context:
        """The context to run these shapes on. Without CUDA graphs: the handle's one context, its shapes
        set when they changed. With them: the context made for this key, or a new one."""
        key = shape_key(shapes, values)
        if not self.cuda_graph:
            if slot.graphed:  # graphs were turned off (a capture failed): keep one context
                slot.drop_graphs()
            ctx = slot.current
            assert ctx is not None
            if ctx.key != key:
                self._set_shapes(slot, ctx, shapes, values)
            return ctx
        ctx = slot.graphed_for(key)
        if ctx is None:
            self._check_range(shapes)  # before a context is made for shapes that cannot run
            ctx = self._new_context(slot)
            self._set_shapes(slot, ctx, shapes, values)
            slot.add_graphed(key, ctx)
        slot.current = ctx
        return ctx

    def _release_handle(self, handle: Handle) -> None:
        handle.release()

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

    def _run(self, handle: Handle, feeds: dict[str, Feed]) -> list[Any]:
        torch, slot = self.torch, handle
        shapes = {s.name: tuple(int(d) for d in feeds[s.name].shape) for s in self.inputs}
        values = {n: feeds[n] for n in self._value_inputs}
        with torch.cuda.device(self.device):
            ctx = self._context_for(slot, shapes, values)
            caller = torch.cuda.current_stream(self.device)
            slot.inputs_copied.synchronize()  # the last call's async copies have left the pinned buffers
            with torch.cuda.stream(slot.stream):
                for spec in self.inputs:
                    self._copy_in(slot, spec.name, feeds[spec.name], shapes[spec.name], caller)
                slot.inputs_copied.record(slot.stream)
                self._bind(ctx, slot)
                self._execute(slot, ctx)
                if self.output_mode == "torch":
                    # clone: the slot's buffers are reused by the next call (an unpacked 4-bit output is new)
                    outs = [io_types.readable(torch, slot.device[o.name], o.dtype, ctx.out_shapes[o.name]).clone()
                            for o in self.outputs]
                else:
                    for o in self.outputs:
                        if o.name not in self._on_host:  # a HOST output is already in its pinned buffer
                            n = io_types.storage_numel(o.dtype, _numel(ctx.out_shapes[o.name]))
                            slot.host[o.name][:n].copy_(slot.device[o.name][:n], non_blocking=True)
            if self.output_mode == "torch":
                caller.wait_stream(slot.stream)
                for t in outs:
                    t.record_stream(caller)
                return outs
            slot.stream.synchronize()
        return [io_types.to_numpy(torch, io_types.readable(torch, slot.host[o.name], o.dtype, ctx.out_shapes[o.name]))
                for o in self.outputs]

    def _copy_host(self, slot: Handle, name: str, value: Any, shape: Shape) -> None:
        host = slot.host[name][:_numel(shape)].view(shape)
        if isinstance(value, self.torch.Tensor):
            host.copy_(value)
        else:
            np.copyto(host.numpy(), value, casting="no")

    def _copy_in(self, slot: Handle, name: str, value: Any, shape: Shape, caller: Any) -> None:
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

    def _execute(self, slot: Handle, ctx: Context) -> None:
        if self.cuda_graph and ctx.graph is not None:
            ctx.graph.replay()
        elif self.cuda_graph:
            self._capture(slot, ctx)  # runs the engine once for real, then captures
        elif not ctx.context.execute_async_v3(slot.stream.cuda_stream):
            raise UsageError(f"TensorRT execution failed: {self._logger.last_errors()}")

    def _capture(self, slot: Handle, ctx: Context) -> None:
        """Enqueue once for real (this call's outputs come from it), then capture the enqueue into a
        CUDA graph on ctx. A capture that fails turns CUDA graphs off for the runner, with the reason."""
        if not ctx.context.execute_async_v3(slot.stream.cuda_stream):
            raise UsageError(f"TensorRT execution failed: {self._logger.last_errors()}")
        slot.stream.synchronize()
        mark = self._logger.mark()
        ok, problem = handles.capture(self.torch, slot, ctx)
        if ok and not problem:
            return
        self.cuda_graph = False
        slot.drop_graphs()
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
            ctx = slot.current
            assert ctx is not None
            with torch.cuda.device(self.device), torch.cuda.stream(slot.stream):
                for _ in range(warmup):
                    self._execute(slot, ctx)
                pairs = []
                for _ in range(runs):
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record(slot.stream)
                    self._execute(slot, ctx)
                    end.record(slot.stream)
                    pairs.append((start, end))
                slot.stream.synchronize()
            return [start.elapsed_time(end) for start, end in pairs]
        finally:
            self._handles.put(slot)


def device_index(device: Any) -> Any:
    """The GPU index the runner takes, from the "cuda" / "cuda:1" the other backends take."""
    if not isinstance(device, str):
        return device
    if device != "cuda" and not device.startswith("cuda:"):
        raise UsageError(f"device {device!r}: a TensorRT engine runs on a GPU", hint="use device='cuda' or 'cuda:N'")
    return int(device.partition(":")[2] or 0)
