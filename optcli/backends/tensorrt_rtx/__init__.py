"""TensorRT-RTX: NVIDIA's TensorRT for RTX GPUs (GeForce RTX and RTX workstation cards, compute 8.0+
by default). Its builder runs on any machine, without a GPU: `--target tensorrt-rtx` builds the engine
ahead of time here and runs it only where an RTX GPU is (elsewhere its latency is "not measured").

Everything but what differs is shared with optcli/backends/tensorrt: the engine build (engine_build.py), the
builder (the module is an argument), profiles, the engine cache and metadata, the runner. Modules here:
target (is the builder installed and working: probed in a child process; is there an RTX GPU to run
on), files (telling its engines from full TensorRT's: both are model.engine), runner.
"""
from optcli.backends.registry import Backend

_HERE = "optcli.backends.tensorrt_rtx"

BACKEND = Backend(
    name="tensorrt-rtx",
    label="TensorRT-RTX",
    formats=("rtx-engine",),
    suffixes=(".engine", ".plan", ".trt"),
    format_of=f"{_HERE}.files:format_of",   # an engine whose metadata says TensorRT-RTX built it
    folder_files=("model.engine",),         # an engine cache entry
    package="tensorrt_rtx_bindings",
    extra="tensorrt-rtx",
    runner=f"{_HERE}.runner:TensorRTRTXRunner",
    device_option="optcli.backends.tensorrt.runner:device_index",
    target="tensorrt-rtx",
    target_check=f"{_HERE}.target:check_target",
    engine_build="optcli.backends.tensorrt.engine_build:EngineBuild",
    toolkit="optcli.backends.tensorrt.toolkit:TENSORRT_RTX",
    # what the ONNX stages prepare for its parser (registry.GraphNeeds): plain ONNX ops, s8/s8 Q/DQ,
    # no unpad unless asked, static dims but the batch (its profiles range over the batch only)
    takes_contrib_ops=False,
    int8_flavours=("qdq-s8s8",),
    unpad_default=False,
    dynamic_sequence=False,
    graph_check="optcli.backends.tensorrt.graph_check:require_clean",
    int8_fp16_setting="optcli.backends.tensorrt.options:int8_fp16",
    runs_here=f"{_HERE}.target:runtime_problem",
)
