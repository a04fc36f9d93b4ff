"""A TensorRT runner handle: a CUDA stream, its I/O buffers, the device memory its execution
contexts share, and those contexts, with CUDA graph capture.

Why a context per CUDA graph (second review, F1): a graph replays the kernels and the state they
were captured with. TensorRT applies an input shape change at the next enqueue, which a replay
skips, so a graph replayed on a context whose shapes changed since its capture runs on state set up
for other shapes. With graphs on, each shape key gets its own context, whose shapes are set once,
before its graph is captured, and never again.

The contexts of a handle are created with ExecutionContextAllocationStrategy.USER_MANAGED and share
one allocation (set_device_memory) of get_device_memory_size_for_profile_v2(0) bytes. TensorRT uses
that memory only while an enqueue runs, and must not be given it by "another execution context
running in parallel" (NvInferRuntime.h setDeviceMemoryV2): a handle's contexts run one at a time on
its one stream; every handle has its own allocation. trtexec (--allocationStrategy=profile) and
Polygraphy's TrtRunner(allocation_strategy="profile") allocate the same way.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

import numpy as np

if TYPE_CHECKING:
    import torch

Shape = tuple[int, ...]
Feed = Union[np.ndarray, "torch.Tensor"]  # what a call's input becomes before it is copied in (_to_backend)
Key = tuple  # (input shapes, values of shape-tensor inputs): what a CUDA graph and output shapes depend on
MAX_GRAPHS = 32  # contexts with a CUDA graph per handle; each holds TensorRT state and a graph


@dataclass
class Context:
    """One execution context, the shapes it is set to and the tensor addresses it was given."""

    context: Any                    # the IExecutionContext
    key: Key | None = None
    shapes: dict[str, Shape] = field(default_factory=dict)
    out_shapes: dict[str, Shape] = field(default_factory=dict)
    addresses: dict[str, int] = field(default_factory=dict)
    graph: Any = None               # the CUDA graph captured on it (CUDA graphs on)


@dataclass
class Handle:
    """What one concurrent call uses."""

    stream: Any
    scratch: Any                    # TensorRT's device memory, shared by this handle's contexts
    device: dict[str, torch.Tensor]  # name -> flat buffer TensorRT reads/writes (pinned host memory for HOST tensors)
    host: dict[str, torch.Tensor]    # name -> flat pinned host buffer of the same size
    inputs_copied: Any              # CUDA event: the pinned input buffers are free after it
    current: Context | None = None  # the context of the last call (without CUDA graphs: the only one)
    graphed: OrderedDict[Key, Context] = field(default_factory=OrderedDict)  # one per key, least recent first
    out_cache: dict[Key, dict[str, Shape]] = field(default_factory=dict)

    def contexts(self) -> list[Context]:
        found = list(self.graphed.values())
        return found + [self.current] if self.current is not None and self.current not in found else found

    def graphed_for(self, key: Key) -> Context | None:
        """The context made for `key` with CUDA graphs on (now the most recently used), else None."""
        ctx = self.graphed.get(key)
        if ctx is None and self.current is not None and self.current.key == key and self.current.graph is None:
            ctx = self.graphed[key] = self.current  # set to these shapes and never captured: adopt it
        if ctx is not None:
            self.graphed.move_to_end(key)
        return ctx

    def add_graphed(self, key: Key, ctx: Context) -> None:
        self.graphed[key] = ctx
        while len(self.graphed) > MAX_GRAPHS:
            self.stream.synchronize()  # the dropped context's graph may still be queued on the stream
            self.graphed.popitem(last=False)

    def drop_graphs(self) -> None:
        """CUDA graphs off: no graph is replayed again, and `current` becomes the one context."""
        for ctx in self.contexts():
            ctx.graph = None
        self.graphed.clear()

    def release(self) -> None:
        self.stream.synchronize()
        self.drop_graphs()
        self.current = None
        self.scratch = None   # after the contexts that use it


def shape_key(shapes: dict[str, Shape], values: Mapping[str, Feed] | None) -> Key:
    def flat(v: Feed) -> tuple:
        v = v.detach().cpu() if hasattr(v, "detach") else v  # a torch tensor, maybe on the GPU
        return tuple(np.asarray(v).ravel().tolist())

    return tuple(sorted(shapes.items())), tuple((n, flat(v)) for n, v in sorted((values or {}).items()))


def capture(torch: Any, handle: Handle, ctx: Context) -> tuple[bool, str]:
    """Capture ctx's enqueue into a CUDA graph kept on ctx; the caller has enqueued once for real
    since the shapes were set (TensorRT finishes shape-dependent setup outside a capture).
    capture_begin/capture_end directly: torch.cuda.graph() would synchronize the whole device and
    empty the allocator cache on every capture. Returns (enqueue ok, exception text); an enqueue that
    fails inside the capture leaves an empty graph, which is not kept."""
    graph = torch.cuda.CUDAGraph()
    ok, problem = False, ""
    try:
        graph.capture_begin(capture_error_mode="thread_local")
        try:
            ok = bool(ctx.context.execute_async_v3(handle.stream.cuda_stream))
        finally:
            graph.capture_end()
    except RuntimeError as exc:  # some engines cannot be captured: run them without a graph
        problem = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
    if ok and not problem:
        ctx.graph = graph
    return ok, problem
