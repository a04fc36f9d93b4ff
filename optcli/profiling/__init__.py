"""Per-layer profiles: onnxruntime's profiler on the CPU, TensorRT's layer profiler on a GPU."""
