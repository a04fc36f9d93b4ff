"""ONNX Runtime: runs ONNX on the CPU (and CUDA with onnxruntime-gpu); the CPU build's baseline candidate."""
from optcli.backends.registry import Backend, RecordedOption

_HERE = "optcli.backends.onnxruntime"

BACKEND = Backend(
    name="onnxruntime",
    label="ONNX Runtime",
    formats=("onnx",),
    suffixes=(".onnx",),
    package="onnxruntime",
    extra="cpu",
    runner=f"{_HERE}.runner:OnnxRuntimeRunner",
    takes_optimization=True,
    cpu_recipes=(f"{_HERE}.recipes.input:RECIPE",),
    priors=f"{_HERE}.priors:PRIORS",
    cpu_precisions=("fp32", "fp16", "int8"),
    cpu_refusals=(("bf16", "onnxruntime has no BF16 path on the CPU",
                   "use --backend openvino (or auto) for --bf16, or drop --bf16"),),
    profiler=f"{_HERE}.profile:profile_onnx",
    triton_platform="onnxruntime_onnx",
    triton=f"{_HERE}.triton:TRITON",
    # the FP16 stage records the optimizer that crashes ORT on FP16 graphs (NchwcTransformer)
    recorded_options=(RecordedOption("disabled_optimizers", max_names=16),),
)
