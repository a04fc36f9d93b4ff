"""TensorRT: builds serialized engines from ONNX on an NVIDIA GPU (the build-tensorrt stage) and runs them."""
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
    gpu_recipes=(f"{_HERE}.builder:obtain_engine",),
    profiler=f"{_HERE}.profile:profile_engine",
    triton_platform="tensorrt_plan",
    triton=f"{_HERE}.triton:TRITON",
)
