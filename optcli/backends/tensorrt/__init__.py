"""TensorRT: builds serialized engines from ONNX on an NVIDIA GPU and runs them (engine_build.py: the build
stage's work for --target tensorrt and tensorrt-rtx).

Nothing here imports tensorrt or torch at module level: the build functions take the `tensorrt`
module as an argument (so contract tests can pass a test double of exactly the API slice used),
and the probe runs TensorRT in a child process, because a builder created without a usable GPU
can abort the whole process instead of raising.

Modules: options (TensorRTConfig, the `[tensorrt]` config section), probe (GPU + TensorRT
detection), profiles (optimization profiles from input specs), metadata (model.engine.json),
engine_cache (the on-disk engine cache), builder (ONNX -> serialized engine, timing cache),
onnx_support (TensorRT's ONNX parser support matrix, as data), preflight (the checks
the stages run on any machine), parser_check and graph_check (`optcli check --target tensorrt`: the real
parser where installed, else the matrix), toolkit (full TensorRT or TensorRT-RTX: the builder code here
serves both; optcli/backends/tensorrt_rtx is the other target), target (--target tensorrt's check),
runner (runs an engine), profile (per-layer times), engine_metadata and triton (serving an engine on Triton).
"""
from optcli.backends.registry import Backend

_HERE = "optcli.backends.tensorrt"

BACKEND = Backend(
    name="tensorrt",
    label="TensorRT",
    formats=("engine",),
    suffixes=(".engine", ".plan", ".trt"),
    folder_files=("model.engine",),     # a TensorRT engine cache entry
    package="tensorrt",
    extra="tensorrt",
    runner=f"{_HERE}.runner:TensorRTRunner",
    device_option=f"{_HERE}.runner:device_index",
    engine_build=f"{_HERE}.engine_build:EngineBuild",
    target="tensorrt",
    target_check=f"{_HERE}.target:check_target",
    toolkit=f"{_HERE}.toolkit:TENSORRT",
    build_needs_device=True,
    # what the ONNX stages prepare for its parser (registry.GraphNeeds): plain ONNX ops, s8/s8 Q/DQ,
    # no unpad unless asked, static dims but the batch (its profiles range over the batch only)
    takes_contrib_ops=False,
    int8_flavours=("qdq-s8s8",),
    unpad_default=False,
    dynamic_sequence=False,
    graph_check=f"{_HERE}.graph_check:require_clean",
    int8_fp16_setting=f"{_HERE}.options:int8_fp16",
    profiler=f"{_HERE}.profile:profile_engine",
    triton_platform="tensorrt_plan",
    triton=f"{_HERE}.triton:TRITON",
)
