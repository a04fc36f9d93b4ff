"""ONNX Runtime's rows of the CPU search's priors (optcli/search/priors.py): how its candidate (the input ONNX as
it is) ranks against the predicted winner, per precision, model kind, size and INT8 instruction set, with the
evidence. Data: the search reads every backend's rows through its descriptor (`priors`)."""
from __future__ import annotations

from optcli.search.priors import AVX2, Prior
from optcli.search.priors import CPU_TABLES as CPU
from optcli.search.priors import THIS_MACHINE as HERE

INPUT = "onnxruntime:input"

PRIORS: tuple[Prior, ...] = (
    Prior("fp32", INPUT, 1.10, 0.10, f"{CPU}: onnxruntime FP32 1.03-1.25x OpenVINO's on the same models"),
    Prior("fp32", INPUT, 1.0, 0.10, f"{CPU}: digits_cnn onnxruntime 0.105 ms vs OpenVINO 0.163 ms",
          kind="conv", size="small"),
    Prior("int8", INPUT, 1.35, 0.10, "docs ENVIRONMENT: BERT-base onnxruntime dynamic INT8 5.7x eager vs "
          "OpenVINO+NNCF 7.6x", kind="encoder"),
    # Without VNNI (this project's AVX2 EPYC): onnxruntime's dynamic INT8 (after its fallback) ties NNCF
    # on the pretrained MiniLM, a little less accurate; NNCF default and s8/s8 lose accuracy as with VNNI.
    Prior("int8", INPUT, 0.9, 0.10, f"{HERE}: onnxruntime dynamic INT8 vs NNCF transformer: MiniLM 105.7 vs "
          "112.4 ms (a tie), cosine 0.9901 only after an 87 s fallback vs 0.9959; BERT-base 420 vs 502 ms, "
          "cosine 0.99957 vs 0.99902 (random weights)", kind="encoder", int8_isa="plain", less_accurate=True,
          measured_on=AVX2),
    # On small encoders per-call overhead dominates and onnxruntime's dynamic INT8 was the fastest (VNNI).
    Prior("int8", INPUT, 0.6, 0.2, f"{CPU}: thorough search on tiny_bert (1.4 MB): onnxruntime dynamic INT8 0.280 "
          "ms vs NNCF 0.394 ms; the zoo's ALBERT (0.34 MB): 0.082 vs 0.186 ms", kind="encoder", size="small"),
    # INT8 CNNs: onnxruntime's Q/DQ wins on a small CNN, NNCF on ResNet-50.
    Prior("int8", INPUT, 1.0, 0.10, f"{CPU}: digits_cnn onnxruntime Q/DQ 0.087 ms vs NNCF 0.101 ms "
          "(1.16x, 1.7x in a second run)", kind="conv", size="small"),
    # Without VNNI (7-bit u8s8 weights for onnxruntime), measured on this project's AVX2 machine.
    Prior("int8", INPUT, 1.0, 0.10, f"{HERE}: digits_cnn onnxruntime Q/DQ 0.183-0.256 ms, the fastest "
          "in two runs", kind="conv", size="small", int8_isa="plain",
          measured_on=AVX2),
    Prior("int8", INPUT, 3.0, 0.3, "docs ENVIRONMENT: ResNet-50 onnxruntime static INT8 1.5x eager vs NNCF 7.0x",
          kind="conv", size="large"),
)
