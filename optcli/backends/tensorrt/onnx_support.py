"""TensorRT's ONNX parser support matrix, as data: op -> (supported, types, restrictions).

Transcribed row by row from onnx/onnx-tensorrt docs/operators.md at 96e7811 ("ONNX-TensorRT 10.1 GA
release", the newest published matrix: later 10.x parsers document no removals). Regenerate from that
file rather than editing by hand; optcli.backends.tensorrt.preflight applies it.
"""
from __future__ import annotations

SOURCE = "onnx/onnx-tensorrt docs/operators.md @ 96e7811 (TensorRT 10.1 GA)"
# The parser itself refuses no opset: below 7 it warns that the graph "is not guaranteed to work"
# (onnx-tensorrt ModelImporter.cpp; TensorRT-RTX 1.7.1 parsed a Relu at opsets 6..26 here). The upper
# end is the newest opset the installed major documents: 10.x's matrix says 9..20, 11.x reaches 25, and
# TensorRT-RTX 1.7 imports the opset-23/24 ops below. Where nothing is installed the newest applies: a
# false refusal blocks a build that works, a false pass only defers the error to the parser.
OPSET_FLOOR = 7
OPSET_CEILINGS = {"tensorrt-10": 20, "tensorrt-11": 25, "tensorrt-rtx-1": 25}
NEWEST_OPSET = 25
# Ops the 10.1 matrix lacks or marks N that newer parsers import: TensorRT-RTX 1.7.1's
# OnnxParser.supports_operator said yes to each (measured), and the review (issue 29, F3) lists
# Attention, RMSNormalization, RotaryEmbedding and Swish for 11.x. TensorRT 10.x refuses them.
NEWER_OPS: dict[str, tuple[str, ...]] = {
    op: ("FP32", "FP16", "BF16") for op in ("Attention", "RMSNormalization", "RotaryEmbedding", "Swish", "STFT",
                                            "BlackmanWindow", "HammingWindow", "HannWindow", "TensorScatter")}
# "INT8, INT4, and FP8 are treated as Quantized Types ... only through quantization" (operators.md, notes).
QUANTIZED_TYPES = ("INT8", "FP8", "INT4")

OPS: dict[str, tuple[bool, tuple[str, ...], str]] = {
    'Abs': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), ''),
    'Acos': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Acosh': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Add': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), ''),
    'AffineGrid': (False, (), ''),
    'And': (True, ('BOOL',), ''),
    'ArgMax': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), ''),
    'ArgMin': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), ''),
    'Asin': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Asinh': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Atan': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Atanh': (True, ('FP32', 'FP16', 'BF16'), ''),
    'AveragePool': (True, ('FP32', 'FP16', 'BF16'), '2D or 3D Pooling only. dilations must be empty or all ones'),
    'BatchNormalization': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Bernoulli': (False, (), ''),
    'BitShift': (False, (), ''),
    'BitwiseAnd': (False, (), ''),
    'BitwiseNot': (False, (), ''),
    'BitwiseOr': (False, (), ''),
    'BitwiseXor': (False, (), ''),
    'BlackmanWindow': (False, (), ''),
    'Cast': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64', 'UINT8', 'BOOL'), ''),
    'CastLike': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64', 'UINT8', 'BOOL'), ''),
    'Ceil': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Col2Im': (False, (), ''),
    'Celu': (True, ('FP32', 'FP16', 'BF16'), ''),
    'CenterCropPad': (False, (), ''),
    'Clip': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Compress': (False, (), ''),
    'Concat': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64', 'BOOL'), ''),
    'ConcatFromSequence': (False, (), ''),
    'Constant': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64', 'BOOL'), ''),
    'ConstantOfShape': (True, ('FP32',), ''),
    'Conv': (True, ('FP32', 'FP16', 'BF16'), ''),
    'ConvInteger': (False, (), ''),
    'ConvTranspose': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Cos': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Cosh': (True, ('FP32', 'FP16', 'BF16'), ''),
    # INT32/INT64 measured: TensorRT-RTX 1.7.1 parsed RoBERTa's CumSum over its INT64 mask (not in 10.1's table).
    'CumSum': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), 'axis must be an initializer'),
    'DFT': (False, (), ''),
    'DepthToSpace': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), ''),
    'DequantizeLinear': (True, ('INT8', 'FP8', 'INT4'), 'x_zero_point must be zero'),
    'Det': (False, (), ''),
    'Div': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), ''),
    'Dropout': (True, ('FP32', 'FP16', 'BF16'), ''),
    'DynamicQuantizeLinear': (False, (), ''),
    'Einsum': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Elu': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Equal': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), ''),
    'Erf': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Exp': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Expand': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64', 'BOOL'), ''),
    'EyeLike': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64', 'BOOL'), ''),
    'Flatten': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64', 'BOOL'), ''),
    'Floor': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Gather': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64', 'BOOL'), ''),
    'GatherElements': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64', 'BOOL'), ''),
    'GatherND': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64', 'BOOL'), ''),
    'Gelu': (True, ('FP32', 'FP16', 'BF16', 'INT8', 'INT32', 'INT64'), ''),
    'Gemm': (True, ('FP32', 'FP16', 'BF16'), ''),
    'GlobalAveragePool': (True, ('FP32', 'FP16', 'BF16'), ''),
    'GlobalLpPool': (True, ('FP32', 'FP16', 'BF16'), ''),
    'GlobalMaxPool': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Greater': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), ''),
    'GreaterOrEqual': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), ''),
    'GridSample': (True, ('FP32', 'FP16'), ''),
    'GroupNormalization': (True, ('FP32', 'FP16', 'BF16'), ''),
    'GRU': (True, ('FP32', 'FP16', 'BF16'),
            'For bidirectional GRUs, activation functions must be the same for both the forward and reverse pass'),
    'HammingWindow': (False, (), ''),
    'HannWindow': (False, (), ''),
    'HardSigmoid': (True, ('FP32', 'FP16', 'BF16'), ''),
    'HardSwish': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Hardmax': (True, ('FP32', 'FP16', 'BF16'), 'axis dimension of input must be a build-time constant'),
    'Identity': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64', 'BOOL'), ''),
    'If': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64', 'BOOL'),
           'Output tensors of the two conditional branches must have broadcastable shapes, '
           'and must have different names'),
    'ImageScaler': (True, ('FP32', 'FP16', 'BF16'), ''),
    'ImageDecoder': (False, (), ''),
    'InstanceNormalization': (True, ('FP32', 'FP16', 'BF16'), ''),
    'IsInf': (True, ('FP32', 'FP16', 'BF16'), ''),
    'IsNaN': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), ''),
    'LayerNormalization': (True, ('FP32', 'FP16', 'BF16'), ''),
    'LeakyRelu': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Less': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), ''),
    'LessOrEqual': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), ''),
    'Log': (True, ('FP32', 'FP16', 'BF16'), ''),
    'LogSoftmax': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Loop': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64', 'BOOL'), ''),
    'LRN': (True, ('FP32', 'FP16', 'BF16'), ''),
    'LSTM': (True, ('FP32', 'FP16', 'BF16'),
             'For bidirectional LSTMs, activation functions must be the same for both the forward and reverse pass'),
    'LpNormalization': (True, ('FP32', 'FP16', 'BF16'), ''),
    'LpPool': (True, ('FP32', 'FP16', 'BF16'), 'dilations must be empty or all ones'),
    'MatMul': (True, ('FP32', 'FP16', 'BF16'), ''),
    'MatMulInteger': (False, (), ''),
    'Max': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), ''),
    'MaxPool': (True, ('FP32', 'FP16', 'BF16'),
                '2D or 3D pooling only. Indices output tensor unsupported. dilations must be empty or all ones'),
    'MaxRoiPool': (False, (), ''),
    'MaxUnpool': (False, (), ''),
    'Mean': (True, ('FP32', 'FP16', 'BF16', 'FP8', 'INT32', 'INT64'), ''),
    'MeanVarianceNormalization': (True, ('FP32', 'FP16', 'BF16'), ''),
    'MelWeightMatrix': (False, (), ''),
    'Min': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), ''),
    'Mish': (True, ('FP32', 'FP16'), ''),
    'Mod': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), ''),
    'Mul': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), ''),
    'Multinomial': (False, (), ''),
    'Neg': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), ''),
    'NegativeLogLikelihoodLoss': (False, (), ''),
    'NonMaxSuppression': (True, ('FP32', 'FP16'), ''),
    'NonZero': (True, ('FP32', 'FP16'), ''),
    'Not': (True, ('BOOL',), ''),
    'OneHot': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64', 'BOOL'), 'depth must be a build-time constant'),
    'Optional': (False, (), ''),
    'OptionalGetElement': (False, (), ''),
    'OptionalHasElement': (False, (), ''),
    'Or': (True, ('BOOL',), ''),
    'Pad': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), 'axes must be an initializer'),
    'ParametricSoftplus': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Pow': (True, ('FP32', 'FP16', 'BF16'), ''),
    'PRelu': (True, ('FP32', 'FP16', 'BF16'), ''),
    'QLinearConv': (False, (), ''),
    'QLinearMatMul': (False, (), ''),
    'QuantizeLinear': (True, ('FP32', 'FP16', 'BF16'), 'y_zero_point must be 0'),
    'RandomNormal': (True, ('FP32', 'FP16', 'BF16'), 'seed value is ignored by TensorRT'),
    'RandomNormalLike': (True, ('FP32', 'FP16', 'BF16'), 'seed value is ignored by TensorRT'),
    'RandomUniform': (True, ('FP32', 'FP16', 'BF16'), 'seed value is ignored by TensorRT'),
    'RandomUniformLike': (True, ('FP32', 'FP16', 'BF16'), 'seed value is ignored by TensorRT'),
    'Range': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), ''),
    'Reciprocal': (True, ('FP32', 'FP16', 'BF16'), ''),
    'ReduceL1': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), 'axes must be an initializer'),
    'ReduceL2': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), 'axes must be an initializer'),
    'ReduceLogSum': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), 'axes must be an initializer'),
    'ReduceLogSumExp': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), 'axes must be an initializer'),
    'ReduceMax': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), 'axes must be an initializer'),
    'ReduceMean': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), 'axes must be an initializer'),
    'ReduceMin': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), 'axes must be an initializer'),
    'ReduceProd': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), 'axes must be an initializer'),
    'ReduceSum': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), 'axes must be an initializer'),
    'ReduceSumSquare': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), 'axes must be an initializer'),
    'RegexFullMatch': (False, (), ''),
    'Relu': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), ''),
    'Reshape': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64', 'BOOL'), ''),
    'Resize': (True, ('FP32', 'FP16', 'BF16'),
               'Supported resize transformation modes: half_pixel, pytorch_half_pixel, tf_half_pixel_for_nn, '
               'asymmetric, and align_corners. Supported resize modes: nearest, linear. Supported nearest modes: '
               'floor, ceil, round_prefer_floor, round_prefer_ceil. Supported aspect ratio policy: stretch. '
               'When scales is a tensor input, axes must be an iota vector of length rank(input). '
               'Antialiasing is not supported.'),
    'ReverseSequence': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64', 'BOOL'), ''),
    'RNN': (True, ('FP32', 'FP16', 'BF16'),
            'For bidirectional RNNs, activation functions must be the same for both the forward and reverse pass'),
    'RoiAlign': (True, ('FP32', 'FP16'), ''),
    'Round': (True, ('FP32', 'FP16', 'BF16'), ''),
    'STFT': (False, (), ''),
    'ScaledTanh': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Scan': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Scatter': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), ''),
    'ScatterElements': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), ''),
    'ScatterND': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), 'reduction is not supported'),
    'Selu': (True, ('FP32', 'FP16', 'BF16'), ''),
    'SequenceAt': (False, (), ''),
    'SequenceConstruct': (False, (), ''),
    'SequenceEmpty': (False, (), ''),
    'SequenceErase': (False, (), ''),
    'SequenceInsert': (False, (), ''),
    'SequenceLength': (False, (), ''),
    'SequenceMap': (False, (), ''),
    'Shape': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64', 'BOOL'), ''),
    'Shrink': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), ''),
    'Sigmoid': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Sign': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), ''),
    'Sin': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Sinh': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Size': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64', 'BOOL'), ''),
    'Slice': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64', 'BOOL'), 'axes must be an initializer'),
    'Softmax': (True, ('FP32', 'FP16', 'BF16'), ''),
    'SoftmaxCrossEntropyLoss': (False, (), ''),
    'Softplus': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Softsign': (True, ('FP32', 'FP16', 'BF16'), ''),
    'SpaceToDepth': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), ''),
    'Split': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64', 'BOOL'), ''),
    'SplitToSequence': (False, (), ''),
    'Sqrt': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Squeeze': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64', 'BOOL'), 'axes must be an initializer'),
    'StringConcat': (False, (), ''),
    'StringNormalizer': (False, (), ''),
    'StringSplit': (False, (), ''),
    'Sub': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), ''),
    'Sum': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), ''),
    'Tan': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Tanh': (True, ('FP32', 'FP16', 'BF16'), ''),
    'TfIdfVectorizer': (False, (), ''),
    'ThresholdedRelu': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Tile': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64', 'BOOL'), ''),
    'TopK': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64'), ''),
    'Transpose': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64', 'BOOL'), ''),
    'Trilu': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64', 'BOOL'), ''),
    'Unique': (False, (), ''),
    'Unsqueeze': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64', 'BOOL'), 'axes must be a constant tensor'),
    'Upsample': (True, ('FP32', 'FP16', 'BF16'), ''),
    'Where': (True, ('FP32', 'FP16', 'BF16', 'INT32', 'INT64', 'BOOL'), ''),
    'Xor': (True, ('BOOL',), ''),
}

# Documented Y for TensorRT, but TensorRT-RTX imports them through a plugin it does not ship: its 1.7.1
# parser refused NonZero with "NonZero plugin creator ... not found" (measured here).
RTX_REFUSED = {"NonZero": "TensorRT-RTX imports NonZero through a plugin it does not ship"}


def opset_window(toolkit: str | None = None, version: str | None = None) -> tuple[int, int]:
    """(lowest, highest) default-domain opset for the installed toolkit ("tensorrt" or "tensorrt-rtx" and
    its version); the newest known window where none is installed."""
    if toolkit and version:
        key = f"{toolkit}-{str(version).split('.')[0]}"
        return OPSET_FLOOR, OPSET_CEILINGS.get(key, NEWEST_OPSET)
    return OPSET_FLOOR, NEWEST_OPSET


def supports_newer_ops(toolkit: str | None = None, version: str | None = None) -> bool:
    """Whether NEWER_OPS import: TensorRT 11.x and TensorRT-RTX, or the newest where nothing is installed."""
    return not (toolkit == "tensorrt" and version and str(version).split(".")[0] == "10")
