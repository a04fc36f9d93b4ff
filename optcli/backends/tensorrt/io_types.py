"""How an engine's I/O dtypes are held in torch buffers and handed to numpy.

TensorRT's DataType names map to torch dtype names in metadata.py. Three cases:
- numpy has the dtype (float32, float16, int8, ...): the buffer's own numpy view is copied out;
- torch holds it but numpy does not (bfloat16, float8_e4m3fn, float8_e8m0fnu): numpy gets float32,
  which holds every value of these types exactly (torch's .numpy() raises TypeError on them);
- 4-bit types (FP4 E2M1, INT4) have no unpacked torch dtype: the buffer is bytes, two elements per
  byte, and outputs are unpacked to float32 (FP4) or int8 (INT4), on the buffer's device.

The nibble order (element 0 in the low 4 bits) is ONNX's for FLOAT4E2M1 and INT4, which TensorRT's
ONNX parser imports as is; it has not been checked against a TensorRT FP4 output on a GPU.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

PACKED = ("float4_e2m1", "int4")      # metadata.dtype_name of the 4-bit types
# E2M1 codes 0..15: sign bit 3, exponent bits 2-1, mantissa bit 0 (OCP MX spec; TensorRT DataType.FP4).
_FP4 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def is_packed(dtype: str) -> bool:
    return dtype in PACKED


def storage_dtype(torch: Any, dtype: str) -> Any:
    """The torch dtype of the buffer that holds `dtype`, or None when torch cannot hold it."""
    return torch.uint8 if is_packed(dtype) else getattr(torch, dtype, None)


def storage_numel(dtype: str, numel: int) -> int:
    """Buffer elements for `numel` values: half as many bytes, rounded up, for 4-bit types."""
    return math.ceil(numel / 2) if is_packed(dtype) else numel


def unpack(torch: Any, packed: Any, dtype: str, numel: int) -> Any:
    """`numel` 4-bit values from a flat uint8 tensor: float32 for FP4, int8 for INT4 (same device)."""
    low, high = packed & 0x0F, packed >> 4
    codes = torch.stack((low, high), dim=1).reshape(-1)[:numel].long()
    if dtype == "int4":
        return (codes - 16 * (codes >= 8).long()).to(torch.int8)
    table = torch.tensor(_FP4, dtype=torch.float32, device=packed.device)
    return table[codes]


def readable(torch: Any, flat: Any, dtype: str, shape: tuple[int, ...]) -> Any:
    """The first prod(shape) values of a flat buffer as a tensor of `shape` that numpy can take,
    or keep as torch: 4-bit types unpacked, everything else a view."""
    numel = math.prod(shape) if shape else 1
    if is_packed(dtype):
        return unpack(torch, flat[:storage_numel(dtype, numel)], dtype, numel).view(shape)
    return flat[:numel].view(shape)


def to_numpy(torch: Any, host: Any) -> np.ndarray:
    """A numpy copy of a host tensor; dtypes numpy lacks (bfloat16, float8_*) come back as float32."""
    if host.dtype == torch.bfloat16 or str(host.dtype).startswith("torch.float8"):
        return host.float().numpy()
    return host.numpy().copy()
