"""OpenVINO's rows of the CPU search's priors (optcli/search/priors.py): how its candidates (the converted IR,
the IR of the Q/DQ graph, NNCF default and transformer, re-quantized s8/s8) rank against the predicted winner,
per precision, model kind, size and INT8 instruction set, with the evidence. Data: the search reads every
backend's rows through its descriptor (`priors`)."""
from __future__ import annotations

from optcli.search.priors import AVX2, Prior
from optcli.search.priors import CPU_TABLES as CPU
from optcli.search.priors import THIS_MACHINE as HERE

CONVERT, CONVERT_INPUT = "openvino:convert", "openvino:convert-input"
NNCF, NNCF_TRANSFORMER, S8S8 = "openvino:nncf", "openvino:nncf-transformer", "openvino:requantize-s8s8"

PRIORS: tuple[Prior, ...] = (
    # FP32: OpenVINO's CPU plugin beat onnxruntime by 3-25% on every model but the smallest CNN.
    Prior("fp32", CONVERT, 1.0, 0.10, f"{CPU}: OpenVINO FP32 0.80-0.97x onnxruntime's latency on tiny_bert, "
          "ResNet-50, BERT-base, MiniLM"),
    Prior("fp32", CONVERT, 1.5, 0.15, f"{CPU}: digits_cnn OpenVINO FP32 1.55x onnxruntime's latency",
          kind="conv", size="small"),
    # INT8, transformer encoders: NNCF's transformer setting is the one within tolerance on a pretrained
    # encoder and ties the others on speed; the others lose accuracy there.
    Prior("int8", NNCF_TRANSFORMER, 1.0, 0.05, f"{CPU}: the choice on MiniLM (the only one within cosine 0.99) "
          "and BERT-base (tie with NNCF default and s8/s8, most accurate)", kind="encoder"),
    Prior("int8", NNCF, 0.97, 0.02, f"{CPU}: BERT-base 34.4 vs 35.5 ms, MiniLM 8.80 vs 9.04 ms (within the tie "
          "band, where the more accurate wins) and cosine 0.64 on MiniLM", kind="encoder", less_accurate=True),
    Prior("int8", S8S8, 0.98, 0.02, f"{CPU}: BERT-base 37.0-40.3 vs 38.9 ms (tie), cosine 0.9981 vs 0.9997; "
          "MiniLM cosine 0.85", kind="encoder", less_accurate=True),
    Prior("int8", NNCF_TRANSFORMER, 1.0, 0.05, f"{HERE}: MiniLM 112.4 ms, the choice (cosine 0.9959); BERT-base "
          "502 ms", kind="encoder", int8_isa="plain", measured_on=AVX2),
    Prior("int8", NNCF, 1.03, 0.05, f"{HERE}: MiniLM 116.2 vs 112.4 ms, cosine 0.63; BERT-base 511 vs 502 ms",
          kind="encoder", int8_isa="plain", less_accurate=True, measured_on=AVX2),
    Prior("int8", S8S8, 1.07, 0.05, f"{HERE}: MiniLM 119.9 vs 112.4 ms, cosine 0.83; BERT-base 533 vs 502 ms",
          kind="encoder", int8_isa="plain", less_accurate=True, measured_on=AVX2),
    # ...but on a tiny encoder NNCF's defaults were 9% faster than its transformer setting.
    Prior("int8", NNCF, 1.0, 0.05, f"{CPU}: tiny_bert NNCF default 0.611 ms vs transformer 0.668 ms, same "
          "cosine", kind="encoder", size="small"),
    Prior("int8", NNCF_TRANSFORMER, 1.09, 0.05, f"{CPU}: tiny_bert 0.668 vs 0.611 ms", kind="encoder", size="small"),
    Prior("int8", NNCF, 1.3, 0.10, f"{CPU}: digits_cnn 1.16-1.7x onnxruntime Q/DQ's latency, cosine 0.99943 vs "
          "0.99966", kind="conv", size="small", less_accurate=True),
    Prior("int8", CONVERT_INPUT, 1.5, 0.15, f"{CPU}: digits_cnn OpenVINO of the Q/DQ graph, like NNCF's 1.16-1.7x",
          kind="conv", size="small"),
    Prior("int8", S8S8, 1.5, 0.15, f"{CPU}: digits_cnn, like NNCF's 1.16-1.7x", kind="conv", size="small"),
    Prior("int8", CONVERT_INPUT, 1.5, 0.15, f"{HERE}: digits_cnn OpenVINO of the Q/DQ graph 1.41-1.76x "
          "onnxruntime's", kind="conv", size="small", int8_isa="plain",
          measured_on=AVX2),
    Prior("int8", NNCF, 1.5, 0.15, f"{HERE}: digits_cnn NNCF 1.33-2.5x onnxruntime Q/DQ's", kind="conv", size="small",
          int8_isa="plain", measured_on=AVX2),
    Prior("int8", S8S8, 1.6, 0.15, f"{HERE}: digits_cnn s8/s8 Q/DQ IR 1.57-2.4x onnxruntime Q/DQ's, cosine 0.9939 "
          "vs 0.9995", kind="conv", size="small", int8_isa="plain", less_accurate=True, measured_on=AVX2),
    Prior("int8", NNCF, 1.0, 0.05, f"{CPU}: ResNet-50 NNCF default 12.1 ms, the choice", kind="conv", size="large"),
    Prior("int8", S8S8, 1.05, 0.15, f"{CPU}: ResNet-50 s8/s8 Q/DQ 0.86x and 1.12x NNCF's latency in two runs",
          kind="conv", size="large"),
    Prior("int8", S8S8, 1.10, 0.05, f"{CPU}, compile time (VNNI): ResNet-50 s8/s8 Q/DQ 1.106x and 1.10x NNCF's "
          "latency (fast and thorough search, one run each)", kind="conv", size="large", int8_isa="vnni"),
    Prior("int8", CONVERT_INPUT, 1.08, 0.05, f"{CPU}: ResNet-50 OpenVINO u8/s8 Q/DQ 1.07-1.09x NNCF's",
          kind="conv", size="large"),
)
