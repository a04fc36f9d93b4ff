"""OpenVINO: runs IRs (model.xml + model.bin) on the CPU; the CPU build converts ONNX to IRs and quantizes
them with NNCF."""
from optcli.backends.registry import Backend, RecordedOption

_HERE = "optcli.backends.openvino"

BACKEND = Backend(
    name="openvino",
    label="OpenVINO",
    formats=("openvino",),
    suffixes=(".xml",),
    companions=(".bin",),
    package="openvino",
    extra="openvino",
    runner=f"{_HERE}.runner:OpenVINORunner",
    cpu_recipes=(f"{_HERE}.recipes.convert:RECIPE", f"{_HERE}.recipes.convert_input:RECIPE",
                 f"{_HERE}.recipes.nncf:RECIPE", f"{_HERE}.recipes.nncf_transformer:RECIPE",
                 f"{_HERE}.recipes.requantize_s8s8:RECIPE"),
    cpu_precisions=("fp32", "bf16", "int8"),
    cpu_refusals=(("fp16", "OpenVINO's CPU plugin has no FP16 arithmetic (it computes FP16 models in FP32 or BF16)",
                   "use --bf16 with --backend openvino, or --fp16 with --backend onnxruntime"),),
    priors=f"{_HERE}.priors:PRIORS",
    cpu_facts=f"{_HERE}.plan_facts:plan_facts",
    machine_facts=f"{_HERE}.plan_facts:machine_facts",
    build_packages=("nncf",),
    heavy_builds=True,                  # ov.Model + NNCF's compiled copy: 3.9x a 2 GB model's size in memory
    triton_platform="openvino",
    triton=f"{_HERE}.triton:TRITON",
    # the precision the CPU build gated the IR at (runner.PRECISIONS' names)
    recorded_options=(RecordedOption("precision", choices=("fp32", "f32", "bf16", "fp16", "f16", "auto")),),
)
