"""A test double of exactly the slice of the TensorRT Python API optcli uses (10.x and 11.x).

Written from NVIDIA's Python API reference and the bindings source (python/src/infer/pyCore.cpp,
python/src/parsers/pyOnnx.cpp in NVIDIA/TensorRT, release/10.x and 11.1), not from optcli's code.
It fails loudly: reading or setting anything outside the slice raises AttributeError, and calls
with arguments the real API would refuse raise AssertionError. Behaviour that optcli depends on is
modelled the way the documentation describes it:

- create_network(flags): 10.x is strongly typed only with 1 << STRONGLY_TYPED; 11.x always is.
- OnnxParser.parse_from_file reads the real ONNX file with `onnx`; ops outside a small known set
  (or in a custom domain) fail with a ParserError naming the node, its name and op.
- build_serialized_network returns None (after logging an ERROR) when a dynamic input has no
  profile or a profile contradicts a static dim; otherwise an IHostMemory (buffer protocol).
- Timing caches serialize to bytes; garbage makes create_timing_cache return None; a cache from
  another compute capability is refused by set_timing_cache(cache, ignore_mismatch=False).
- Runtime.deserialize_cuda_engine returns None for bytes that are not an engine of this TensorRT
  version and GPU, and for version-compatible engines unless engine_host_code_allowed is set.
- An execution context refuses input shapes outside profile 0 (set_input_shape -> False), reports
  output shapes for the current input shapes, and execute_async_v3 reads the inputs at the
  addresses set with set_tensor_address and writes the outputs there (computed with onnxruntime
  from the engine's ONNX: host pointers stand in for device pointers). While `trt.capturing` is a
  list (a fake CUDA graph capture), enqueues are recorded into it instead of run.

Refused the way TensorRT refuses them (each a defect a review against the real bindings found):
- DequantizeLinear of an INT32 input (onnxruntime's quantized bias; onnx-tensorrt operators.md,
  NVIDIA/TensorRT#4542) and QuantizeLinear to UINT8: parser errors naming the node.
- What NVIDIA's real parser refuses in tests/contract/parser_corpus.py (test_rtx_fake_vs_real.py runs
  both on it and on every graph optcli writes for TensorRT): element types TensorRT has no DataType for
  (INT16, UINT16/32/64, STRING, complex) anywhere, in a Cast's `to` too; INT32/INT64/UINT8/BOOL into
  MatMul/Gemm/Conv/ConvTranspose; UINT8 into anything but Cast and Q/DQ; a non-zero Q/DQ zero point; a
  per-channel scale whose length is not the axis' size; pooling dilations other than 1, a pooling window of
  100000+ elements; MaxPool's
  Indices output; Resize with antialias.
- Plugin layers (RoiAlign -> ROIAlign_TRT) parse and deserialize only after init_libnvinfer_plugins
  in this "process" (one make_tensorrt() module is one process): otherwise parse fails and
  deserialize_cuda_engine returns None, as in a fresh Python process.
- One global logger per process: the first ILogger a Builder/Runtime gets receives every later
  message (TensorRT warns that a different logger passed later is ignored).
- HOST-located tensors (shape tensors: an INT32/INT64 input that is a Reshape/Expand/Tile shape)
  refuse device pointers, device tensors refuse host pointers: `trt.device_ranges` holds the
  (start, end) of memory the test's torch.cuda stand-in allocated as "device" memory.
- A shape-tensor input needs its values in the optimization profile (set_shape_input), else the
  build fails; the context reads its values from host memory to compute output shapes.
- An enqueue during a CUDA graph capture fails (False, ERROR logged) while a profiler is attached
  (enqueue_emits_profile synchronizes, which a capture cannot hold).
- The engine inspector returns layer types only for engines built with ProfilingVerbosity.DETAILED.
- ITimingCache entries are a set: combine() merges another cache's entries (refused across GPUs
  unless ignore_mismatch).
"""
from __future__ import annotations

import json
import types
from typing import Any

import numpy as np
import onnx

PLAN_MAGIC = b"FAKEPLAN"
CACHE_MAGIC = b"FAKETC"
# Ops the double's parser imports (all listed Y in onnx-tensorrt docs/operators.md); others fail
# as "No importer registered for op".
KNOWN_OPS = {"Relu", "MatMul", "Add", "Mul", "Gemm", "Conv", "Cast", "Sigmoid", "Softmax", "Flatten",
             "QuantizeLinear", "DequantizeLinear", "Identity", "Reshape", "Transpose", "GlobalAveragePool",
             "MaxPool", "AveragePool", "RoiAlign", "ReduceMean", "ReduceSum", "ReduceMax", "Shape", "Gather",
             "Unsqueeze", "Squeeze", "Concat", "Slice", "Constant", "Sub", "Div", "Pow", "Sqrt", "Erf", "Tanh",
             "LayerNormalization", "Where", "Equal", "Expand", "BatchNormalization", "Neg", "Exp", "Not",
             "ConstantOfShape", "Range", "Tile", "Clip", "Split", "Pad", "Less", "Greater", "Gelu", "Max", "Min",
             "GatherND", "GatherElements", "And", "Or", "Xor", "ScatterND", "CumSum", "Trilu", "Mod", "Floor",
             "Ceil", "Abs", "ArgMax", "TopK", "Einsum", "Sin", "Cos", "Log", "Reciprocal", "ReduceProd", "Sign",
             "IsNaN", "Round", "CastLike", "LessOrEqual", "GreaterOrEqual", "Softplus", "LeakyRelu", "PRelu",
             "HardSwish", "HardSigmoid", "InstanceNormalization", "Resize", "ConvTranspose", "Dropout", "LpPool",
             "RMSNormalization", "Swish", "Attention", "RotaryEmbedding"}
# ONNX element types TensorRT has no DataType for (pyFoundationalTypes.cpp DataType; onnx-tensorrt convertDtype).
_NO_TRT_TYPE = {4: "UINT16", 5: "INT16", 8: "STRING", 12: "UINT32", 13: "UINT64", 14: "COMPLEX64", 15: "COMPLEX128"}
_FLOAT_COMPUTE = {"MatMul", "Gemm", "Conv", "ConvTranspose"}   # operators.md: FP32, FP16, BF16 only
_UINT8_OK = {"Cast", "QuantizeLinear", "DequantizeLinear"}      # "UINT8 is only supported as network I/O" (+ casts)
PLUGIN_OPS = {"RoiAlign": "ROIAlign_TRT"}            # ONNX ops onnx-tensorrt imports as plugin layers
_SHAPE_CONSUMERS = {"Reshape": 1, "Expand": 1, "Tile": 1}  # op -> index of its shape input
# BF16 and FP8 have no numpy dtype: their memory is read and written as bit patterns. FP4 and INT4
# are packed two per byte (element 0 in the low nibble, as ONNX packs them): see _view.
_NP = {"FLOAT": np.float32, "HALF": np.float16, "INT8": np.int8, "INT32": np.int32, "INT64": np.int64,
       "BOOL": np.bool_, "UINT8": np.uint8, "BF16": np.uint16, "FP8": np.uint8, "FP4": np.uint8, "INT4": np.uint8}
_PACKED = ("FP4", "INT4")
_ELEM = {1: "FLOAT", 10: "HALF", 16: "BF16", 3: "INT8", 6: "INT32", 7: "INT64", 9: "BOOL", 2: "UINT8", 17: "FP8",
         22: "INT4", 23: "FP4"}
_VERBOSITY_RANK = {"NONE": 0, "LAYER_NAMES_ONLY": 1, "DETAILED": 2}


class Strict:
    """Only the attributes listed in _settable can be set from outside; unknown reads fail loudly."""

    _settable: tuple[str, ...] = ()

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("_") and name not in self._settable:
            raise AttributeError(f"TensorRT contract: {type(self).__name__}.{name} cannot be set "
                                 f"(not in the API slice the double models)")
        object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:  # only called when normal lookup failed
        raise AttributeError(f"TensorRT contract: {type(self).__name__} has no {name!r} in the modelled API slice")


class EnumMember:
    def __init__(self, enum: str, name: str, value: int) -> None:
        self.enum, self.name, self.value = enum, name, value

    def __int__(self) -> int:
        return self.value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EnumMember) and (other.enum, other.value) == (self.enum, self.value)

    def __hash__(self) -> int:
        return hash((self.enum, self.value))

    def __repr__(self) -> str:
        return f"{self.enum}.{self.name}"


class Enum(Strict):
    def __init__(self, name: str, members: dict[str, int]) -> None:
        self._name = name
        self._members = {k: EnumMember(name, k, v) for k, v in members.items()}

    def __getattr__(self, name: str) -> Any:
        members = self.__dict__.get("_members", {})
        if name in members:
            return members[name]
        raise AttributeError(f"TensorRT contract: {self.__dict__.get('_name')} has no member {name!r} "
                             f"in this TensorRT version")

    def __contains__(self, item: object) -> bool:
        return item in self._members.values()


class HostMemory(bytes):
    """IHostMemory: supports the buffer protocol (bytes(x)); .nbytes."""

    @property
    def nbytes(self) -> int:
        return len(self)


def _bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (round to nearest even), as TensorRT writes a BF16 output."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _encode(values: np.ndarray, dtype: str) -> np.ndarray:
    """float32 from onnxruntime -> the bytes TensorRT writes for a BF16, FP8 (E4M3), FP4 (E2M1) or
    INT4 output; other dtypes as they are."""
    import ml_dtypes

    if dtype == "BF16":
        return _bf16_bits(values)
    if dtype == "FP8":
        return np.asarray(values, np.float32).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    if dtype in _PACKED:
        flat = np.asarray(values, np.float32).ravel()
        codes = (flat.astype(ml_dtypes.float4_e2m1fn).view(np.uint8) if dtype == "FP4"
                 else flat.astype(np.int8).view(np.uint8)) & 0x0F
        codes = np.concatenate([codes, np.zeros(len(codes) % 2, np.uint8)])
        return (codes[0::2] | (codes[1::2] << 4)).astype(np.uint8)
    return values


def _session(path: str) -> Any:
    """onnxruntime session for the engine's ONNX; BF16, FP8 and INT4 graph outputs get a Cast back to
    float32 (onnxruntime's Python API cannot return them)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    model = onnx.load(path)
    for out in model.graph.output:
        # (FLOAT4E2M1 is not here: onnxruntime has no FP4 kernels, so the double cannot run FP4 graphs.)
        if out.type.tensor_type.elem_type in (TensorProto.BFLOAT16, TensorProto.FLOAT8E4M3FN, TensorProto.INT4):
            model.graph.node.append(helper.make_node("Cast", [out.name], [out.name + "__f32"], to=TensorProto.FLOAT))
            out.name += "__f32"
            out.type.tensor_type.elem_type = TensorProto.FLOAT
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _refusal(node: Any, types_: dict[str, int], m: Any) -> str | None:
    """What the real parser refuses in one node beyond unknown ops, Q/DQ types and plugins (see the
    module docstring), in its words; None where it imports the node."""
    from onnx import numpy_helper

    attrs = {a.name: a for a in node.attribute}
    tensors = [t for t in list(node.input) + list(node.output) if t]
    bad = next((types_[t] for t in tensors if types_.get(t) in _NO_TRT_TYPE), None)
    if bad is None and node.op_type == "Cast" and attrs.get("to") is not None and attrs["to"].i in _NO_TRT_TYPE:
        bad = attrs["to"].i
    if bad is not None:
        return f"Unsupported ONNX data type: {_NO_TRT_TYPE[bad]} ({bad})"
    first = types_.get(node.input[0]) if node.input else None
    if node.op_type in _FLOAT_COMPUTE and first in (2, 6, 7, 9):
        return f"Found unsupported input type of {_ELEM.get(first, first)}"
    if first == 2 and node.op_type not in _UINT8_OK:
        return "Found unsupported input type of UINT8"
    inits = {i.name: i for i in m.graph.initializer}
    if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
        zp = inits.get(node.input[2]) if len(node.input) > 2 else None
        if zp is not None and numpy_helper.to_array(zp).astype(np.int64).any():
            return "Non-zero zero point is not supported"
        scale = inits.get(node.input[1])
        if scale is not None and len(scale.dims) == 1 and scale.dims[0] > 1:
            axis = attrs["axis"].i if "axis" in attrs else 1
            shape = _static_shape(node.input[0], m)
            if shape is not None and -len(shape) <= axis < len(shape) and shape[axis] not in (-1, scale.dims[0]):
                return "The number of scales is not equal to the number of output channels"
    if node.op_type in ("MaxPool", "AveragePool", "LpPool") and any(d != 1 for d in attrs.get("dilations", _NO).ints):
        return "This version of TensorRT does not support dilations other than 1."
    if node.op_type in ("MaxPool", "AveragePool", "LpPool") and np.prod(attrs.get("kernel_shape", _NO).ints) >= 100_000:
        return "INetworkDefinition::addPoolingNd: volume(windowSize) < maxKernelDimsProduct"
    if node.op_type == "MaxPool" and len(node.output) > 1 and node.output[1]:
        return "This version of TensorRT doesn't support more than 1 outputs for MaxPool nodes!"
    if node.op_type == "Resize" and "antialias" in attrs and attrs["antialias"].i:
        return "Antialiasing is not supported currently."
    return None


class _NoAttr:
    ints: tuple[int, ...] = ()


_NO = _NoAttr()


def _static_shape(name: str, m: Any) -> tuple[int, ...] | None:
    inferred = onnx.shape_inference.infer_shapes(m)
    for vi in list(inferred.graph.input) + list(inferred.graph.value_info):
        if vi.name == name and vi.type.tensor_type.HasField("shape"):
            return tuple(d.dim_value if d.HasField("dim_value") else -1 for d in vi.type.tensor_type.shape.dim)
    init = next((i for i in m.graph.initializer if i.name == name), None)
    return tuple(init.dims) if init is not None else None


def make_tensorrt(version: str = "10.8.0.43", compute_capability: str = "8.9") -> types.ModuleType:
    """A fresh `tensorrt` double (one per simulated process); `trt.calls` records (what, args) of the
    calls that matter to tests."""
    major, minor = (int(p) for p in version.split(".")[:2])
    trt = types.ModuleType("tensorrt")
    trt.__version__ = version
    trt.calls = []          # type: ignore[attr-defined]
    trt.builds = 0          # type: ignore[attr-defined]
    trt.device_cc = compute_capability  # type: ignore[attr-defined]
    trt.capturing = None    # type: ignore[attr-defined]  # a list while a fake CUDA graph captures
    trt.device_ranges = []  # type: ignore[attr-defined]  # (start, end) of "device" allocations
    trt.plugins_registered = False  # type: ignore[attr-defined]
    trt.global_logger = None        # type: ignore[attr-defined]
    trt.io_format = "LINEAR"        # type: ignore[attr-defined]  # what engines built from now on report
    sessions: dict[str, Any] = {}

    def record(what: str, *args: Any) -> None:
        trt.calls.append((what, args))

    Severity = Enum("Severity", {"INTERNAL_ERROR": 0, "ERROR": 1, "WARNING": 2, "INFO": 3, "VERBOSE": 4})

    class ILogger:
        def __init__(self) -> None:
            pass

        def log(self, severity: Any, msg: str) -> None:
            raise NotImplementedError

    class Logger(ILogger):
        INTERNAL_ERROR, ERROR, WARNING = Severity.INTERNAL_ERROR, Severity.ERROR, Severity.WARNING
        INFO, VERBOSE = Severity.INFO, Severity.VERBOSE

        def __init__(self, min_severity: Any = Severity.WARNING) -> None:
            super().__init__()

        def log(self, severity: Any, msg: str) -> None:
            pass

    def _check_logger(logger: Any) -> None:
        assert isinstance(logger, ILogger), f"expected a trt.ILogger, got {type(logger).__name__}"

    def _register_logger(logger: Any) -> None:
        """TensorRT keeps the first logger as the process's global one; a later, different one is ignored."""
        _check_logger(logger)
        if trt.global_logger is None:
            trt.global_logger = logger
        elif logger is not trt.global_logger:
            _log(Severity.WARNING, "The logger passed into createInferRuntime differs from one already provided "
                                   "for an existing builder, runtime, or refitter. Uses of the global logger will "
                                   "return the existing value.")

    def _log(severity: Any, msg: str) -> None:
        if trt.global_logger is not None:
            trt.global_logger.log(severity, msg)

    def init_libnvinfer_plugins(logger: Any, namespace: str) -> bool:
        _check_logger(logger)
        assert isinstance(namespace, str)
        record("init_libnvinfer_plugins", namespace)
        trt.plugins_registered = True
        return True

    # NvInfer.h: 10.x kEXPLICIT_BATCH=0, kSTRONGLY_TYPED=1 (10.9+: Python plugin flags 2, 3);
    # 11.x kSTRONGLY_TYPED=0, kPREFER_JIT_PYTHON_PLUGINS=1, kPREFER_AOT_PYTHON_PLUGINS=2.
    if major >= 11:
        flags = {"STRONGLY_TYPED": 0, "PREFER_JIT_PYTHON_PLUGINS": 1, "PREFER_AOT_PYTHON_PLUGINS": 2}
    else:
        flags = {"EXPLICIT_BATCH": 0, "STRONGLY_TYPED": 1}
        if minor >= 9:
            flags.update({"PREFER_JIT_PYTHON_PLUGINS": 2, "PREFER_AOT_PYTHON_PLUGINS": 3})
    NetworkDefinitionCreationFlag = Enum("NetworkDefinitionCreationFlag", flags)
    builder_flags = {"DEBUG": 2, "GPU_FALLBACK": 3, "REFIT": 4, "DISABLE_TIMING_CACHE": 5, "TF32": 6,
                     "VERSION_COMPATIBLE": 12, "EXCLUDE_LEAN_RUNTIME": 13}
    if major < 11:  # removed in 11.x: precision comes from the network (strong typing)
        builder_flags.update({"FP16": 0, "INT8": 1, "BF16": 20, "OBEY_PRECISION_CONSTRAINTS": 10})
    BuilderFlag = Enum("BuilderFlag", builder_flags)
    MemoryPoolType = Enum("MemoryPoolType", {"WORKSPACE": 0, "DLA_MANAGED_SRAM": 1, "DLA_LOCAL_DRAM": 2,
                                             "DLA_GLOBAL_DRAM": 3, "TACTIC_DRAM": 4, "TACTIC_SHARED_MEMORY": 5})
    hw = {"NONE": 0, "AMPERE_PLUS": 1}
    if (major, minor) >= (10, 9):
        hw["SAME_COMPUTE_CAPABILITY"] = 2
    HardwareCompatibilityLevel = Enum("HardwareCompatibilityLevel", hw)
    TensorIOMode = Enum("TensorIOMode", {"NONE": 0, "INPUT": 1, "OUTPUT": 2})
    dtypes = {"FLOAT": 0, "HALF": 1, "INT8": 2, "INT32": 3, "BOOL": 4, "UINT8": 5, "FP8": 6, "BF16": 7, "INT64": 8,
              "INT4": 9}
    if (major, minor) >= (10, 8):
        dtypes["FP4"] = 10
    if major >= 11:
        dtypes["E8M0"] = 11
    DataType = Enum("DataType", dtypes)
    TensorLocation = Enum("TensorLocation", {"DEVICE": 0, "HOST": 1})
    TensorFormat = Enum("TensorFormat", {"LINEAR": 0, "CHW2": 1, "HWC8": 2, "CHW4": 3, "CHW16": 4, "CHW32": 5,
                                         "DHWC8": 6, "CDHW32": 7, "HWC": 8, "DLA_LINEAR": 9, "DLA_HWC4": 10,
                                         "HWC16": 11, "DHWC": 12})
    ProfilingVerbosity = Enum("ProfilingVerbosity", {"LAYER_NAMES_ONLY": 0, "NONE": 1, "DETAILED": 2})
    ExecutionContextAllocationStrategy = Enum("ExecutionContextAllocationStrategy",
                                              {"STATIC": 0, "ON_PROFILE_CHANGE": 1, "USER_MANAGED": 2})
    scratch_users: dict[int, tuple[Any, int]] = {}  # device memory -> (the context, the stream) that last ran on it
    LayerInformationFormat = Enum("LayerInformationFormat", {"ONELINE": 0, "JSON": 1})

    def _is_device(ptr: int) -> bool:
        return any(lo <= ptr < hi for lo, hi in trt.device_ranges)

    class ITensor(Strict):
        def __init__(self, name: str, shape: tuple[int, ...], dtype: str, shape_tensor: bool = False) -> None:
            self._name, self._shape, self._dtype, self._shape_tensor = name, shape, dtype, shape_tensor

        @property
        def name(self) -> str:
            return self._name

        @property
        def shape(self) -> tuple[int, ...]:
            return self._shape

        @property
        def dtype(self) -> Any:
            return getattr(DataType, self._dtype)

        @property
        def is_shape_tensor(self) -> bool:
            return self._shape_tensor

    class INetworkDefinition(Strict):
        def __init__(self, strongly_typed: bool) -> None:
            self._strongly_typed = strongly_typed
            self._inputs: list[ITensor] = []
            self._outputs: list[ITensor] = []
            self._nodes: list[str] = []
            self._plugins: list[str] = []
            self._path = ""

        @property
        def num_inputs(self) -> int:
            return len(self._inputs)

        @property
        def num_outputs(self) -> int:
            return len(self._outputs)

        def get_input(self, index: int) -> ITensor:
            assert isinstance(index, int) and 0 <= index < len(self._inputs), f"bad input index {index}"
            return self._inputs[index]

        def get_output(self, index: int) -> ITensor:
            assert isinstance(index, int) and 0 <= index < len(self._outputs), f"bad output index {index}"
            return self._outputs[index]

    class ParserError(Strict):
        def __init__(self, node: int, name: str, op: str, desc: str) -> None:
            self._node, self._name, self._op, self._desc = node, name, op, desc

        def desc(self) -> str:
            return self._desc

        def node(self) -> int:
            return self._node

        def node_name(self) -> str:
            return self._name

        def node_operator(self) -> str:
            return self._op

    class OnnxParser(Strict):
        def __init__(self, network: Any, logger: Any) -> None:
            assert isinstance(network, INetworkDefinition), "OnnxParser(network, logger): network first"
            _check_logger(logger)
            self._network, self._logger, self._errors = network, logger, []

        @property
        def num_errors(self) -> int:
            return len(self._errors)

        def get_error(self, index: int) -> ParserError:
            assert 0 <= index < len(self._errors)
            return self._errors[index]

        def parse_from_file(self, model: str) -> bool:
            assert isinstance(model, str), "parse_from_file takes the path as a str"
            record("parse_from_file", model)
            m = onnx.load(model)
            inferred = onnx.shape_inference.infer_shapes(m)
            inits = {i.name: i.data_type for i in m.graph.initializer}
            types_ = dict(inits)
            for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
                types_.setdefault(vi.name, vi.type.tensor_type.elem_type)
            shape_inputs = {n.input[_SHAPE_CONSUMERS[n.op_type]] for n in m.graph.node
                            if n.op_type in _SHAPE_CONSUMERS and len(n.input) > _SHAPE_CONSUMERS[n.op_type]}

            def tensor(vi: Any) -> ITensor:
                dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in vi.type.tensor_type.shape.dim)
                return ITensor(vi.name, dims, _ELEM.get(vi.type.tensor_type.elem_type, "FLOAT"),
                               shape_tensor=vi.name in shape_inputs)

            for i, node in enumerate(m.graph.node):
                error = None
                if node.domain not in ("", "ai.onnx") or node.op_type not in KNOWN_OPS:
                    error = f"No importer registered for op: {node.op_type}"
                elif node.op_type == "DequantizeLinear" and types_.get(node.input[0]) not in (3, 17, 22):
                    error = ("Assertion failed: DequantizeLinear: the quantized datatype is "
                             f"{_ELEM.get(types_.get(node.input[0]), types_.get(node.input[0]))}, which TensorRT "
                             "does not support (INT8, FP8 or INT4 only)")
                elif node.op_type == "QuantizeLinear" and len(node.input) > 2 and types_.get(node.input[2]) == 2:
                    error = "Assertion failed: QuantizeLinear: UINT8 quantization is not supported"
                elif node.op_type in PLUGIN_OPS and not trt.plugins_registered:
                    error = (f"Plugin not found, are the plugin name, version, and namespace correct?: "
                             f"{PLUGIN_OPS[node.op_type]}")
                else:
                    error = _refusal(node, types_, m)
                if error:
                    self._errors.append(ParserError(i, node.name, node.op_type, error))
                    _log(Severity.ERROR, error)
            self._network._inputs = [tensor(v) for v in m.graph.input if v.name not in inits]
            self._network._outputs = [tensor(v) for v in m.graph.output]
            self._network._nodes = [f"{n.op_type}:{n.name or i}" for i, n in enumerate(m.graph.node)]
            self._network._plugins = sorted({PLUGIN_OPS[n.op_type] for n in m.graph.node if n.op_type in PLUGIN_OPS})
            self._network._layer_names = [n.name or f"{n.op_type}_{i}" for i, n in enumerate(m.graph.node)]
            self._network._layer_types = [n.op_type for n in m.graph.node]
            self._network._path = model
            return not self._errors

    class IOptimizationProfile(Strict):
        def __init__(self) -> None:
            self._shapes: dict[str, tuple] = {}
            self._values: dict[str, tuple] = {}

        def set_shape(self, input: str, min: Any, opt: Any, max: Any) -> None:
            for shape in (min, opt, max):
                assert isinstance(shape, (tuple, list)) and all(isinstance(d, int) for d in shape), \
                    f"set_shape takes int sequences, got {shape!r}"
            assert len(min) == len(opt) == len(max), "min/opt/max of one rank"
            assert all(a <= b <= c for a, b, c in zip(min, opt, max)), "min <= opt <= max"
            record("set_shape", input, tuple(min), tuple(opt), tuple(max))
            self._shapes[input] = (tuple(min), tuple(opt), tuple(max))

        def set_shape_input(self, input: str, min: Any, opt: Any, max: Any) -> None:
            for values in (min, opt, max):
                assert isinstance(values, (tuple, list)) and all(isinstance(d, int) for d in values), \
                    f"set_shape_input takes int sequences (the tensor's values), got {values!r}"
            assert len(min) == len(opt) == len(max) and all(a <= b <= c for a, b, c in zip(min, opt, max))
            record("set_shape_input", input, tuple(min), tuple(opt), tuple(max))
            self._values[input] = (tuple(min), tuple(opt), tuple(max))

    class ITimingCache(Strict):
        def __init__(self, entries: set[str], cc: str) -> None:
            self._entries, self._cc = set(entries), cc

        def serialize(self) -> HostMemory:
            return HostMemory(CACHE_MAGIC + json.dumps({"entries": sorted(self._entries), "cc": self._cc}).encode())

        def combine(self, input_cache: Any, ignore_mismatch: bool) -> bool:
            assert isinstance(input_cache, ITimingCache) and isinstance(ignore_mismatch, bool)
            record("combine", len(input_cache._entries), ignore_mismatch)
            if input_cache._cc != self._cc and not ignore_mismatch:
                return False
            self._entries |= input_cache._entries
            return True

    class IBuilderConfig(Strict):
        _settable = ("builder_optimization_level", "hardware_compatibility_level", "profiling_verbosity")

        def __init__(self) -> None:
            self._profiles: list[IOptimizationProfile] = []
            self._flags: set = set()
            self._pools: dict = {}
            self._timing: ITimingCache | None = None
            self._opt_level = 3
            self._hw = HardwareCompatibilityLevel.NONE
            self._verbosity = ProfilingVerbosity.LAYER_NAMES_ONLY

        @property
        def builder_optimization_level(self) -> int:
            return self._opt_level

        @builder_optimization_level.setter
        def builder_optimization_level(self, value: int) -> None:
            assert isinstance(value, int) and 0 <= value <= 5, f"builder_optimization_level 0-5, got {value!r}"
            record("builder_optimization_level", value)
            self._opt_level = value

        @property
        def hardware_compatibility_level(self) -> Any:
            return self._hw

        @hardware_compatibility_level.setter
        def hardware_compatibility_level(self, value: Any) -> None:
            assert value in HardwareCompatibilityLevel, f"not a HardwareCompatibilityLevel: {value!r}"
            record("hardware_compatibility_level", value.name)
            self._hw = value

        @property
        def profiling_verbosity(self) -> Any:
            return self._verbosity

        @profiling_verbosity.setter
        def profiling_verbosity(self, value: Any) -> None:
            assert value in ProfilingVerbosity, f"not a ProfilingVerbosity: {value!r}"
            record("profiling_verbosity", value.name)
            self._verbosity = value

        def set_memory_pool_limit(self, pool: Any, pool_size: int) -> None:
            assert pool in MemoryPoolType, f"not a MemoryPoolType: {pool!r}"
            assert isinstance(pool_size, int) and pool_size > 0
            record("set_memory_pool_limit", pool.name, pool_size)
            self._pools[pool.name] = pool_size

        def set_flag(self, flag: Any) -> None:
            assert flag in BuilderFlag, f"not a BuilderFlag: {flag!r}"
            record("set_flag", flag.name)
            self._flags.add(flag.name)

        def add_optimization_profile(self, profile: Any) -> int:
            assert isinstance(profile, IOptimizationProfile)
            record("add_optimization_profile", dict(profile._shapes))
            if not profile._shapes and not profile._values:
                return -1
            self._profiles.append(profile)
            return len(self._profiles) - 1

        def create_timing_cache(self, serialized_timing_cache: Any) -> ITimingCache | None:
            blob = bytes(serialized_timing_cache)
            record("create_timing_cache", len(blob))
            if not blob:
                return ITimingCache(set(), trt.device_cc)
            if not blob.startswith(CACHE_MAGIC):
                return None
            data = json.loads(blob[len(CACHE_MAGIC):])
            return ITimingCache(set(data["entries"]), str(data["cc"]))

        def set_timing_cache(self, cache: Any, ignore_mismatch: bool) -> bool:
            assert isinstance(cache, ITimingCache) and isinstance(ignore_mismatch, bool)
            record("set_timing_cache", len(cache._entries), ignore_mismatch)
            if cache._cc != trt.device_cc and not ignore_mismatch:
                return False
            self._timing = cache
            return True

        def get_timing_cache(self) -> ITimingCache | None:
            return self._timing

    class Builder(Strict):
        def __init__(self, logger: Any) -> None:
            _register_logger(logger)
            self._logger = logger

        def create_network(self, flags: int = 0) -> INetworkDefinition:
            assert isinstance(flags, int), f"create_network(flags: int), got {flags!r}"
            record("create_network", flags)
            strongly = True if major >= 11 else bool(flags & (1 << int(NetworkDefinitionCreationFlag.STRONGLY_TYPED)))
            return INetworkDefinition(strongly)

        def create_builder_config(self) -> IBuilderConfig:
            return IBuilderConfig()

        def create_optimization_profile(self) -> IOptimizationProfile:
            return IOptimizationProfile()

        def build_serialized_network(self, network: Any, config: Any) -> HostMemory | None:
            assert isinstance(network, INetworkDefinition) and isinstance(config, IBuilderConfig)
            record("build_serialized_network")
            if network._strongly_typed and {"FP16", "INT8", "BF16"} & config._flags:
                _log(Logger.ERROR, "precision flags are not allowed on a strongly typed network")
                return None
            profile = config._profiles[0]._shapes if config._profiles else {}
            values = config._profiles[0]._values if config._profiles else {}
            for t in network._inputs:
                if t._shape_tensor:
                    if t.name not in values:
                        _log(Logger.ERROR, f"{t.name}: shape input values are not set in the optimization profile")
                        return None
                    continue
                if -1 in t.shape and t.name not in profile:
                    _log(Logger.ERROR, f"Network has dynamic input {t.name} but no optimization profile")
                    return None
                if t.name in profile:
                    for shape in profile[t.name]:
                        if len(shape) != len(t.shape) or any(d != -1 and d != s for d, s in zip(t.shape, shape)):
                            _log(Logger.ERROR, f"profile for {t.name} contradicts its static dims")
                            return None
            trt.builds += 1
            if config._timing is not None:
                config._timing._entries |= set(network._nodes)
            _log(Logger.WARNING, "fake builder: nothing was optimized")
            io = [(t, "INPUT") for t in network._inputs] + [(t, "OUTPUT") for t in network._outputs]
            plan = {"version": version, "cc": trt.device_cc, "strongly_typed": network._strongly_typed,
                    "version_compatible": "VERSION_COMPATIBLE" in config._flags,
                    "io": [[t.name, list(t.shape), t._dtype, mode, "HOST" if t._shape_tensor else "DEVICE",
                            trt.io_format] for t, mode in io],
                    "profile": {k: [list(s) for s in v] for k, v in profile.items()},
                    "values": {k: [list(s) for s in v] for k, v in values.items()},
                    "plugins": network._plugins, "verbosity": config._verbosity.name,
                    "layers": network._layer_names, "layer_types": network._layer_types, "onnx": network._path}
            return HostMemory(PLAN_MAGIC + json.dumps(plan).encode())

    class IProfiler:
        def __init__(self) -> None:
            pass

        def report_layer_time(self, layer_name: str, ms: float) -> None:
            raise NotImplementedError

    class IExecutionContext(Strict):
        """Runs the engine's ONNX with onnxruntime on the memory at the tensor addresses (the double's
        stand-in for GPU execution: host pointers instead of device pointers).

        What a real context keeps between calls is modelled where optcli's correctness depends on it:
        set_input_shape changes the shapes at once (output shapes follow), but the context's state is
        set up for them only by the next real enqueue; an enqueue captured into a CUDA graph records
        the shapes and addresses of that moment, and a replay runs exactly those, with the context's
        state as it is then. A replay after the context's shapes changed since the capture writes
        garbage (NaN, or the integer type's maximum): it would run kernels set up for other shapes."""

        _settable = ("profiler", "nvtx_verbosity")

        def __init__(self, engine: Any, user_memory: bool) -> None:
            self._engine = engine
            self._shapes = {e.name: tuple(e.shape) for e in engine._io if e.mode == "INPUT"}
            self._addresses: dict[str, int] = {}
            self._profiler: Any = None
            self._nvtx = getattr(ProfilingVerbosity, engine._plan["verbosity"])
            self._applied: dict[str, tuple] | None = None   # the shapes the last real enqueue set the state up for
            self._generation = 0                           # bumped by every shape change
            self._user_memory = user_memory
            self._memory: int | None = None

        @property
        def profiler(self) -> Any:
            return self._profiler

        @profiler.setter
        def profiler(self, value: Any) -> None:
            assert value is None or isinstance(value, IProfiler), "profiler must be a trt.IProfiler"
            self._profiler = value

        @property
        def nvtx_verbosity(self) -> Any:
            return self._nvtx

        @nvtx_verbosity.setter
        def nvtx_verbosity(self, value: Any) -> None:
            assert value in ProfilingVerbosity, f"not a ProfilingVerbosity: {value!r}"
            # pyCoreDoc.h: "the verbosity may not be raised above" the engine's (setNvtxVerbosity -> false).
            if _VERBOSITY_RANK[value.name] > _VERBOSITY_RANK[self._engine._plan["verbosity"]]:
                _log(Logger.ERROR,
                     f"NVTX verbosity {value.name} is above the engine's {self._engine._plan['verbosity']}")
                return
            record("nvtx_verbosity", value.name)
            self._nvtx = value

        def set_device_memory(self, memory: int, size: int) -> None:
            assert isinstance(memory, int) and isinstance(size, int), "set_device_memory(memory: int, size: int)"
            assert self._user_memory, "set_device_memory on a context TensorRT allocates for (STATIC strategy)"
            need = self._engine.get_device_memory_size_for_profile_v2(0)
            assert size >= need, f"set_device_memory: {size} bytes, the engine needs {need}"
            assert _is_device(memory) and _is_device(memory + size - 1), "set_device_memory takes device memory"
            record("set_device_memory", size)
            self._memory = memory

        def set_input_shape(self, name: str, shape: Any) -> bool:
            shape = tuple(shape)
            assert all(isinstance(d, int) for d in shape), f"set_input_shape takes ints, got {shape!r}"
            entry = self._engine._find(name)
            assert entry.mode == "INPUT", f"{name!r} is not an input"
            profile = self._engine._plan["profile"].get(name)
            if profile is None or len(shape) != len(entry.shape) or not all(
                    lo <= d <= hi for lo, d, hi in zip(profile[0], shape, profile[2])):
                return False
            record("set_input_shape", name, shape)
            if self._shapes[name] != shape:
                self._generation += 1
            self._shapes[name] = shape
            return True

        def _feeds(self, shapes: dict, addresses: dict, zeros: bool) -> dict[str, np.ndarray]:
            feeds = {}
            for e in self._engine._io:
                if e.mode != "INPUT":
                    continue
                if e.location == "HOST" or not zeros:  # shape tensors: TensorRT reads their values on the host
                    assert e.name in addresses, f"no address set for {e.name!r}"
                    feeds[e.name] = _view(addresses[e.name], shapes[e.name], e.dtype).copy()
                else:
                    feeds[e.name] = np.zeros(shapes[e.name], _NP[e.dtype])
            return feeds

        def _output_shapes(self) -> dict[str, tuple]:
            if any(-1 in s for s in self._shapes.values()):
                return {e.name: tuple(e.shape) for e in self._engine._io if e.mode == "OUTPUT"}
            sess = self._engine._session()
            outs = sess.run(None, self._feeds(self._shapes, self._addresses, zeros=True))
            return {e.name: tuple(v.shape) for e, v in zip([e for e in self._engine._io if e.mode == "OUTPUT"], outs)}

        def get_tensor_shape(self, name: str) -> tuple[int, ...]:
            entry = self._engine._find(name)
            if entry.mode == "INPUT":
                return self._shapes[name]
            return self._output_shapes()[name]

        def set_tensor_address(self, name: str, memory: int) -> bool:
            assert isinstance(memory, int) and memory > 0, f"set_tensor_address takes an int pointer, got {memory!r}"
            entry = self._engine._find(name)
            if entry.location == "HOST" and _is_device(memory):
                _log(Logger.ERROR, f"{name}: a HOST tensor (shape tensor) was given a device address")
                return False
            if entry.location == "DEVICE" and not _is_device(memory):
                _log(Logger.ERROR, f"{name}: a DEVICE tensor was given a host address")
                return False
            self._addresses[name] = memory
            return True

        def _claim_memory(self, stream_handle: int) -> bool:
            """Contexts may share device memory only when they never run in parallel (NvInferRuntime.h
            setDeviceMemoryV2); the double holds sharers to one stream, stricter than TensorRT."""
            if self._user_memory and self._memory is None:
                _log(Logger.ERROR, "USER_MANAGED execution context has no device memory: call set_device_memory")
                return False
            if self._memory is not None:
                other = scratch_users.get(self._memory)
                if other is not None and other[0] is not self and other[1] != stream_handle:
                    _log(Logger.ERROR, "device memory shared by execution contexts on different streams")
                    return False
                scratch_users[self._memory] = (self, stream_handle)
            return True

        def execute_async_v3(self, stream_handle: int) -> bool:
            assert isinstance(stream_handle, int), "execute_async_v3 takes the stream handle as an int"
            missing = [e.name for e in self._engine._io if e.name not in self._addresses]
            assert not missing, f"no address set for {missing}"
            if not self._claim_memory(stream_handle):
                return False
            if trt.capturing is not None:  # inside a (fake) CUDA graph capture: recorded, not run
                if self._profiler is not None:
                    _log(Logger.ERROR, "enqueue with a profiler attached cannot be captured in a CUDA graph "
                                       "(enqueue_emits_profile synchronizes the stream)")
                    return False
                if self._applied != self._shapes:
                    _log(Logger.ERROR, "the first enqueue after an input shape change cannot be captured: "
                                       "enqueue once before capturing")
                    return False
                trt.capturing.append(self._captured(stream_handle))
                return True
            record("execute_async_v3", stream_handle)
            self._applied = dict(self._shapes)
            self._compute(self._shapes, self._addresses)
            if self._profiler is not None:
                for layer in self._engine._plan["layers"]:
                    self._profiler.report_layer_time(layer, 0.01)
            return True

        def _captured(self, stream_handle: int) -> Any:
            shapes, addresses, generation = dict(self._shapes), dict(self._addresses), self._generation

            def replay() -> None:
                record("replay", stream_handle)
                if not self._claim_memory(stream_handle):
                    raise AssertionError("a replayed graph ran on device memory another stream uses")
                if self._generation != generation:   # kernels captured for `shapes`, state for others
                    record("stale_replay", stream_handle)
                    self._garbage(shapes, addresses)
                else:
                    self._compute(shapes, addresses)
            return replay

        def _outputs(self) -> list:
            return [e for e in self._engine._io if e.mode == "OUTPUT"]

        def _garbage(self, shapes: dict, addresses: dict) -> None:
            for e, shape in zip(self._outputs(), self._output_shapes_for(shapes, addresses).values()):
                view = _view(addresses[e.name], shape, e.dtype)
                view[...] = np.nan if np.issubdtype(view.dtype, np.floating) else np.iinfo(view.dtype).max

        def _output_shapes_for(self, shapes: dict, addresses: dict) -> dict[str, tuple]:
            outs = self._engine._session().run(None, self._feeds(shapes, addresses, zeros=True))
            return {e.name: tuple(v.shape) for e, v in zip(self._outputs(), outs)}

        def _compute(self, shapes: dict, addresses: dict) -> None:
            sess = self._engine._session()
            outs = sess.run(None, self._feeds(shapes, addresses, zeros=False))
            for e, value in zip(self._outputs(), outs):
                data = _encode(value, e.dtype)
                view = _view(addresses[e.name], value.shape, e.dtype)
                np.copyto(view, data.reshape(view.shape))

    def _view(address: int, shape: tuple, dtype: str) -> np.ndarray:
        """The memory at `address` as an array of `shape` (flat bytes for the packed 4-bit types)."""
        import ctypes

        numel = int(np.prod(shape, dtype=np.int64))
        if dtype in _PACKED:
            nbytes = (numel + 1) // 2
            shape = (nbytes,)
        else:
            nbytes = numel * np.dtype(_NP[dtype]).itemsize
        raw = (ctypes.c_char * max(nbytes, 1)).from_address(address)
        return np.frombuffer(raw, dtype=np.uint8)[:nbytes].view(_NP[dtype]).reshape(shape)

    class IEngineInspector(Strict):
        def __init__(self, engine: Any) -> None:
            self._engine = engine

        def get_layer_information(self, layer_index: int, format: Any) -> str:
            assert format in LayerInformationFormat and isinstance(layer_index, int)
            plan = self._engine._plan
            name = plan["layers"][layer_index]
            if plan["verbosity"] == "DETAILED":   # only then does the JSON carry the layer's type
                return json.dumps({"Name": name, "LayerType": plan["layer_types"][layer_index]})
            if plan["verbosity"] == "LAYER_NAMES_ONLY":
                return json.dumps(name)
            return ""

    class _IO:
        def __init__(self, name: str, shape: list, dtype: str, mode: str, location: str, fmt: str) -> None:
            self.name, self.shape, self.dtype, self.mode, self.location, self.format = \
                name, shape, dtype, mode, location, fmt

    class ICudaEngine(Strict):
        def __init__(self, plan: dict) -> None:
            self._plan = plan
            self._io = [_IO(*e) for e in plan["io"]]

        def _find(self, name: str) -> Any:
            for entry in self._io:
                if entry.name == name:
                    return entry
            raise AssertionError(f"no I/O tensor named {name!r}")

        def _session(self) -> Any:
            path = self._plan["onnx"]
            if path not in sessions:
                sessions[path] = _session(path)
            return sessions[path]

        @property
        def num_io_tensors(self) -> int:
            return len(self._io)

        @property
        def num_layers(self) -> int:
            return len(self._plan["layers"])

        @property
        def profiling_verbosity(self) -> Any:
            return getattr(ProfilingVerbosity, self._plan["verbosity"])

        def get_tensor_name(self, index: int) -> str:
            return self._io[index].name

        def get_tensor_mode(self, name: str) -> Any:
            return getattr(TensorIOMode, self._find(name).mode)

        def get_tensor_dtype(self, name: str) -> Any:
            return getattr(DataType, self._find(name).dtype)

        def get_tensor_shape(self, name: str) -> tuple[int, ...]:
            return tuple(self._find(name).shape)

        def get_tensor_location(self, name: str) -> Any:
            return getattr(TensorLocation, self._find(name).location)

        def is_shape_inference_io(self, name: str) -> bool:
            entry = self._find(name)
            return entry.mode == "INPUT" and entry.location == "HOST"

        def get_tensor_format(self, name: str) -> Any:
            return getattr(TensorFormat, self._find(name).format)

        def create_execution_context(self,
                                     strategy: Any = ExecutionContextAllocationStrategy.STATIC) -> IExecutionContext:
            assert strategy in ExecutionContextAllocationStrategy, \
                f"not an ExecutionContextAllocationStrategy: {strategy!r}"
            assert strategy != ExecutionContextAllocationStrategy.ON_PROFILE_CHANGE, "not modelled"
            record("create_execution_context", strategy.name)
            return IExecutionContext(self, strategy == ExecutionContextAllocationStrategy.USER_MANAGED)

        def get_device_memory_size_for_profile_v2(self, profile_index: int) -> int:
            assert isinstance(profile_index, int) and profile_index == 0, "optcli's engines have one profile"
            return 4096  # the double's activations live in onnxruntime; a real engine says how many bytes

        def create_engine_inspector(self) -> IEngineInspector:
            return IEngineInspector(self)

        def get_tensor_profile_shape(self, name: str, profile_index: int) -> list[tuple[int, ...]]:
            assert profile_index == 0 and name in self._plan["profile"], f"no profile for {name!r}"
            return [tuple(s) for s in self._plan["profile"][name]]

    class Runtime(Strict):
        _settable = ("engine_host_code_allowed",)

        def __init__(self, logger: Any) -> None:
            _register_logger(logger)
            self._logger = logger
            self._host_code = False

        @property
        def engine_host_code_allowed(self) -> bool:
            return self._host_code

        @engine_host_code_allowed.setter
        def engine_host_code_allowed(self, value: bool) -> None:
            assert isinstance(value, bool)
            self._host_code = value

        def deserialize_cuda_engine(self, serialized_engine: Any) -> ICudaEngine | None:
            data = bytes(serialized_engine)
            record("deserialize_cuda_engine", len(data))
            try:
                assert data.startswith(PLAN_MAGIC)
                plan = json.loads(data[len(PLAN_MAGIC):])
            except (AssertionError, ValueError):
                _log(Logger.ERROR, "Serialization assertion failed: magic tag does not match")
                return None
            if plan["version"] != version or plan["cc"] != trt.device_cc:
                _log(Logger.ERROR, "engine plan built for another TensorRT version or GPU")
                return None
            if plan["version_compatible"] and not self._host_code:
                _log(Logger.ERROR, "engine has host code; set engine_host_code_allowed")
                return None
            if plan["plugins"] and not trt.plugins_registered:
                _log(Logger.ERROR, f"getPluginCreator could not find plugin {plan['plugins'][0]} version 2")
                return None
            return ICudaEngine(plan)

    for name, value in dict(locals()).items():
        if name in ("ILogger", "Logger", "init_libnvinfer_plugins", "NetworkDefinitionCreationFlag", "BuilderFlag",
                    "MemoryPoolType", "HardwareCompatibilityLevel", "TensorIOMode", "DataType", "OnnxParser",
                    "Builder", "Runtime", "TensorLocation", "TensorFormat", "ProfilingVerbosity",
                    "LayerInformationFormat", "IProfiler", "ExecutionContextAllocationStrategy"):
            setattr(trt, name, value)

    def __getattr__(name: str) -> Any:
        raise AttributeError(f"TensorRT contract: tensorrt.{name} is not in the API slice the double models")

    trt.__getattr__ = __getattr__  # type: ignore[attr-defined]
    # For the surface test (tests/contract/tensorrt_api.py): every class and enum the double models.
    trt._classes = {"ILogger": ILogger, "Logger": Logger, "Builder": Builder,  # type: ignore[attr-defined]
                    "INetworkDefinition": INetworkDefinition, "ITensor": ITensor, "OnnxParser": OnnxParser,
                    "ParserError": ParserError, "IOptimizationProfile": IOptimizationProfile,
                    "IBuilderConfig": IBuilderConfig, "ITimingCache": ITimingCache, "IHostMemory": HostMemory,
                    "Runtime": Runtime, "ICudaEngine": ICudaEngine, "IExecutionContext": IExecutionContext,
                    "IEngineInspector": IEngineInspector, "IProfiler": IProfiler}
    return trt
