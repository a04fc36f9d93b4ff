"""Quantization on the ONNX graph: FP16 casts and INT8 Q/DQ, shared by the quantize stages."""
