"""Every TensorRT Python method, attribute and enum member optcli calls, with its signature and the
TensorRT versions that have it: the contract the double (fake_tensorrt.py) is held to.

Source of each row: NVIDIA/TensorRT python/src/ bindings (infer/pyCore.cpp, infer/pyGraph.cpp,
infer/pyFoundationalTypes.cpp, infer/pyPlugin.cpp, parsers/pyOnnx.cpp). `check_bindings.py` in this
folder greps every row's name in those files at release/10.0, 10.3, 10.8, 10.9, 11.0, 11.1 and main
(run it against a TensorRT checkout; its last result is in docs/tensorrt.md). Versions: `since`
inclusive, `until` exclusive (None: still there in 11.1).

test_tensorrt_api_table.py fails when the double's surface drifts from this table (a member the
double has that the table lacks, or the reverse) for 10.3, 10.8, 10.13 and 11.1, and when optcli's
code names a `trt.` attribute the table does not list.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    owner: str          # "tensorrt" (the module), a class name, or an enum name
    name: str
    kind: str           # function | class | method | property | enum | member | constant
    signature: str
    source: str         # the bindings file that defines it
    since: str = "10.0"
    until: str | None = None


CORE, GRAPH, TYPES, PLUGIN, ONNX = "pyCore.cpp", "pyGraph.cpp", "pyFoundationalTypes.cpp", "pyPlugin.cpp", "pyOnnx.cpp"


def _enum(owner: str, source: str, members: dict[str, tuple[str, str | None]]) -> list[Row]:
    return [Row("tensorrt", owner, "enum", f"class {owner}", source)] + [
        Row(owner, name, "member", f"{owner}.{name}", source, since, until) for name, (since, until) in members.items()]


ALWAYS = ("10.0", None)

TABLE: list[Row] = [
    Row("tensorrt", "__version__", "constant", "__version__: str", "tensorrt/__init__.py"),
    Row("tensorrt", "init_libnvinfer_plugins", "function",
        "init_libnvinfer_plugins(logger: ILogger, namespace: str) -> bool", PLUGIN),
    # loggers
    Row("tensorrt", "ILogger", "class", "class ILogger: __init__(); log(severity, msg)", CORE),
    Row("ILogger", "log", "method", "log(severity: ILogger.Severity, msg: str) -> None", CORE),
    Row("tensorrt", "Logger", "class", "class Logger(ILogger): __init__(min_severity=Logger.WARNING)", CORE),
    Row("Logger", "log", "method", "log(severity, msg) -> None", CORE),
    *[Row("Logger", s, "member", f"Logger.{s} (ILogger.Severity, exported)", CORE)
      for s in ("INTERNAL_ERROR", "ERROR", "WARNING", "INFO", "VERBOSE")],
    # building
    Row("tensorrt", "Builder", "class", "Builder(logger: ILogger)", CORE),
    Row("Builder", "create_network", "method", "create_network(flags: int = 0) -> INetworkDefinition", CORE),
    Row("Builder", "create_builder_config", "method", "create_builder_config() -> IBuilderConfig", CORE),
    Row("Builder", "create_optimization_profile", "method",
        "create_optimization_profile() -> IOptimizationProfile", CORE),
    Row("Builder", "build_serialized_network", "method",
        "build_serialized_network(network, config) -> IHostMemory | None", CORE),
    Row("INetworkDefinition", "num_inputs", "property", "num_inputs: int", GRAPH),
    Row("INetworkDefinition", "num_outputs", "property", "num_outputs: int", GRAPH),
    Row("INetworkDefinition", "get_input", "method", "get_input(index: int) -> ITensor", GRAPH),
    Row("INetworkDefinition", "get_output", "method", "get_output(index: int) -> ITensor", GRAPH),
    Row("ITensor", "name", "property", "name: str", GRAPH),
    Row("ITensor", "shape", "property", "shape: Dims", GRAPH),
    Row("ITensor", "dtype", "property", "dtype: DataType (read-only)", GRAPH),
    Row("ITensor", "is_shape_tensor", "property", "is_shape_tensor: bool (read-only)", GRAPH),
    Row("tensorrt", "OnnxParser", "class", "OnnxParser(network: INetworkDefinition, logger: ILogger)", ONNX),
    Row("OnnxParser", "parse_from_file", "method", "parse_from_file(model: str) -> bool", ONNX),
    Row("OnnxParser", "num_errors", "property", "num_errors: int", ONNX),
    Row("OnnxParser", "get_error", "method", "get_error(index: int) -> ParserError", ONNX),
    Row("ParserError", "desc", "method", "desc() -> str", ONNX),
    Row("ParserError", "node", "method", "node() -> int", ONNX),
    Row("ParserError", "node_name", "method", "node_name() -> str", ONNX),
    Row("ParserError", "node_operator", "method", "node_operator() -> str", ONNX),
    Row("IOptimizationProfile", "set_shape", "method", "set_shape(input: str, min: Dims, opt: Dims, max: Dims)", CORE),
    Row("IOptimizationProfile", "set_shape_input", "method",
        "set_shape_input(input: str, min: list[int], opt: list[int], max: list[int])", CORE),
    Row("IBuilderConfig", "set_memory_pool_limit", "method",
        "set_memory_pool_limit(pool: MemoryPoolType, pool_size: int)", CORE),
    Row("IBuilderConfig", "builder_optimization_level", "property", "builder_optimization_level: int (0-5)", CORE),
    Row("IBuilderConfig", "hardware_compatibility_level", "property",
        "hardware_compatibility_level: HardwareCompatibilityLevel", CORE),
    Row("IBuilderConfig", "profiling_verbosity", "property", "profiling_verbosity: ProfilingVerbosity", CORE),
    Row("IBuilderConfig", "set_flag", "method", "set_flag(flag: BuilderFlag)", CORE),
    Row("IBuilderConfig", "add_optimization_profile", "method", "add_optimization_profile(profile) -> int", CORE),
    Row("IBuilderConfig", "create_timing_cache", "method",
        "create_timing_cache(serialized_timing_cache: buffer) -> ITimingCache", CORE),
    Row("IBuilderConfig", "set_timing_cache", "method",
        "set_timing_cache(cache: ITimingCache, ignore_mismatch: bool) -> bool", CORE),
    Row("IBuilderConfig", "get_timing_cache", "method", "get_timing_cache() -> ITimingCache", CORE),
    Row("ITimingCache", "serialize", "method", "serialize() -> IHostMemory", CORE),
    Row("ITimingCache", "combine", "method", "combine(input_cache: ITimingCache, ignore_mismatch: bool) -> bool", CORE),
    Row("IHostMemory", "nbytes", "property", "nbytes: int (and the buffer protocol)", TYPES),
    # running
    Row("tensorrt", "Runtime", "class", "Runtime(logger: ILogger)", CORE),
    Row("Runtime", "engine_host_code_allowed", "property", "engine_host_code_allowed: bool", CORE),
    Row("Runtime", "deserialize_cuda_engine", "method",
        "deserialize_cuda_engine(serialized_engine: buffer) -> ICudaEngine | None", CORE),
    Row("ICudaEngine", "num_io_tensors", "property", "num_io_tensors: int", CORE),
    Row("ICudaEngine", "num_layers", "property", "num_layers: int", CORE),
    Row("ICudaEngine", "profiling_verbosity", "property", "profiling_verbosity: ProfilingVerbosity (read-only)", CORE),
    Row("ICudaEngine", "get_tensor_name", "method", "get_tensor_name(index: int) -> str", CORE),
    Row("ICudaEngine", "get_tensor_mode", "method", "get_tensor_mode(name: str) -> TensorIOMode", CORE),
    Row("ICudaEngine", "get_tensor_dtype", "method", "get_tensor_dtype(name: str) -> DataType", CORE),
    Row("ICudaEngine", "get_tensor_shape", "method", "get_tensor_shape(name: str) -> Dims", CORE),
    Row("ICudaEngine", "get_tensor_location", "method", "get_tensor_location(name: str) -> TensorLocation", CORE),
    Row("ICudaEngine", "is_shape_inference_io", "method", "is_shape_inference_io(name: str) -> bool", CORE),
    Row("ICudaEngine", "get_tensor_format", "method",
        "get_tensor_format(name: str[, profile_index: int]) -> TensorFormat", CORE),
    Row("ICudaEngine", "get_tensor_profile_shape", "method",
        "get_tensor_profile_shape(name: str, profile_index: int) -> [min, opt, max]", CORE),
    Row("ICudaEngine", "create_execution_context", "method",
        "create_execution_context(strategy: ExecutionContextAllocationStrategy = STATIC) -> IExecutionContext", CORE),
    # 10.0 has only the V1 forms (get_device_memory_size_for_profile, the device_memory property); 11.0 dropped them.
    Row("ICudaEngine", "get_device_memory_size_for_profile_v2", "method",
        "get_device_memory_size_for_profile_v2(profile_index: int) -> int", CORE, since="10.1"),
    Row("ICudaEngine", "create_engine_inspector", "method", "create_engine_inspector() -> IEngineInspector", CORE),
    Row("IExecutionContext", "profiler", "property", "profiler: IProfiler (settable; kept alive by the context)", CORE),
    Row("IExecutionContext", "set_device_memory", "method",
        "set_device_memory(memory: int, size: int) (256-byte aligned; USER_MANAGED contexts)", CORE, since="10.1"),
    Row("IExecutionContext", "nvtx_verbosity", "property",
        "nvtx_verbosity: ProfilingVerbosity (default and ceiling: the engine's profiling verbosity)", CORE),
    Row("IExecutionContext", "set_input_shape", "method",
        "set_input_shape(name: str, shape: Dims | tuple | list) -> bool", CORE),
    Row("IExecutionContext", "get_tensor_shape", "method", "get_tensor_shape(name: str) -> Dims", CORE),
    Row("IExecutionContext", "set_tensor_address", "method",
        "set_tensor_address(name: str, memory: int) -> bool", CORE),
    Row("IExecutionContext", "execute_async_v3", "method",
        "execute_async_v3(stream_handle: int) -> bool (releases the GIL)", CORE),
    Row("IEngineInspector", "get_layer_information", "method",
        "get_layer_information(layer_index: int, format: LayerInformationFormat) -> str", CORE),
    Row("tensorrt", "IProfiler", "class", "class IProfiler: __init__(); report_layer_time(layer_name, ms)", CORE),
    Row("IProfiler", "report_layer_time", "method", "report_layer_time(layer_name: str, ms: float) -> None", CORE),
    # enums
    # Values differ by release (NvInfer.h): 10.x EXPLICIT_BATCH=0 (deprecated), STRONGLY_TYPED=1,
    # from 10.9 PREFER_JIT/AOT_PYTHON_PLUGINS=2/3; 11.x STRONGLY_TYPED=0 (deprecated), JIT=1, AOT=2.
    *_enum("NetworkDefinitionCreationFlag", CORE, {"EXPLICIT_BATCH": ("10.0", "11.0"), "STRONGLY_TYPED": ALWAYS,
                                                   "PREFER_JIT_PYTHON_PLUGINS": ("10.9", None),
                                                   "PREFER_AOT_PYTHON_PLUGINS": ("10.9", None)}),
    *_enum("BuilderFlag", CORE, {"FP16": ("10.0", "11.0"), "INT8": ("10.0", "11.0"), "BF16": ("10.0", "11.0"),
                                 "OBEY_PRECISION_CONSTRAINTS": ("10.0", "11.0"), "DEBUG": ALWAYS,
                                 "GPU_FALLBACK": ALWAYS, "REFIT": ALWAYS, "DISABLE_TIMING_CACHE": ALWAYS,
                                 "TF32": ALWAYS, "VERSION_COMPATIBLE": ALWAYS, "EXCLUDE_LEAN_RUNTIME": ALWAYS}),
    *_enum("MemoryPoolType", CORE, {m: ALWAYS for m in ("WORKSPACE", "DLA_MANAGED_SRAM", "DLA_LOCAL_DRAM",
                                                          "DLA_GLOBAL_DRAM", "TACTIC_DRAM", "TACTIC_SHARED_MEMORY")}),
    *_enum("HardwareCompatibilityLevel", CORE, {"NONE": ALWAYS, "AMPERE_PLUS": ALWAYS,
                                                "SAME_COMPUTE_CAPABILITY": ("10.9", None)}),
    *_enum("TensorIOMode", CORE, {"NONE": ALWAYS, "INPUT": ALWAYS, "OUTPUT": ALWAYS}),
    *_enum("DataType", TYPES, {"FLOAT": ALWAYS, "HALF": ALWAYS, "INT8": ALWAYS, "INT32": ALWAYS, "BOOL": ALWAYS,
                               "UINT8": ALWAYS, "FP8": ALWAYS, "BF16": ALWAYS, "INT64": ALWAYS, "INT4": ALWAYS,
                               "FP4": ("10.8", None), "E8M0": ("11.0", None)}),
    *_enum("TensorLocation", CORE, {"DEVICE": ALWAYS, "HOST": ALWAYS}),
    *_enum("TensorFormat", GRAPH, {m: ALWAYS for m in ("LINEAR", "CHW2", "HWC8", "CHW4", "CHW16", "CHW32", "DHWC8",
                                                        "CDHW32", "HWC", "DLA_LINEAR", "DLA_HWC4", "HWC16", "DHWC")}),
    *_enum("ProfilingVerbosity", CORE, {"LAYER_NAMES_ONLY": ALWAYS, "NONE": ALWAYS, "DETAILED": ALWAYS}),
    *_enum("LayerInformationFormat", CORE, {"ONELINE": ALWAYS, "JSON": ALWAYS}),
    *_enum("ExecutionContextAllocationStrategy", CORE, {"STATIC": ALWAYS, "ON_PROFILE_CHANGE": ALWAYS,
                                                        "USER_MANAGED": ALWAYS}),
]


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split(".")[:2])


def rows_for(version: str) -> list[Row]:
    """The rows a TensorRT `version` has."""
    v = _version(version)
    return [r for r in TABLE if _version(r.since) <= v and (r.until is None or v < _version(r.until))]
