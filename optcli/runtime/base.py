"""The Runner interface every backend implements: load / predict / predict_async / close.

A runner owns `concurrency` backend handles (sessions, streams, compiled models). `predict` runs on
one of them in the caller's thread; `predict_async` queues the call on a thread pool whose workers
each take a free handle, so N calls can be in flight at once. Backends release the GIL while they
compute, which is what lets concurrency raise throughput.
"""
from __future__ import annotations

import queue
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from optcli.errors import UsageError
from optcli.input_limits import MaxDims, check_bounds
from optcli.tensor_spec import DTYPES, TensorSpec, format_shape

Feeds = Mapping[str, Any] | Sequence[Any]
if TYPE_CHECKING:
    import torch

# Inputs after normalize(): {name: the backend's own value} (a numpy array, a torch tensor), passed through to it.
BackendFeeds: TypeAlias = "dict[str, np.ndarray | torch.Tensor]"


def _to_numpy(value: Any, spec: TensorSpec) -> np.ndarray:
    """numpy without a copy where possible; torch tensors via .numpy() (CPU) or .cpu()."""
    if type(value).__module__.startswith("torch"):
        value = value.detach()
        value = value.cpu() if value.device.type != "cpu" else value
        value = value.numpy()
    arr = np.asarray(value)
    want = DTYPES[spec.dtype]
    if arr.dtype != want:
        # Float precision and int width may change silently; float <-> int <-> bool may not.
        if arr.dtype.kind != np.dtype(want).kind and not (arr.dtype.kind in "iu" and np.dtype(want).kind in "iu"):
            raise UsageError(f"input {spec.name!r} has dtype {arr.dtype} but the model takes {spec.dtype}",
                             hint=f"pass a {spec.dtype} array (inputs: {_describe([spec])})")
        arr = arr.astype(want)
    return np.ascontiguousarray(arr)  # no copy when it already is


def _describe(specs: list[TensorSpec]) -> str:
    return ", ".join(f"{s.name}:{format_shape(s.shape)}:{s.dtype}" for s in specs)


class Runner(ABC):
    """A loaded model that runs inputs to outputs on one backend."""

    backend: str = "unknown"

    def __init__(self, inputs: list[TensorSpec], outputs: list[TensorSpec], concurrency: int = 1) -> None:
        if concurrency < 1:
            raise UsageError("concurrency must be >= 1")
        self.inputs = inputs
        self.outputs = outputs
        self.concurrency = concurrency
        # Bounds on dynamic dims (an unpadded artifact's sequence): backends that read them set this.
        self.max_dims: MaxDims = {}
        self._handles: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._finalizer = weakref.finalize(self, Runner._shutdown, None)

    # -- backend hooks -------------------------------------------------------------------------
    @abstractmethod
    def _make_handle(self) -> Any:
        """Create one backend handle (a session, a context): called `concurrency` times."""

    @abstractmethod
    def _run(self, handle: Any, feeds: BackendFeeds) -> list[Any]:
        """Run one call on `handle`; return outputs in `self.outputs` order."""

    def _release_handle(self, handle: Any) -> None:  # noqa: B027 (an optional hook, not abstract)
        """Free one handle; default: drop the reference."""

    @property
    def settings(self) -> dict[str, object]:
        """What the runner was opened with (threads, providers, device...), for reports."""
        return {}

    def _to_backend(self, value: Any, spec: TensorSpec) -> Any:
        """Convert one user input to what the backend takes (numpy by default)."""
        return _to_numpy(value, spec)

    # -- public API ----------------------------------------------------------------------------
    def _start(self) -> None:
        for _ in range(self.concurrency):
            self._handles.put(self._make_handle())

    def normalize(self, feeds: Feeds) -> BackendFeeds:
        """Check names, ranks and dtypes; return {name: backend value}."""
        if isinstance(feeds, Mapping):
            given = dict(feeds)
        elif isinstance(feeds, (list, tuple)):
            if len(feeds) != len(self.inputs):
                raise UsageError(f"got {len(feeds)} inputs, the model takes {len(self.inputs)}",
                                 hint=f"inputs: {self.describe_inputs()}")
            given = {s.name: v for s, v in zip(self.inputs, feeds)}
        else:
            if len(self.inputs) != 1:
                raise UsageError("pass a dict of inputs for a model with several inputs",
                                 hint=f"inputs: {self.describe_inputs()}")
            given = {self.inputs[0].name: feeds}
        names = {s.name for s in self.inputs}
        unknown = sorted(set(given) - names)
        missing = sorted(names - set(given))
        if unknown or missing:
            what = f"unknown input {unknown[0]!r}" if unknown else f"missing input {missing[0]!r}"
            raise UsageError(what, hint=f"inputs: {self.describe_inputs()}")
        out: BackendFeeds = {}
        for spec in self.inputs:
            value = self._to_backend(given[spec.name], spec)
            shape = tuple(value.shape)
            if len(shape) == len(spec.shape):
                check_bounds(spec, shape, self.max_dims.get(spec.name, {}))  # over the most it takes
            if len(shape) != len(spec.shape) or any(
                    isinstance(d, int) and d > 0 and d != s for d, s in zip(spec.shape, shape)):
                raise UsageError(f"input {spec.name!r} has shape {format_shape(shape)}, the model takes "
                                 f"{format_shape(spec.shape)}", hint=f"inputs: {self.describe_inputs()}")
            out[spec.name] = value
        return out

    def describe_inputs(self) -> str:
        """`name:shape:dtype` of every input, for error hints."""
        return _describe(self.inputs)

    def predict(self, feeds: Feeds) -> dict[str, Any]:
        """Run one call; returns {output name: array} (numpy, or backend tensors where asked)."""
        self._check_open()
        return self._predict(feeds)

    def _predict(self, feeds: Feeds) -> dict[str, Any]:
        # No open check here: calls queued before close() still run while close() waits for them.
        normalized = self.normalize(feeds)
        handle = self._handles.get()
        try:
            outs = self._run(handle, normalized)
        finally:
            self._handles.put(handle)
        return {s.name: o for s, o in zip(self.outputs, outs)}

    def predict_async(self, feeds: Feeds) -> Future:
        """Queue one call; returns a Future whose .result() is what predict() returns."""
        with self._lock:  # with close(): nothing is queued once the pool shuts down
            self._check_open()
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=self.concurrency,
                                                    thread_name_prefix=f"optcli-{self.backend}")
                self._finalizer.detach()
                # wait=False: the finalizer may run on a pool thread (a GC there), which cannot join
                # itself; at interpreter exit concurrent.futures joins its workers after the queue drains.
                self._finalizer = weakref.finalize(self, Runner._shutdown, self._executor, False)
            return self._executor.submit(self._predict, feeds)

    def run_normalized(self, feeds: Mapping[str, np.ndarray | torch.Tensor]) -> list[Any]:
        """The hot path for benchmarks: inputs already checked by normalize() (or built to the specs)."""
        given: BackendFeeds = feeds if isinstance(feeds, dict) else dict(feeds)
        handle = self._handles.get()
        try:
            return self._run(handle, given)
        finally:
            self._handles.put(handle)

    def close(self) -> None:
        """Refuse new calls, run the ones already queued, then free every handle. Safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        Runner._shutdown(self._executor)
        self._finalizer.detach()
        while not self._handles.empty():
            self._release_handle(self._handles.get_nowait())

    @staticmethod
    def _shutdown(executor: ThreadPoolExecutor | None, wait: bool = True) -> None:
        if executor is not None:
            executor.shutdown(wait=wait)

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError("this model was closed", hint="load it again with optcli.load()")

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
