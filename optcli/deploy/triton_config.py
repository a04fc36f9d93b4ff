"""Build a Triton model configuration (config.pbtxt) from a ServedModel and the user's options.

Follows Triton's model_config.proto and the docs (model_configuration.md, batcher.md): with
max_batch_size > 0 the batch dim is left out of `dims`; dynamic dims are -1; a tensor whose only dim is
the batch gets `dims: [1]` with an empty `reshape`; warm-up inputs need concrete dims. What a backend
adds (its optimization block and parameters, its batch limits, the kinds it serves on) is its Triton
piece's (optcli/deploy/triton_backend.py, optcli/backends/<name>/triton.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NotRequired, TypedDict

from optcli.deploy.pbtxt import Comment, Enum, MapEntries
from optcli.deploy.triton_backend import ServedModel, TritonBackend, TritonOptions, piece_of
from optcli.errors import UsageError
from optcli.tensor_spec import TensorSpec, merge_pinned

# A dynamic-batch ONNX model with no --max-batch-size gets this (Triton's own auto-complete default is 4).
DEFAULT_ONNX_MAX_BATCH = 8
KINDS = ("cpu", "gpu")

TRITON_TYPES = {
    "bool": "TYPE_BOOL", "uint8": "TYPE_UINT8", "onnx-type-4": "TYPE_UINT16", "uint16": "TYPE_UINT16",
    "uint32": "TYPE_UINT32", "uint64": "TYPE_UINT64", "int8": "TYPE_INT8", "int16": "TYPE_INT16",
    "int32": "TYPE_INT32", "int64": "TYPE_INT64", "float16": "TYPE_FP16", "float32": "TYPE_FP32",
    "float64": "TYPE_FP64", "onnx-type-8": "TYPE_STRING", "string": "TYPE_STRING", "bfloat16": "TYPE_BF16",
}
_FLOAT_TYPES = {"TYPE_FP16", "TYPE_FP32", "TYPE_FP64", "TYPE_BF16"}


class TritonTensor(TypedDict):
    """One `input` or `output` entry of config.pbtxt."""
    name: str
    data_type: Enum                           # TYPE_FP32, ...
    dims: list[int]                           # -1 for a dynamic dim; without the batch where the model batches
    reshape: NotRequired[dict[str, list[int]]]  # {"shape": []}: a tensor whose only dim is the batch
    allow_ragged_batch: NotRequired[bool]


@dataclass
class ResolvedConfig:
    """The config tree plus the decisions behind it (the README and the CLI report them)."""

    tree: dict[str, object]                        # config.pbtxt as pbtxt.render takes it
    max_batch_size: int
    kind: str
    dynamic_batching: bool
    preferred_batch_sizes: list[int]
    perf_shapes: dict[str, tuple[int, ...]]       # per input, dims without batch, for perf_analyzer --shape
    notes: list[str] = field(default_factory=list)
    tensors: dict[str, list[TritonTensor]] = field(default_factory=dict)  # the tree's "input" and "output"


def parse_dynamic_batching(text: str) -> tuple[bool, list[int]]:
    """`on`, `off`, or `preferred=8,16,32` -> (enabled, preferred sizes)."""
    value = text.strip().lower()
    if value in ("on", "true", "yes", ""):
        return True, []
    if value in ("off", "false", "no", "none"):
        return False, []
    if value.startswith("preferred="):
        parts = [p.strip() for p in value.removeprefix("preferred=").replace("/", ",").split(",") if p.strip()]
        if parts and all(p.isdigit() and int(p) > 0 for p in parts):
            return True, sorted({int(p) for p in parts})
    raise UsageError(f"bad --dynamic-batching {text!r}", hint="use on, off, or preferred=8,16,32")


def triton_dtype(spec: TensorSpec, piece: TritonBackend) -> str:
    """The Triton data type of `spec`, where the backend serves it (the Datatypes table in Triton's
    model_configuration.md, and each backend's own type map)."""
    dtype = TRITON_TYPES.get(spec.dtype)
    if dtype is None or dtype not in piece.types:
        raise UsageError(f"tensor {spec.name!r} has dtype {spec.dtype}, "
                         f"which Triton's {piece.platform} backend does not serve",
                         hint="keep model inputs/outputs float32/float16/int (e.g. fp16 with keep_io_types)")
    return dtype


def _dims(spec: TensorSpec, batching: bool) -> tuple[list[int], bool]:
    """Triton dims (-1 for dynamic) and whether an empty reshape is needed (batch-only tensors)."""
    shape = spec.shape[1:] if batching else spec.shape
    dims = [d if isinstance(d, int) and d > 0 else -1 for d in shape]
    if not dims:
        return [1], True
    return dims, False


def _tensor(spec: TensorSpec, piece: TritonBackend, batching: bool, ragged: frozenset[str] = frozenset()
            ) -> TritonTensor:
    dims, reshape = _dims(spec, batching)
    entry = TritonTensor(name=spec.name, data_type=Enum(triton_dtype(spec, piece)), dims=dims)
    if reshape:
        entry["reshape"] = {"shape": []}
    if spec.name in ragged:
        entry["allow_ragged_batch"] = True
    return entry


def _ragged_inputs(model: ServedModel, piece: TritonBackend, batching: bool) -> frozenset[str]:
    """Inputs Triton may batch at different lengths: the sequence inputs of an encoder, where the model
    is optcli's runner in the Python backend (it pads them to the batch's longest: optcli/batch_merge.py)."""
    from optcli.batch_merge import padding_plan

    if not batching or piece.platform != "python":
        return frozenset()
    plan = padding_plan(model.inputs, model.outputs)
    return plan.inputs if plan else frozenset()


def _max_batch_size(model: ServedModel, piece: TritonBackend, opts: TritonOptions, notes: list[str]) -> int:
    blocker = model.batch_blocker()
    requested = opts.max_batch_size
    if requested is not None and requested < 0:
        raise UsageError(f"--max-batch-size {requested}: must be 0 (no batching) or more")
    if requested is None:
        if blocker:
            notes.append(f"batching off (max_batch_size 0): {blocker}")
            return 0
        own = piece.default_max_batch(model)
        if own is not None:
            return own
        # Room for the largest preferred size, so `--dynamic-batching preferred=16,32` alone works.
        return max([DEFAULT_ONNX_MAX_BATCH, *opts.preferred_batch_sizes])
    if requested == 0:
        return 0
    if blocker:
        raise UsageError(f"--max-batch-size {requested}: the model cannot batch ({blocker})",
                         hint="pass --max-batch-size 0, or re-export with a dynamic batch dim (no --static-batch)")
    piece.check_max_batch(model, requested, notes)
    return requested


def _warmup_dims(model: ServedModel, opts: TritonOptions,
                 batching: bool) -> tuple[dict[str, tuple[int, ...]], str | None]:
    """Concrete dims (without batch when batching) per input, or the reason they are unknown."""
    merge_pinned(model.inputs, opts.inputs)  # one-line errors for unknown names, wrong rank, fixed-dim clashes
    pins = {p.name: p for p in opts.inputs}
    # Sizes of named dynamic dims, learned from any pin or hint, apply to every input sharing the name.
    named: dict[str, int] = {}
    full: dict[str, list[int | None]] = {}
    for spec in model.inputs:
        pin = pins.get(spec.name)
        hint = model.shape_hints.get(spec.name)
        sizes: list[int | None] = []
        for i, d in enumerate(spec.shape):
            size = d if isinstance(d, int) and d > 0 else None
            for source in (pin.shape if pin else None, hint):
                if size is None and source is not None and len(source) == len(spec.shape):
                    s = source[i]
                    size = s if isinstance(s, int) and s > 0 else None
            if size is not None and not isinstance(d, int):
                named.setdefault(str(d), size)
            sizes.append(size)
        full[spec.name] = sizes
    out: dict[str, tuple[int, ...]] = {}
    for spec in model.inputs:
        sizes = [s if s is not None else named.get(str(d)) for s, d in zip(full[spec.name], spec.shape, strict=True)]
        if not batching and sizes and sizes[0] is None:
            sizes[0] = 1  # batching off but dim 0 dynamic: it is still the batch, and 1 always fits
        dims = sizes[1:] if batching else sizes
        start = 1 if batching else 0
        for i, size in enumerate(dims):
            if size is None:
                axis = i + start
                return {}, (f"input {spec.name!r} has a dynamic dim {spec.shape[axis]!r} (axis {axis}) of unknown "
                            f"size; pass --input {spec.name}:SHAPE to size the warm-up")
        out[spec.name] = tuple(int(s) for s in dims if s is not None) if dims else (1,)
    return out, None


def _warmup(model: ServedModel, dims: dict[str, tuple[int, ...]], piece: TritonBackend,
            mbs: int) -> list[dict[str, object]]:
    inputs = []
    for spec in model.inputs:
        dtype = triton_dtype(spec, piece)
        # Triton fills random_data with random bytes: fine for floats, but as integers they are
        # out-of-range token ids and gather indices, which fail the warm-up and so the model load.
        data = {"random_data": True} if dtype in _FLOAT_TYPES else {"zero_data": True}
        inputs.append({"key": spec.name, "value": {"data_type": Enum(dtype), "dims": list(dims[spec.name]), **data}})
    samples: list[dict[str, object]] = [{"name": "batch_1", "batch_size": 1, "inputs": MapEntries(inputs)}]
    if mbs > 1:
        samples.append({"name": f"batch_{mbs}", "batch_size": mbs, "inputs": MapEntries(inputs)})
    return samples


def build_config(model: ServedModel, opts: TritonOptions, name: str, header: str = "") -> ResolvedConfig:
    """The config.pbtxt tree for `model` served as `name`; one-line UsageErrors for impossible settings."""
    notes: list[str] = []
    if opts.instances < 1:
        raise UsageError(f"--instances {opts.instances}: need at least 1")
    kind = opts.kind or model.default_kind
    if kind not in KINDS:
        raise UsageError(f"unknown --kind {kind!r}", hint="use cpu or gpu")
    piece = piece_of(model)
    piece.check(opts, kind)
    mbs = _max_batch_size(model, piece, opts, notes)
    batching = mbs > 0
    dynamic = opts.dynamic_batching if opts.dynamic_batching is not None else batching
    if dynamic and not batching:
        raise UsageError("dynamic batching needs a batchable model and --max-batch-size > 0",
                         hint=model.batch_blocker() or "pass --max-batch-size N")
    preferred = sorted(set(opts.preferred_batch_sizes))
    if preferred and not dynamic:
        raise UsageError("preferred batch sizes need dynamic batching", hint="drop --dynamic-batching off")
    if preferred and (preferred[0] < 1 or preferred[-1] > mbs):
        raise UsageError(f"preferred batch size {preferred[-1] if preferred[-1] > mbs else preferred[0]} is outside "
                         f"1..{mbs} (max_batch_size)", hint=f"keep preferred sizes within 1..{mbs}")
    if opts.max_queue_delay_us is not None and (opts.max_queue_delay_us < 0 or not dynamic):
        raise UsageError("--max-queue-delay-us needs dynamic batching and a value >= 0")
    if batching:
        piece.batching_notes(model, notes)

    tree: dict[str, object] = {}
    if header:
        tree["#header"] = Comment(header)
    # Triton: `platform` for ONNX Runtime and TensorRT, `backend` for OpenVINO.
    tensors = {"input": [_tensor(s, piece, batching, _ragged_inputs(model, piece, batching)) for s in model.inputs],
               "output": [_tensor(s, piece, batching) for s in model.outputs]}
    tree.update({"name": name, piece.config_key: model.platform, "max_batch_size": mbs, **tensors})
    if dynamic:
        batcher: dict[str, object] = {}
        if preferred:
            batcher["preferred_batch_size"] = preferred
        if opts.max_queue_delay_us:
            batcher["max_queue_delay_microseconds"] = opts.max_queue_delay_us
        if opts.preserve_ordering:
            batcher["preserve_ordering"] = True
        tree["dynamic_batching"] = batcher
    group: dict[str, object] = {"count": opts.instances, "kind": Enum("KIND_GPU" if kind == "gpu" else "KIND_CPU")}
    piece.instance_group(model, group)
    tree["instance_group"] = [group]
    tree.update({k: v for k, v in piece.extra_config(model, opts, kind, notes).items() if v is not None})
    dims, why = _warmup_dims(model, opts, batching)
    if opts.warmup and why is None:
        tree["model_warmup"] = _warmup(model, dims, piece, mbs)
    elif opts.warmup:
        notes.append(f"no model_warmup: {why}")
    perf = {s.name: dims[s.name] for s in model.inputs
            if s.name in dims and any(not isinstance(d, int) for d in (s.shape[1:] if batching else s.shape))}
    return ResolvedConfig(tree=tree, max_batch_size=mbs, kind=kind, dynamic_batching=dynamic,
                          preferred_batch_sizes=preferred, perf_shapes=perf, notes=notes, tensors=tensors)
