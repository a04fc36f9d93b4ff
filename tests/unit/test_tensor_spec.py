"""The `--input NAME:SHAPE[:DTYPE]` grammar (with MIN/OPT/MAX profiles), pins, and random inputs."""
from __future__ import annotations

import numpy as np
import pytest

from optcli.errors import EXIT_USAGE, UsageError
from optcli.tensor_spec import (
    TensorSpec,
    canonical_dtype,
    format_shape,
    merge_pinned,
    parse_input_spec,
    random_inputs,
    with_default_dtype,
)


@pytest.mark.parametrize("text, name, shape, dtype", [
    ("x:1x3x224x224", "x", (1, 3, 224, 224), ""),
    ("input_ids:1x128:int64", "input_ids", (1, 128), "int64"),
    ("x:8:fp16", "x", (8,), "float16"),
    ("x:2x4:float", "x", (2, 4), "float32"),
    ("x:2x4:LONG", "x", (2, 4), "int64"),
    ("x:batchx128", "x", ("batch", 128), ""),
    ("x:?x3", "x", ("dim0", 3), ""),
    ("x:-1x3", "x", ("dim0", 3), ""),
    ("x:1X3", "x", (1, 3), ""),
    ("encoder.input/0:1x4", "encoder.input/0", (1, 4), ""),
    ("mask:1x8:bool", "mask", (1, 8), "bool"),
])
def test_good_specs(text: str, name: str, shape: tuple, dtype: str) -> None:
    spec = parse_input_spec(text)
    assert (spec.name, spec.shape, spec.dtype) == (name, shape, dtype)
    assert spec.profile is None


def test_profile_min_opt_max() -> None:
    spec = parse_input_spec("x:1x3x224x224/8x3x224x224/32x3x224x224:float16")
    assert spec.profile == ((1, 3, 224, 224), (8, 3, 224, 224), (32, 3, 224, 224))
    # Dims that vary across the profile are dynamic; fixed ones stay ints.
    assert spec.shape == ("batch", 3, 224, 224)
    assert spec.dtype == "float16"
    seq = parse_input_spec("ids:1x16/4x64/8x128:int64")
    assert seq.shape == ("batch", "ids_dim1")
    assert seq.profile == ((1, 16), (4, 64), (8, 128))


def test_profile_with_all_fixed_dims_keeps_the_shape() -> None:
    spec = parse_input_spec("x:4x3/4x3/4x3")
    assert spec.shape == (4, 3) and spec.profile == ((4, 3), (4, 3), (4, 3))


@pytest.mark.parametrize("text, fragment", [
    ("x", "malformed --input"),                          # no shape
    ("x:", "empty shape"),
    (":1x3", "malformed --input"),                       # no name
    ("x:1x3:float32:extra", "malformed --input"),
    ("1x:1x3", "bad input name"),
    ("x:1xx3", "bad dim"),
    ("x:1x3.5", "bad dim"),
    ("x:1x0x3", "a dim of 0"),
    ("x:1x3:float99", "unknown dtype"),
    ("x:1x3:", "unknown dtype"),
    ("x:1x3/2x3", "MIN/OPT/MAX"),
    ("x:1x3/2x3/4x3/8x3", "MIN/OPT/MAX"),
    ("x:8x3/2x3/4x3", "MIN <= OPT <= MAX"),
    ("x:1x3/2x3/4x5x6", "one rank"),
    ("x:1x3/batchx3/4x3", "concrete"),
])
def test_bad_specs(text: str, fragment: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_input_spec(text)
    assert fragment in info.value.message
    assert info.value.hint  # every usage error tells the user what to write
    assert info.value.exit_code == EXIT_USAGE
    assert "\n" not in info.value.message


def test_canonical_dtype() -> None:
    assert canonical_dtype("FP32") == "float32"
    assert canonical_dtype("half") == "float16"
    assert canonical_dtype("int") == "int32"
    with pytest.raises(UsageError, match="unknown dtype"):
        canonical_dtype("complex64")


def test_concrete_and_dynamic() -> None:
    spec = TensorSpec("x", ("batch", 3, "h"), "float32")
    assert spec.is_dynamic
    assert spec.concrete(batch=4, fallback={"h": 7}) == (4, 3, 7)
    with pytest.raises(UsageError, match="dynamic dim 'h'") as info:
        spec.concrete(batch=1)
    assert info.value.hint == "pin it with --input x:1x3x128"  # the batch suggested as 1, not 128
    assert not TensorSpec("x", (1, 3)).is_dynamic
    assert format_shape(("batch", 3)) == "batchx3"


def test_merge_pinned_sets_dims_and_keeps_model_dtype() -> None:
    own = [TensorSpec("ids", ("batch", "seq"), "int64"), TensorSpec("mask", ("batch", "seq"), "int64")]
    merged = merge_pinned(own, [parse_input_spec("ids:1x128")])
    assert merged[0] == TensorSpec("ids", (1, 128), "int64")
    assert merged[1] == own[1]


@pytest.mark.parametrize("pin, fragment", [
    ("nope:1x3", "no input of that name"),
    ("x:1x3x4", "rank 3"),
    ("x:1x5", "dim 1 is 5 but the model fixes it at 3"),
    ("x:1x3:int64", "dtype int64 but the model's input is float32"),
])
def test_merge_pinned_refuses(pin: str, fragment: str) -> None:
    with pytest.raises(UsageError) as info:
        merge_pinned([TensorSpec("x", ("batch", 3), "float32")], [parse_input_spec(pin)])
    assert fragment in info.value.message


def test_with_default_dtype() -> None:
    assert with_default_dtype(parse_input_spec("x:1x3")).dtype == "float32"
    assert with_default_dtype(parse_input_spec("x:1x3:int64")).dtype == "int64"


def test_random_inputs_are_deterministic_and_typed() -> None:
    specs = [TensorSpec("x", ("batch", 3), "float32"), TensorSpec("input_ids", ("batch", 5), "int64"),
             TensorSpec("attention_mask", ("batch", 5), "int64"), TensorSpec("token_type_ids", ("batch", 5), "int64")]
    a = random_inputs(specs, batch=2, seed=3, int_high={"input_ids": 10})
    b = random_inputs(specs, batch=2, seed=3, int_high={"input_ids": 10})
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert a["x"].shape == (2, 3) and a["x"].dtype == np.float32
    assert a["input_ids"].dtype == np.int64 and 0 <= a["input_ids"].min() and a["input_ids"].max() < 10
    assert (a["attention_mask"] == 1).all() and (a["token_type_ids"] == 0).all()
    assert not np.array_equal(random_inputs(specs, 2, seed=4)["x"], a["x"])
