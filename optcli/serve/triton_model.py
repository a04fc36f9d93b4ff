"""The model Triton's Python backend runs for an optcli repository (the `model.py` that
optcli/deploy/triton_python.py writes subclasses it): it opens the artifact with optcli's runner
and runs every batch of requests Triton's dynamic batcher hands it as one call, merging and
splitting like the in-process batcher (optcli/batching.py, optcli/batch_merge.py): requests with equal
non-batch shapes share a call, and for an encoder with a dynamic sequence axis requests of different
lengths do too, padded to the longest and cut back per request (the config marks those inputs
`allow_ragged_batch` so Triton hands such requests over together).

How tensors cross depends on numpy's major version (both checked against the real server): the
Python-backend stub of Triton 2.51 (the nvidia-pytriton 0.7.0 wheel) was built against numpy 1.x.
Under numpy 2 its `as_numpy()` reads zeros and `pb_utils.Tensor(name, array)` sends an empty tensor,
silently, so tensors go by DLPack, which bypasses numpy's C API. Under numpy 1.x the stub's own
numpy path works, and its DLPack import of a numpy array loops in a capsule destructor until the
stub crashes, so the numpy path is used there.
This module runs inside the Triton stub process: `triton_python_backend_utils` exists only there.
"""
from __future__ import annotations

import sys
from collections.abc import Hashable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from optcli.batch_merge import Tensors

# The stub's DLPack import (pybind11) leaves this error unraised on every output tensor it takes from
# numpy 2; the tensor is taken correctly. Dropped so the server log is not one traceback per request.
_STUB_CAPSULE_NOISE = "PyCapsule_GetPointer called with incorrect name"


def _quiet_capsule_noise() -> None:
    previous = sys.unraisablehook

    def hook(info: Any) -> None:
        if isinstance(info.exc_value, ValueError) and str(info.exc_value) == _STUB_CAPSULE_NOISE:
            return
        previous(info)

    sys.unraisablehook = hook


def _item_bytes(dtype: str) -> int:
    import numpy as np

    from optcli.tensor_spec import DTYPES

    try:
        return int(np.dtype(DTYPES[dtype]).itemsize)
    except (KeyError, TypeError):
        return 8


def _bad_request(pb_utils: Any, text: str) -> Any:
    """A TritonError with INVALID_ARG (HTTP 400); Python backends older than error codes: INTERNAL (500)."""
    code = getattr(pb_utils.TritonError, "INVALID_ARG", None)
    return pb_utils.TritonError(text) if code is None else pb_utils.TritonError(text, code)


class OptcliTritonModel:
    """TritonPythonModel for an optcli artifact; model.py sets ARTIFACT and RUNNER_OPTIONS."""

    ARTIFACT: ClassVar[Path]
    RUNNER_OPTIONS: ClassVar[dict[str, Any]] = {}   # JSON from model.py, passed to load(), which checks them
    MAX_REQUEST_BYTES: ClassVar[int] = 64 * 2**20
    PADDING: ClassVar[str] = "auto"   # optcli serve --padding: how requests of different lengths share a call

    def initialize(self, args: dict[str, str]) -> None:
        from optcli.api import load

        _quiet_capsule_noise()
        options = dict(self.RUNNER_OPTIONS)
        if args.get("model_instance_kind") == "GPU":
            options.setdefault("device", f"cuda:{args.get('model_instance_device_id', '0')}")
        self.runner = load(self.ARTIFACT, **options)
        self.input_names = [s.name for s in self.runner.inputs]
        self.output_names = [s.name for s in self.runner.outputs]
        self.item_bytes = [_item_bytes(s.dtype) for s in self.runner.inputs]
        from optcli.batching import BatchingOptions

        self.plan = BatchingOptions(padding=self.PADDING).plan(self.runner)

    def too_large(self, shapes: list[list[int]]) -> str | None:
        """Why a request's inputs (their shapes) are refused before anything is allocated for them: over
        MAX_REQUEST_BYTES together. Shapes and dtypes are checked by the runner's normalize() after."""
        import math

        if any(int(d) < 0 for shape in shapes for d in shape):
            return f"an input has a negative dim: {shapes}"
        total = sum(math.prod(int(d) for d in shape) * size for shape, size in zip(shapes, self.item_bytes))
        if total > self.MAX_REQUEST_BYTES:
            return (f"the request's inputs take {total} bytes, over this model's bound of {self.MAX_REQUEST_BYTES} "
                    "(optcli serve --max-request-mib)")
        return None

    def execute(self, requests: list[Any]) -> list[Any]:
        import numpy as np
        import triton_python_backend_utils as pb_utils

        dlpack = int(np.__version__.split(".")[0]) >= 2  # see the module docstring

        from optcli.batch_merge import merge_key, run_padded
        from optcli.errors import OptcliError

        responses: list[Any] = [None] * len(requests)
        groups: dict[Hashable, list[tuple[int, Tensors]]] = {}
        for i, request in enumerate(requests):
            try:
                tensors = [pb_utils.get_input_tensor_by_name(request, n) for n in self.input_names]
                if any(t is None for t in tensors):
                    missing = next(n for n, t in zip(self.input_names, tensors) if t is None)
                    raise ValueError(f"the request has no input {missing!r}")
                problem = self.too_large([list(t.shape()) for t in tensors])
                if problem:
                    raise ValueError(problem)
                raw = {n: np.from_dlpack(t) if dlpack else t.as_numpy() for n, t in zip(self.input_names, tensors)}
                feeds = self.runner.normalize(raw)
            except (OptcliError, TypeError, ValueError) as exc:  # the request's fault: 400, the server stays up
                hint = getattr(exc, "hint", None)
                text = f"{exc}; hint: {hint}" if hint else str(exc)
                responses[i] = pb_utils.InferenceResponse(error=_bad_request(pb_utils, text))
                continue
            key = merge_key(feeds, self.plan)
            groups.setdefault(key if key is not None else ("alone", i), []).append((i, feeds))
        for members in groups.values():
            try:
                parts = run_padded(self.runner.run_normalized, [f for _, f in members], self.output_names, self.plan)
            except Exception as exc:  # noqa: BLE001 - the model's failure goes back to these callers
                for i, _ in members:
                    responses[i] = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
                continue
            for (i, _), outs in zip(members, parts):
                arrays = [(n, np.ascontiguousarray(o)) for n, o in zip(self.output_names, outs)]
                out = [pb_utils.Tensor.from_dlpack(n, a) if dlpack else pb_utils.Tensor(n, a) for n, a in arrays]
                responses[i] = pb_utils.InferenceResponse(output_tensors=out)
        return responses

    def finalize(self) -> None:
        runner = getattr(self, "runner", None)
        if runner is not None:
            runner.close()
