"""TensorRT support: probing the machine, optimization profiles, building and caching engines.

Nothing here imports tensorrt or torch at module level: the build functions take the `tensorrt`
module as an argument (so contract tests can pass a test double of exactly the API slice used),
and the probe runs TensorRT in a child process, because a builder created without a usable GPU
can abort the whole process instead of raising.

Modules: options (TensorRTConfig, the `[tensorrt]` config section), probe (GPU + TensorRT
detection), profiles (optimization profiles from input specs), metadata (model.engine.json),
engine_cache (the on-disk engine cache), builder (ONNX -> serialized engine, timing cache),
onnx_support (TensorRT's ONNX parser support matrix, as data) and preflight (the checks
`optcli check --target tensorrt` and the stages run on any machine).
"""
