"""Build a Triton model configuration (config.pbtxt) from a ServedModel and the user's options.

Follows Triton's model_config.proto and the docs (model_configuration.md, batcher.md) and the ONNX
Runtime backend's README: with max_batch_size > 0 the batch dim is left out of `dims`; dynamic dims
are -1; a tensor whose only dim is the batch gets `dims: [1]` with an empty `reshape`; warm-up
inputs need concrete dims; the ONNX Runtime backend reads `optimization.graph.level` as
-1 basic, 1 extended, 2 disabled, anything else all (its own mapping, not the proto comment's).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from optcli.deploy.pbtxt import Comment, Enum, MapEntries
from optcli.deploy.triton_source import BACKEND_OPENVINO, BACKEND_PYTHON, PLATFORM_ONNX, ServedModel
from optcli.errors import UsageError
from optcli.tensor_spec import TensorSpec, merge_pinned

# A dynamic-batch ONNX model with no --max-batch-size gets this (Triton's own auto-complete default is 4).
DEFAULT_ONNX_MAX_BATCH = 8
KINDS = ("cpu", "gpu")
GRAPH_LEVELS = {"all": 0, "extended": 1, "basic": -1, "disabled": 2}

_TRITON_TYPES = {
    "bool": "TYPE_BOOL", "uint8": "TYPE_UINT8", "onnx-type-4": "TYPE_UINT16", "uint16": "TYPE_UINT16",
    "uint32": "TYPE_UINT32", "uint64": "TYPE_UINT64", "int8": "TYPE_INT8", "int16": "TYPE_INT16",
    "int32": "TYPE_INT32", "int64": "TYPE_INT64", "float16": "TYPE_FP16", "float32": "TYPE_FP32",
    "float64": "TYPE_FP64", "onnx-type-8": "TYPE_STRING", "string": "TYPE_STRING", "bfloat16": "TYPE_BF16",
}
# What each backend accepts (the Datatypes table in Triton's model_configuration.md).
_BACKEND_TYPES = {
    PLATFORM_ONNX: set(_TRITON_TYPES.values()) - {"TYPE_BF16"},
    "tensorrt_plan": {"TYPE_BOOL", "TYPE_UINT8", "TYPE_INT8", "TYPE_INT32", "TYPE_INT64", "TYPE_FP16",
                      "TYPE_FP32", "TYPE_BF16"},
    # The OpenVINO backend's type map (openvino_backend src/openvino_utils.cc): no BF16, FP64 or strings.
    BACKEND_OPENVINO: {"TYPE_BOOL", "TYPE_UINT8", "TYPE_UINT16", "TYPE_UINT32", "TYPE_UINT64", "TYPE_INT8",
                       "TYPE_INT16", "TYPE_INT32", "TYPE_INT64", "TYPE_FP16", "TYPE_FP32"},
    # optcli's model.py passes tensors by DLPack (numpy has no bfloat16; strings do not cross DLPack).
    BACKEND_PYTHON: set(_TRITON_TYPES.values()) - {"TYPE_BF16", "TYPE_STRING"},
}
_FLOAT_TYPES = {"TYPE_FP16", "TYPE_FP32", "TYPE_FP64", "TYPE_BF16"}


@dataclass
class TritonOptions:
    """How the model is served; None means "decide from the artifact" (documented in docs/deploy.md)."""

    max_batch_size: int | None = None
    dynamic_batching: bool | None = None          # None: on whenever max_batch_size > 0
    preferred_batch_sizes: list[int] = field(default_factory=list)
    max_queue_delay_us: int | None = None
    preserve_ordering: bool = False
    backend: str | None = None                    # "python": Triton's Python backend runs optcli's runner
    instances: int = 1
    kind: str | None = None                       # cpu | gpu
    graph_level: str | None = None                # ONNX Runtime: all | extended | basic | disabled
    intra_op_threads: int | None = None           # ONNX Runtime threads per instance
    ort_tensorrt: bool = False                    # ONNX on GPU through ONNX Runtime's TensorRT provider
    warmup: bool = True
    inputs: list[TensorSpec] = field(default_factory=list)  # concrete shapes for warm-up and perf_analyzer


@dataclass
class ResolvedConfig:
    """The config tree plus the decisions behind it (the README and the CLI report them)."""

    tree: dict[str, Any]
    max_batch_size: int
    kind: str
    dynamic_batching: bool
    preferred_batch_sizes: list[int]
    perf_shapes: dict[str, tuple[int, ...]]       # per input, dims without batch, for perf_analyzer --shape
    notes: list[str] = field(default_factory=list)


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


def triton_dtype(spec: TensorSpec, platform: str) -> str:
    dtype = _TRITON_TYPES.get(spec.dtype)
    if dtype is None or dtype not in _BACKEND_TYPES[platform]:
        raise UsageError(f"tensor {spec.name!r} has dtype {spec.dtype}, which Triton's {platform} backend does not "
                         "serve", hint="keep model inputs/outputs float32/float16/int (e.g. fp16 with keep_io_types)")
    return dtype


def _dims(spec: TensorSpec, batching: bool) -> tuple[list[int], bool]:
    """Triton dims (-1 for dynamic) and whether an empty reshape is needed (batch-only tensors)."""
    shape = spec.shape[1:] if batching else spec.shape
    dims = [d if isinstance(d, int) and d > 0 else -1 for d in shape]
    if not dims:
        return [1], True
    return dims, False


def _tensor(spec: TensorSpec, platform: str, batching: bool) -> dict[str, Any]:
    dims, reshape = _dims(spec, batching)
    entry: dict[str, Any] = {"name": spec.name, "data_type": Enum(triton_dtype(spec, platform)), "dims": dims}
    if reshape:
        entry["reshape"] = {"shape": []}
    return entry


def _max_batch_size(model: ServedModel, opts: TritonOptions, notes: list[str]) -> int:
    blocker = model.batch_blocker()
    limit = model.profile_max_batch() if model.format == "engine" else None
    requested = opts.max_batch_size
    if requested is not None and requested < 0:
        raise UsageError(f"--max-batch-size {requested}: must be 0 (no batching) or more")
    if requested is None:
        if blocker:
            notes.append(f"batching off (max_batch_size 0): {blocker}")
            return 0
        if model.format == "engine":
            if limit is None:
                raise UsageError("the engine metadata has no optimization profile, so its max batch is unknown",
                                 hint="pass --max-batch-size (at most the engine's profile max batch)")
            return limit
        # Room for the largest preferred size, so `--dynamic-batching preferred=16,32` alone works.
        return max([DEFAULT_ONNX_MAX_BATCH, *opts.preferred_batch_sizes])
    if requested == 0:
        return 0
    if blocker:
        raise UsageError(f"--max-batch-size {requested}: the model cannot batch ({blocker})",
                         hint="pass --max-batch-size 0, or re-export with a dynamic batch dim (no --static-batch)")
    if model.format == "engine":
        if limit is None:
            notes.append("the engine metadata has no profile: --max-batch-size was not checked against it")
        elif requested > limit:
            raise UsageError(f"--max-batch-size {requested} exceeds the engine's profile max batch {limit}",
                             hint=f"use --max-batch-size {limit} or less, or rebuild the engine with a larger profile")
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
        for i, s in enumerate(dims):
            if s is None:
                axis = i + start
                return {}, (f"input {spec.name!r} has a dynamic dim {spec.shape[axis]!r} (axis {axis}) of unknown "
                            f"size; pass --input {spec.name}:SHAPE to size the warm-up")
        out[spec.name] = tuple(int(s) for s in dims) if dims else (1,)
    return out, None


def _warmup(model: ServedModel, dims: dict[str, tuple[int, ...]], platform: str, mbs: int) -> list[dict[str, Any]]:
    inputs = []
    for spec in model.inputs:
        dtype = triton_dtype(spec, platform)
        # Triton fills random_data with random bytes: fine for floats, but as integers they are
        # out-of-range token ids and gather indices, which fail the warm-up and so the model load.
        data = {"random_data": True} if dtype in _FLOAT_TYPES else {"zero_data": True}
        inputs.append({"key": spec.name, "value": {"data_type": Enum(dtype), "dims": list(dims[spec.name]), **data}})
    samples = [{"name": "batch_1", "batch_size": 1, "inputs": MapEntries(inputs)}]
    if mbs > 1:
        samples.append({"name": f"batch_{mbs}", "batch_size": mbs, "inputs": MapEntries(inputs)})
    return samples


def _onnx_runtime(model: ServedModel, opts: TritonOptions, kind: str, notes: list[str]) -> dict[str, Any]:
    """The ONNX Runtime backend's optimization block and parameters (see its README)."""
    level = opts.graph_level or "all"
    disabled = model.facts.get("disabled_optimizers")
    if disabled and opts.graph_level is None:
        # Triton cannot switch off single optimizers; "extended" leaves out the layout ones (NCHWc).
        level = "extended"
        notes.append(f"graph level extended: the run disabled {', '.join(disabled)} to load this model")
    if level not in GRAPH_LEVELS:
        raise UsageError(f"unknown --graph-level {level!r}", hint=f"use one of: {', '.join(GRAPH_LEVELS)}")
    optimization: dict[str, Any] = {
        "#level": Comment("ONNX Runtime backend graph level: 0 all (default), 1 extended, -1 basic, 2 disabled"),
        "graph": {"level": GRAPH_LEVELS[level]}}
    if opts.ort_tensorrt:
        if kind != "gpu":
            raise UsageError("--ort-tensorrt needs GPU instances", hint="add --kind gpu")
        if model.facts.get("dynamic_int8"):
            raise UsageError("--ort-tensorrt: dynamically quantized (MatMulInteger) models do not run on TensorRT",
                             hint="serve it on CPU, or quantize with Q/DQ for TensorRT")
        mode = {"fp16": "FP16", "int8": "INT8"}.get(model.precision, "FP32")
        optimization["execution_accelerators"] = {"gpu_execution_accelerator": [{
            "name": "tensorrt",
            "parameters": MapEntries([{"key": "precision_mode", "value": mode},
                                      {"key": "trt_engine_cache_enable", "value": "1"}])}]}
    params = []
    if opts.intra_op_threads is not None:
        if opts.intra_op_threads < 0:
            raise UsageError("--intra-op-threads must be 0 (all cores) or more")
        params.append({"key": "intra_op_thread_count", "value": {"string_value": str(opts.intra_op_threads)}})
    elif kind == "cpu" and opts.instances > 1:
        notes.append(f"{opts.instances} CPU instances each use every core by default: pass --intra-op-threads "
                     f"(cores / {opts.instances}) to avoid oversubscription")
    if kind == "gpu" and model.facts.get("contrib_ops"):
        notes.append("the graph has onnxruntime contrib ops (" + ", ".join(model.facts["contrib_ops"][:3])
                     + "); some run on CPU only: compile with --fuse-level basic for GPU serving")
    if kind == "gpu" and model.facts.get("dynamic_int8"):
        notes.append("dynamically quantized INT8 runs on ONNX Runtime's CPU provider; serve it with --kind cpu")
    return {"optimization": optimization, "parameters": MapEntries(params) if params else None}


def _openvino(model: ServedModel, opts: TritonOptions, notes: list[str]) -> dict[str, Any]:
    """The OpenVINO backend's parameters (its README): precision, streams and threads as optcli ran it."""
    def param(key: str, value: str) -> dict[str, Any]:
        return {"key": key, "value": {"string_value": value}}

    params = []
    gated = model.facts.get("inference_precision")
    if gated == "bf16":
        params.append(param("HINT_BF16", "YES"))
    elif gated == "f32":
        # The backend has a BF16 switch but no FP32 one, and OpenVINO computes in BF16 by default on
        # CPUs that have it: there, Triton would run this IR in a precision optcli did not gate.
        notes.append("optcli gated this IR at FP32, but Triton's OpenVINO backend cannot ask for FP32 (it has only "
                     "HINT_BF16): on a CPU with BF16 (AVX-512 BF16, AMX) it computes in BF16. Check accuracy there, "
                     "compile with --bf16 to gate what it will run, or serve the ONNX (--backend onnxruntime)")
    # One instance: latency mode, one stream (what optcli measured); N instances: N streams side by side.
    if opts.instances == 1:
        params += [param("NUM_STREAMS", "1"), param("PERFORMANCE_HINT", "LATENCY")]
    else:
        params.append(param("NUM_STREAMS", str(opts.instances)))
    if opts.intra_op_threads is not None:
        if opts.intra_op_threads < 0:
            raise UsageError("--intra-op-threads must be 0 (all cores) or more")
        if opts.intra_op_threads:
            params.append(param("INFERENCE_NUM_THREADS", str(opts.intra_op_threads)))
    return {"parameters": MapEntries(params)}


def build_config(model: ServedModel, opts: TritonOptions, name: str, header: str = "") -> ResolvedConfig:
    """The config.pbtxt tree for `model` served as `name`; one-line UsageErrors for impossible settings."""
    notes: list[str] = []
    if opts.instances < 1:
        raise UsageError(f"--instances {opts.instances}: need at least 1")
    kind = opts.kind or model.default_kind
    if kind not in KINDS:
        raise UsageError(f"unknown --kind {kind!r}", hint="use cpu or gpu")
    onnx = model.platform == PLATFORM_ONNX
    openvino = model.platform == BACKEND_OPENVINO
    python = model.platform == BACKEND_PYTHON
    if python:
        for flag, value in (("--graph-level", opts.graph_level), ("--ort-tensorrt", opts.ort_tensorrt or None)):
            if value is not None:
                raise UsageError(f"{flag} applies to Triton's ONNX Runtime backend, not the Python backend")
        if model.format == "engine" and kind != "gpu":
            raise UsageError("a TensorRT engine runs on the GPU only", hint="drop --kind cpu (or serve the ONNX)")
    elif openvino:
        if kind != "cpu":
            raise UsageError("optcli builds and checks OpenVINO IRs for the CPU", hint="drop --kind gpu")
        for flag, value in (("--graph-level", opts.graph_level), ("--ort-tensorrt", opts.ort_tensorrt or None)):
            if value is not None:
                raise UsageError(f"{flag} applies to ONNX models, not OpenVINO IRs")
    elif not onnx:
        if kind != "gpu":
            raise UsageError("a TensorRT engine runs on the GPU only", hint="drop --kind cpu (or serve the ONNX)")
        for flag, value in (("--graph-level", opts.graph_level), ("--intra-op-threads", opts.intra_op_threads),
                            ("--ort-tensorrt", opts.ort_tensorrt or None)):
            if value is not None:
                raise UsageError(f"{flag} applies to ONNX models, not TensorRT engines")
    mbs = _max_batch_size(model, opts, notes)
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
    if model.format == "engine" and batching and model.profiles:
        min_batch = min(p[s.name][0][0] for p in model.profiles[:1] for s in model.inputs if s.name in p)
        if min_batch > 1:
            notes.append(f"the engine's profile starts at batch {min_batch}: smaller batches will be rejected")

    tree: dict[str, Any] = {}
    if header:
        tree["#header"] = Comment(header)
    # Triton: `platform` for ONNX Runtime and TensorRT, `backend` for OpenVINO.
    tree.update({"name": name, ("backend" if openvino or python else "platform"): model.platform,
                 "max_batch_size": mbs,
                 "input": [_tensor(s, model.platform, batching) for s in model.inputs],
                 "output": [_tensor(s, model.platform, batching) for s in model.outputs]})
    if dynamic:
        batcher: dict[str, Any] = {}
        if preferred:
            batcher["preferred_batch_size"] = preferred
        if opts.max_queue_delay_us:
            batcher["max_queue_delay_microseconds"] = opts.max_queue_delay_us
        if opts.preserve_ordering:
            batcher["preserve_ordering"] = True
        tree["dynamic_batching"] = batcher
    group: dict[str, Any] = {"count": opts.instances, "kind": Enum("KIND_GPU" if kind == "gpu" else "KIND_CPU")}
    if model.format == "engine" and len(model.profiles) > 1:
        # Let Triton pick the best of the engine's profiles per batch (otherwise it uses profile 0 only).
        group["profile"] = [str(i) for i in range(len(model.profiles))]
    tree["instance_group"] = [group]
    if onnx:
        tree.update({k: v for k, v in _onnx_runtime(model, opts, kind, notes).items() if v is not None})
    if openvino:
        tree.update(_openvino(model, opts, notes))
    dims, why = _warmup_dims(model, opts, batching)
    if opts.warmup and why is None:
        tree["model_warmup"] = _warmup(model, dims, model.platform, mbs)
    elif opts.warmup:
        notes.append(f"no model_warmup: {why}")
    perf = {s.name: dims[s.name] for s in model.inputs
            if s.name in dims and any(not isinstance(d, int) for d in (s.shape[1:] if batching else s.shape))}
    return ResolvedConfig(tree=tree, max_batch_size=mbs, kind=kind, dynamic_batching=dynamic,
                          preferred_batch_sizes=preferred, perf_shapes=perf, notes=notes)
