"""Check a KServe v2 inference request against the served model before anything is allocated for it.

Why it exists: Triton 2.51's HTTP front end sizes a buffer from an input's declared `shape` before it
compares that shape with the model's, so one request declaring `[1, 1, 32, 2**40]` (a few bytes of
JSON) aborted the whole server (`std::bad_alloc`, exit -6). The check here needs only the request's
JSON header and the model's configuration as Triton reports it (`/v2/models/<name>/config`): names,
data types, rank, the fixed dims, the batch limit, and the bytes the shapes claim, against a bound.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, TypedDict

# Bytes per element of Triton's data types (BYTES/strings have no fixed size: optcli serves none).
_ITEM_BYTES = {"BOOL": 1, "UINT8": 1, "INT8": 1, "UINT16": 2, "INT16": 2, "FP16": 2, "BF16": 2, "UINT32": 4,
               "INT32": 4, "FP32": 4, "UINT64": 8, "INT64": 8, "FP64": 8}
# A default generous for any single request optcli's sample models take (a batch of 32 224x224 RGB
# images is 19 MiB) and far below what would hurt a server: `--max-request-mib` changes it.
DEFAULT_MAX_REQUEST_BYTES = 64 * 2**20


class TensorConfig(TypedDict, total=False):
    """One input of Triton's JSON model configuration (dims are strings there: int64 in protobuf JSON)."""

    name: str
    data_type: str             # TYPE_FP32, ...
    dims: list[str | int]


class TritonModelConfig(TypedDict, total=False):
    """Triton's /v2/models/<name>/config answer, the parts the check reads."""

    name: str
    max_batch_size: int
    input: list[TensorConfig]


@dataclass(frozen=True)
class ModelInput:
    name: str
    datatype: str              # KServe name: FP32, INT64, ...
    dims: tuple[int, ...]      # without the batch dim; -1 is dynamic


@dataclass(frozen=True)
class ModelShapes:
    """What a request is checked against: the served model's inputs as Triton's config has them."""

    name: str
    max_batch_size: int
    inputs: dict[str, ModelInput]
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES

    @classmethod
    def from_triton_config(cls, config: TritonModelConfig, max_request_bytes: int) -> ModelShapes:
        """From Triton's JSON model configuration (dims arrive as strings: int64 in protobuf JSON)."""
        inputs = {}
        for entry in config.get("input", []):
            dtype = str(entry.get("data_type", "")).removeprefix("TYPE_")
            inputs[entry["name"]] = ModelInput(entry["name"], dtype, tuple(int(d) for d in entry.get("dims", [])))
        return cls(str(config["name"]), int(config.get("max_batch_size", 0)), inputs, max_request_bytes)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_request_header(header: Any, model: ModelShapes) -> str | None:
    """Why a request's JSON header must be refused, or None. Only what Triton would otherwise act on
    before checking it: every input named must be the model's, with its data type, its rank, its
    fixed dims, a batch within max_batch_size, and all inputs together within the byte bound."""
    if not isinstance(header, dict):
        return "the request is not a JSON object"
    inputs = header.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        return "the request has no 'inputs' list"
    total = 0
    seen: set[str] = set()
    for item in inputs:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            return "every input needs a 'name'"
        name = item["name"]
        spec = model.inputs.get(name)
        if spec is None:
            return f"unexpected inference input {name!r} for model {model.name!r} (it takes " \
                   f"{', '.join(repr(n) for n in model.inputs)})"
        if name in seen:
            return f"input {name!r} is given twice"
        seen.add(name)
        if item.get("datatype") != spec.datatype:
            return f"input {name!r} has datatype {item.get('datatype')!r}, the model takes {spec.datatype!r}"
        shape = item.get("shape")
        if not isinstance(shape, list) or not all(_is_int(d) for d in shape):
            return f"input {name!r} needs a 'shape' of integers"
        expected = ([-1] if model.max_batch_size > 0 else []) + list(spec.dims)
        if len(shape) != len(expected) or any(d < 0 for d in shape) or any(
                want >= 0 and got != want for got, want in zip(shape, expected)):
            return (f"unexpected shape for input {name!r} for model {model.name!r}: expected "
                    f"{_dims_text(expected)}, got {_dims_text(shape)}")
        if model.max_batch_size > 0 and not 1 <= shape[0] <= model.max_batch_size:
            return f"input {name!r} has batch {shape[0]}; the model takes 1 to {model.max_batch_size}"
        total += math.prod(shape) * _ITEM_BYTES.get(spec.datatype, 8)  # Python ints: no wrap-around
        if total > model.max_request_bytes:
            return (f"the request's inputs would take {total} bytes, over this server's bound of "
                    f"{model.max_request_bytes} (--max-request-mib)")
    return None


def request_header(body: bytes, header_length: str | None) -> tuple[Any, str | None]:
    """The JSON header of an inference request body (the whole body, or its first
    Inference-Header-Content-Length bytes with binary tensors after it), or why it cannot be read."""
    part = body
    if header_length is not None:
        try:
            n = int(header_length)
        except ValueError:
            return None, "Inference-Header-Content-Length is not a number"
        if not 0 <= n <= len(body):
            return None, "Inference-Header-Content-Length is larger than the body"
        part = body[:n]
    try:
        # The values of `data` are not needed, only the shapes: floats parse to one shared object, so a
        # large JSON tensor costs a pointer per element here, not a float object.
        return json.loads(part, parse_float=_any_float, parse_constant=_any_float), None
    except RecursionError:  # Triton's JSON parser recurses too: refuse deep nesting before it sees it
        return None, "the request's JSON is nested too deeply"
    except (UnicodeDecodeError, ValueError) as exc:
        return None, f"the request is not valid JSON ({exc})"


def _any_float(_: str) -> float:
    return 0.0


def _dims_text(dims: list[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"
