"""AOTInductor: torch's ahead-of-time compiler. The CPU build compiles the user's PyTorch program (no ONNX
in between) into a package (.pt2 holding a shared library) with freezing on, FP32 or INT8 through PT2E
(torchao's X86InductorQuantizer); the runner opens it with torch._inductor's package loader."""
from optcli.backends.registry import Backend

_HERE = "optcli.backends.inductor"

BACKEND = Backend(
    name="inductor",
    label="AOTInductor",
    formats=("aoti",),
    suffixes=(".pt2",),                 # shared with torch.export archives: format_of tells them apart
    format_of=f"{_HERE}.files:format_of",
    package="torch",
    extra="inductor",                   # torchao, for INT8 (PT2E)
    runner=f"{_HERE}.runner:InductorRunner",
    cpu_recipes=(f"{_HERE}.recipes.compile:RECIPE",),
    cpu_precisions=("fp32", "int8"),
    cpu_refusals=(("bf16", "--backend inductor builds FP32 or INT8 (no BF16 recipe)",
                   "use --backend openvino (or auto) for --bf16"),
                  ("fp16", "--backend inductor builds FP32 or INT8 (CPUs have no FP16 arithmetic)",
                   "use --backend onnxruntime for --fp16, or drop --fp16")),
    cpu_facts=f"{_HERE}.plan_facts:plan_facts",
    profiler=f"{_HERE}.profile:profile_package",
)
