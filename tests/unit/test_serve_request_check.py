"""The check `optcli serve` makes on every HTTP inference request before Triton sees it (issue 30,
item 2): Triton 2.51 sizes a buffer from the declared shape first, and `[1, 1, 32, 2**40]` aborted it.
The class: any shape, datatype, name or nesting a client can send; only a request that matches the
model and fits the byte bound passes. (tests/integration/test_serve_hostile.py sends them to the real
server.)"""
from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from optcli.serve.request_check import ModelShapes, check_request_header, request_header

CONFIG = {"name": "digits_cnn", "max_batch_size": 16,
          "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": ["1", "32", "32"]},
                    {"name": "ids", "data_type": "TYPE_INT64", "dims": ["-1"]}]}
BOUND = 2**20
MODEL = ModelShapes.from_triton_config(CONFIG, BOUND)


def _request(*inputs: dict) -> dict:
    return {"inputs": list(inputs)}


def _x(shape: list, datatype: str = "FP32", name: str = "x") -> dict:
    return {"name": name, "shape": shape, "datatype": datatype, "data": [0.0]}


def test_a_matching_request_passes() -> None:
    assert check_request_header(_request(_x([4, 1, 32, 32]), _x([4, 100], "INT64", "ids")), MODEL) is None


def test_the_request_that_aborted_triton_is_refused() -> None:
    problem = check_request_header(_request(_x([1, 1, 32, 2**40])), MODEL)
    assert problem == ("unexpected shape for input 'x' for model 'digits_cnn': "
                       "expected [-1,1,32,32], got [1,1,32,1099511627776]")


def test_refusals_name_what_is_wrong() -> None:
    cases = {
        "expected [-1,-1], got [1,-3]": _request(_x([1, -3], "INT64", "ids")),
        "has batch 17; the model takes 1 to 16": _request(_x([17, 1, 32, 32])),
        "has batch 0": _request(_x([0, 1, 32, 32])),
        "datatype 'FP64', the model takes 'FP32'": _request(_x([1, 1, 32, 32], "FP64")),
        "unexpected inference input 'y'": _request(_x([1, 1, 32, 32], name="y")),
        "is given twice": _request(_x([1, 1, 32, 32]), _x([1, 1, 32, 32])),
        "needs a 'shape' of integers": _request(_x([1, True, 32, 32])),
        "over this server's bound of 1048576": _request(_x([1, 2**18], "INT64", "ids")),  # 2 MiB
        "no 'inputs' list": {"inputs": []},
        "not a JSON object": [1, 2],
    }
    for fragment, request in cases.items():
        problem = check_request_header(request, MODEL)
        assert problem is not None and fragment in problem, (fragment, problem)


def test_the_header_is_read_within_the_body() -> None:
    body = json.dumps(_request(_x([1, 1, 32, 32]))).encode()
    assert request_header(body + b"\0" * 64, str(len(body)))[0] == _request(_x([1, 1, 32, 32]))
    assert "larger than the body" in request_header(body, str(len(body) + 1))[1]
    assert "not a number" in request_header(body, "x")[1]
    assert "nested too deeply" in request_header(b"[" * 100_000 + b"]" * 100_000, None)[1]
    assert "not valid JSON" in request_header(b"\xff{", None)[1]


dims = st.one_of(st.integers(-3, 40), st.integers(-2**70, 2**70), st.sampled_from([2**31, 2**32, 2**62 + 2, 2**63]))


@settings(max_examples=500, deadline=None)
@given(shape=st.lists(dims, max_size=6), ids_shape=st.lists(dims, max_size=3),
       datatype=st.sampled_from(["FP32", "FP64", "INT64", "BYTES", "fp32"]), with_ids=st.booleans())
def test_whatever_passes_matches_the_model_and_fits_the_bound(shape, ids_shape, datatype, with_ids) -> None:
    """The property: a request the check lets through declares exactly the model's inputs, ranks,
    fixed dims and types, a batch within max_batch_size, and at most BOUND bytes in all."""
    inputs = [_x(shape, datatype)] + ([_x(ids_shape, "INT64", "ids")] if with_ids else [])
    if check_request_header(_request(*inputs), MODEL) is not None:
        return
    assert datatype == "FP32" and len(shape) == 4 and shape[1:] == [1, 32, 32] and 1 <= shape[0] <= 16
    total = math.prod(shape) * 4
    if with_ids:
        assert len(ids_shape) == 2 and 1 <= ids_shape[0] <= 16 and ids_shape[1] >= 0
        total += math.prod(ids_shape) * 8
    assert total <= BOUND
