"""A stand-in for torch.cuda over real CPU torch: streams, events, CUDA graph capture and "device"
allocations (CPU tensors whose address ranges the TensorRT double records as device memory). With
fake_tensorrt it lets the TensorRT runner run without a GPU (contract tests, gpu_bench --dry-run).
It says nothing about what real streams, pinned memory or graph capture do."""
from __future__ import annotations

import contextlib
import time
from typing import Any

import torch


class FakeStream:
    _next = 1

    def __init__(self, device: Any = None) -> None:
        self.cuda_stream = FakeStream._next
        FakeStream._next += 1

    def synchronize(self) -> None:
        pass

    def wait_stream(self, other: Any) -> None:
        assert isinstance(other, FakeStream)


class FakeEvent:
    def __init__(self, enable_timing: bool = False) -> None:
        self.t = 0.0

    def record(self, stream: Any = None) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: FakeEvent) -> float:
        return (end.t - self.t) * 1000


class FakeGraph:
    """torch.cuda.CUDAGraph: capture_begin/capture_end on the current stream; enqueues made in
    between are recorded (the TensorRT double appends to trt.capturing) and run again on replay."""

    trt: Any = None
    captures = 0

    def __init__(self) -> None:
        self.calls: list = []
        self.replays = 0

    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global") -> None:
        assert capture_error_mode in ("global", "thread_local", "relaxed")
        assert FakeGraph.trt.capturing is None, "nested capture"
        FakeGraph.trt.capturing = self.calls
        FakeGraph.captures += 1

    def capture_end(self) -> None:
        FakeGraph.trt.capturing = None

    def replay(self) -> None:
        self.replays += 1
        for call in self.calls:
            call()


class FakeCuda:
    Stream, Event, CUDAGraph = FakeStream, FakeEvent, FakeGraph

    def __init__(self, trt: Any) -> None:
        self._trt = trt
        self.device_syncs = 0
        FakeGraph.trt, FakeGraph.captures = trt, 0

    def synchronize(self, device: Any = None) -> None:
        self.device_syncs += 1

    def is_available(self) -> bool:
        return True

    def get_device_capability(self, device: Any = None) -> tuple[int, int]:
        major, minor = self._trt.device_cc.split(".")
        return int(major), int(minor)

    def get_device_name(self, device: Any = None) -> str:
        return "NVIDIA L4"

    def device(self, device: Any) -> Any:
        return contextlib.nullcontext()

    def stream(self, stream: Any) -> Any:
        assert isinstance(stream, FakeStream)
        return contextlib.nullcontext()

    def current_stream(self, device: Any = None) -> FakeStream:
        return FakeStream()

    @contextlib.contextmanager
    def graph(self, graph: FakeGraph, stream: Any = None, capture_error_mode: str = "global") -> Any:
        """torch.cuda.graph(): like torch's, it synchronizes the whole device before capturing."""
        assert isinstance(stream, FakeStream)
        self.synchronize()
        graph.capture_begin(capture_error_mode=capture_error_mode)
        try:
            yield
        finally:
            graph.capture_end()


class TorchShim:
    """Real CPU torch, with torch.cuda faked and device/pinned allocations made on the CPU."""

    def __init__(self, trt: Any) -> None:
        self.cuda = FakeCuda(trt)
        self._trt = trt
        self._keep: list = []

    def empty(self, *size: Any, dtype: Any = None, device: Any = None, pin_memory: bool = False) -> Any:
        t = torch.empty(*size, dtype=dtype)
        if device is not None:  # "device" memory: the TensorRT double tells it from host memory by address
            self._trt.device_ranges.append((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()))
            self._keep.append(t)  # a freed range could be reused by a host allocation
        return t

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)
