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
"""
from __future__ import annotations

import json
import types
from typing import Any

import numpy as np
import onnx

PLAN_MAGIC = b"FAKEPLAN"
CACHE_MAGIC = b"FAKETC"
KNOWN_OPS = {"Relu", "MatMul", "Add", "Mul", "Gemm", "Conv", "Cast", "Sigmoid", "Softmax", "Flatten",
             "QuantizeLinear", "DequantizeLinear", "Identity", "Reshape", "Transpose"}
_NP = {"FLOAT": np.float32, "HALF": np.float16, "INT8": np.int8, "INT32": np.int32, "INT64": np.int64,
       "BOOL": np.bool_, "UINT8": np.uint8}
_ELEM = {1: "FLOAT", 10: "HALF", 16: "BF16", 3: "INT8", 6: "INT32", 7: "INT64", 9: "BOOL", 2: "UINT8"}


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


def make_tensorrt(version: str = "10.8.0.43", compute_capability: str = "8.9") -> types.ModuleType:
    """A fresh `tensorrt` double; `trt.calls` records (what, args) of the calls that matter to tests."""
    major, minor = (int(p) for p in version.split(".")[:2])
    trt = types.ModuleType("tensorrt")
    trt.__version__ = version
    trt.calls = []          # type: ignore[attr-defined]
    trt.builds = 0          # type: ignore[attr-defined]
    trt.device_cc = compute_capability  # type: ignore[attr-defined]
    trt.capturing = None    # type: ignore[attr-defined]  # a list while a fake CUDA graph captures

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

    def init_libnvinfer_plugins(logger: Any, namespace: str) -> bool:
        _check_logger(logger)
        assert isinstance(namespace, str)
        record("init_libnvinfer_plugins", namespace)
        return True

    flags = {"STRONGLY_TYPED": 0, "PREFER_JIT_PYTHON_PLUGINS": 1, "PREFER_AOT_PYTHON_PLUGINS": 2}
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
    DataType = Enum("DataType", {"FLOAT": 0, "HALF": 1, "INT8": 2, "INT32": 3, "BOOL": 4, "UINT8": 5,
                                 "FP8": 6, "BF16": 7, "INT64": 8})

    class ITensor(Strict):
        def __init__(self, name: str, shape: tuple[int, ...], dtype: str) -> None:
            self._name, self._shape, self._dtype = name, shape, dtype

        @property
        def name(self) -> str:
            return self._name

        @property
        def shape(self) -> tuple[int, ...]:
            return self._shape

    class INetworkDefinition(Strict):
        def __init__(self, strongly_typed: bool) -> None:
            self._strongly_typed = strongly_typed
            self._inputs: list[ITensor] = []
            self._outputs: list[ITensor] = []
            self._nodes = 0
            self._path = ""

        @property
        def num_inputs(self) -> int:
            return len(self._inputs)

        def get_input(self, index: int) -> ITensor:
            assert isinstance(index, int) and 0 <= index < len(self._inputs), f"bad input index {index}"
            return self._inputs[index]

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
            inits = {i.name for i in m.graph.initializer}

            def tensor(vi: Any) -> ITensor:
                dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in vi.type.tensor_type.shape.dim)
                return ITensor(vi.name, dims, _ELEM.get(vi.type.tensor_type.elem_type, "FLOAT"))

            for i, node in enumerate(m.graph.node):
                if node.domain not in ("", "ai.onnx") or node.op_type not in KNOWN_OPS:
                    self._errors.append(ParserError(i, node.name, node.op_type,
                                                    f"No importer registered for op: {node.op_type}"))
            self._network._inputs = [tensor(v) for v in m.graph.input if v.name not in inits]
            self._network._outputs = [tensor(v) for v in m.graph.output]
            self._network._nodes = len(m.graph.node)
            self._network._path = model
            return not self._errors

    class IOptimizationProfile(Strict):
        def __init__(self) -> None:
            self._shapes: dict[str, tuple] = {}

        def set_shape(self, input: str, min: Any, opt: Any, max: Any) -> None:
            for shape in (min, opt, max):
                assert isinstance(shape, (tuple, list)) and all(isinstance(d, int) for d in shape), \
                    f"set_shape takes int sequences, got {shape!r}"
            assert len(min) == len(opt) == len(max), "min/opt/max of one rank"
            assert all(a <= b <= c for a, b, c in zip(min, opt, max)), "min <= opt <= max"
            record("set_shape", input, tuple(min), tuple(opt), tuple(max))
            self._shapes[input] = (tuple(min), tuple(opt), tuple(max))

    class ITimingCache(Strict):
        def __init__(self, entries: int, cc: str) -> None:
            self._entries, self._cc = entries, cc

        def serialize(self) -> HostMemory:
            return HostMemory(CACHE_MAGIC + json.dumps({"entries": self._entries, "cc": self._cc}).encode())

    class IBuilderConfig(Strict):
        _settable = ("builder_optimization_level", "hardware_compatibility_level")

        def __init__(self) -> None:
            self._profiles: list[IOptimizationProfile] = []
            self._flags: set = set()
            self._pools: dict = {}
            self._timing: ITimingCache | None = None
            self._opt_level = 3
            self._hw = HardwareCompatibilityLevel.NONE

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
            if not profile._shapes:
                return -1
            self._profiles.append(profile)
            return len(self._profiles) - 1

        def create_timing_cache(self, serialized_timing_cache: Any) -> ITimingCache | None:
            blob = bytes(serialized_timing_cache)
            record("create_timing_cache", len(blob))
            if not blob:
                return ITimingCache(0, trt.device_cc)
            if not blob.startswith(CACHE_MAGIC):
                return None
            data = json.loads(blob[len(CACHE_MAGIC):])
            return ITimingCache(int(data["entries"]), str(data["cc"]))

        def set_timing_cache(self, cache: Any, ignore_mismatch: bool) -> bool:
            assert isinstance(cache, ITimingCache) and isinstance(ignore_mismatch, bool)
            record("set_timing_cache", cache._entries, ignore_mismatch)
            if cache._cc != trt.device_cc and not ignore_mismatch:
                return False
            self._timing = cache
            return True

        def get_timing_cache(self) -> ITimingCache | None:
            return self._timing

    class Builder(Strict):
        def __init__(self, logger: Any) -> None:
            _check_logger(logger)
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
                self._logger.log(Logger.ERROR, "precision flags are not allowed on a strongly typed network")
                return None
            profile = config._profiles[0]._shapes if config._profiles else {}
            for t in network._inputs:
                if -1 in t.shape and t.name not in profile:
                    self._logger.log(Logger.ERROR, f"Network has dynamic input {t.name} but no optimization profile")
                    return None
                if t.name in profile:
                    for shape in profile[t.name]:
                        if len(shape) != len(t.shape) or any(d != -1 and d != s for d, s in zip(t.shape, shape)):
                            self._logger.log(Logger.ERROR, f"profile for {t.name} contradicts its static dims")
                            return None
            trt.builds += 1
            if config._timing is not None:
                config._timing._entries += network._nodes
            self._logger.log(Logger.WARNING, "fake builder: nothing was optimized")
            plan = {"version": version, "cc": trt.device_cc, "strongly_typed": network._strongly_typed,
                    "version_compatible": "VERSION_COMPATIBLE" in config._flags,
                    "inputs": [[t.name, list(t.shape), t._dtype] for t in network._inputs],
                    "outputs": [[t.name, list(t.shape), t._dtype] for t in network._outputs],
                    "profile": {k: [list(s) for s in v] for k, v in profile.items()}, "onnx": network._path}
            return HostMemory(PLAN_MAGIC + json.dumps(plan).encode())


    class IExecutionContext(Strict):
        """Runs the engine's ONNX with onnxruntime on the memory at the tensor addresses (the double's
        stand-in for GPU execution: host pointers instead of device pointers)."""

        def __init__(self, engine: Any) -> None:
            self._engine = engine
            self._shapes = {n: tuple(s) for n, s, _, mode in engine._io if mode == TensorIOMode.INPUT}
            self._addresses: dict[str, int] = {}

        def set_input_shape(self, name: str, shape: Any) -> bool:
            shape = tuple(shape)
            assert all(isinstance(d, int) for d in shape), f"set_input_shape takes ints, got {shape!r}"
            entry = self._engine._find(name)
            assert entry[3] == TensorIOMode.INPUT, f"{name!r} is not an input"
            profile = self._engine._plan["profile"].get(name)
            if profile is None or len(shape) != len(entry[1]) or not all(
                    lo <= d <= hi for lo, d, hi in zip(profile[0], shape, profile[2])):
                return False
            record("set_input_shape", name, shape)
            self._shapes[name] = shape
            return True

        def _output_shapes(self) -> dict[str, tuple]:
            import onnxruntime as ort

            if any(-1 in s for s in self._shapes.values()):
                return {n: tuple(s) for n, s, _, mode in self._engine._io if mode == TensorIOMode.OUTPUT}
            sess = ort.InferenceSession(self._engine._plan["onnx"], providers=["CPUExecutionProvider"])
            feeds = {n: np.zeros(s, _NP[d]) for n, s, d, mode in self._engine._io if mode == TensorIOMode.INPUT
                     for s in [self._shapes[n]]}
            return {o.name: tuple(v.shape) for o, v in zip(sess.get_outputs(), sess.run(None, feeds))}

        def get_tensor_shape(self, name: str) -> tuple[int, ...]:
            entry = self._engine._find(name)
            if entry[3] == TensorIOMode.INPUT:
                return self._shapes[name]
            return self._output_shapes()[name]

        def set_tensor_address(self, name: str, memory: int) -> bool:
            assert isinstance(memory, int) and memory > 0, f"set_tensor_address takes an int pointer, got {memory!r}"
            self._engine._find(name)
            self._addresses[name] = memory
            return True

        def execute_async_v3(self, stream_handle: int) -> bool:
            assert isinstance(stream_handle, int), "execute_async_v3 takes the stream handle as an int"
            missing = [n for n, *_ in self._engine._io if n not in self._addresses]
            assert not missing, f"no address set for {missing}"
            if trt.capturing is not None:  # inside a (fake) CUDA graph capture: recorded, not run
                trt.capturing.append(lambda: self._compute())
                return True
            record("execute_async_v3", stream_handle)
            self._compute()
            return True

        def _compute(self) -> None:
            import ctypes

            import onnxruntime as ort

            def view(name: str, shape: tuple, dtype: str) -> np.ndarray:
                nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(_NP[dtype]).itemsize
                raw = (ctypes.c_char * max(nbytes, 1)).from_address(self._addresses[name])
                return np.frombuffer(raw, dtype=np.uint8)[:nbytes].view(_NP[dtype]).reshape(shape)

            feeds = {n: view(n, self._shapes[n], d).copy() for n, s, d, mode in self._engine._io
                     if mode == TensorIOMode.INPUT}
            sess = ort.InferenceSession(self._engine._plan["onnx"], providers=["CPUExecutionProvider"])
            outs = sess.run(None, feeds)
            for o, value in zip(sess.get_outputs(), outs):
                dtype = self._engine._find(o.name)[2]
                np.copyto(view(o.name, value.shape, dtype), value)

    class ICudaEngine(Strict):
        def __init__(self, plan: dict) -> None:
            self._plan = plan
            self._io = [(n, s, d, TensorIOMode.INPUT) for n, s, d in plan["inputs"]] + \
                       [(n, s, d, TensorIOMode.OUTPUT) for n, s, d in plan["outputs"]]

        def _find(self, name: str) -> tuple:
            for entry in self._io:
                if entry[0] == name:
                    return entry
            raise AssertionError(f"no I/O tensor named {name!r}")

        @property
        def num_io_tensors(self) -> int:
            return len(self._io)

        def get_tensor_name(self, index: int) -> str:
            return self._io[index][0]

        def get_tensor_mode(self, name: str) -> Any:
            return self._find(name)[3]

        def get_tensor_dtype(self, name: str) -> Any:
            return getattr(DataType, self._find(name)[2])

        def get_tensor_shape(self, name: str) -> tuple[int, ...]:
            return tuple(self._find(name)[1])

        def create_execution_context(self) -> IExecutionContext:
            return IExecutionContext(self)

        def get_tensor_profile_shape(self, name: str, profile_index: int) -> list[tuple[int, ...]]:
            assert profile_index == 0 and name in self._plan["profile"], f"no profile for {name!r}"
            return [tuple(s) for s in self._plan["profile"][name]]

    class Runtime(Strict):
        _settable = ("engine_host_code_allowed",)

        def __init__(self, logger: Any) -> None:
            _check_logger(logger)
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
                self._logger.log(Logger.ERROR, "Serialization assertion failed: magic tag does not match")
                return None
            if plan["version"] != version or plan["cc"] != trt.device_cc:
                self._logger.log(Logger.ERROR, "engine plan built for another TensorRT version or GPU")
                return None
            if plan["version_compatible"] and not self._host_code:
                self._logger.log(Logger.ERROR, "engine has host code; set engine_host_code_allowed")
                return None
            return ICudaEngine(plan)

    for name, value in dict(locals()).items():
        if name in ("ILogger", "Logger", "init_libnvinfer_plugins", "NetworkDefinitionCreationFlag", "BuilderFlag",
                    "MemoryPoolType", "HardwareCompatibilityLevel", "TensorIOMode", "DataType", "OnnxParser",
                    "Builder", "Runtime"):
            setattr(trt, name, value)

    def __getattr__(name: str) -> Any:
        raise AttributeError(f"TensorRT contract: tensorrt.{name} is not in the API slice the double models")

    trt.__getattr__ = __getattr__  # type: ignore[attr-defined]
    return trt
