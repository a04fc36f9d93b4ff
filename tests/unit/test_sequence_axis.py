"""Which inputs get a dynamic sequence axis, its range, and the second length export proves it at."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from optcli.sequence_axis import (
    MIN_LENGTH,
    SequenceAxis,
    example_lengths,
    other_length,
    position_limit,
    sequence_axis,
    with_length,
)
from optcli.tensor_spec import TensorSpec

TEXT = [TensorSpec("input_ids", ("batch", 16), "int64"), TensorSpec("attention_mask", ("batch", 16), "int64")]
WITH_CONFIG = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=64))


def test_text_inputs_share_one_sequence_bounded_by_the_config() -> None:
    axis = sequence_axis(TEXT, [], WITH_CONFIG, "cpu")
    assert axis == SequenceAxis({"input_ids": "sequence", "attention_mask": "sequence"}, 64)


def test_decoder_inputs_get_their_own_sequence() -> None:
    specs = TEXT + [TensorSpec("decoder_input_ids", ("batch", 8), "int64")]
    axis = sequence_axis(specs, [], object(), "auto")
    assert axis is not None and axis.inputs["decoder_input_ids"] == "decoder_sequence" and axis.limit is None
    assert example_lengths(specs, axis) == {"sequence": 16, "decoder_sequence": 8}


@pytest.mark.parametrize("specs, pinned, target", [
    ([TensorSpec("x", ("batch", 16), "float32")], [], "cpu"),                   # not a text input
    (TEXT, [TensorSpec("input_ids", (1, 16))], "cpu"),                          # the user pinned the length
    (TEXT, [], "tensorrt"),                                                     # profiles cover the batch only
    ([TensorSpec("input_ids", ("batch", 2), "int64")], [], "cpu"),              # 2 would merge with the batch
    ([TensorSpec("input_ids", ("batch", 16, 4), "int64")], [], "cpu"),          # not [batch, sequence]
])
def test_static_where_it_must_be(specs: list[TensorSpec], pinned: list[TensorSpec], target: str) -> None:
    assert sequence_axis(specs, pinned, WITH_CONFIG, target) is None


def test_a_symbolic_pin_keeps_it_dynamic() -> None:
    assert sequence_axis(TEXT, [TensorSpec("input_ids", ("batch", "seq"))], WITH_CONFIG, "cpu") is not None


def test_a_limit_below_the_example_is_dropped() -> None:
    short = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=8))
    assert sequence_axis(TEXT, [], short, "cpu").limit is None  # type: ignore[union-attr]


def test_position_limit_through_an_adapter_and_a_text_config() -> None:
    inner = SimpleNamespace(config=SimpleNamespace(text_config=SimpleNamespace(n_positions=77)))
    assert position_limit(SimpleNamespace(inner=inner)) == 77
    assert position_limit(object()) is None


@pytest.mark.parametrize("length, limit", [(3, None), (4, 64), (16, 64), (128, 512), (3, 5), (3, 3)])
def test_other_length_differs_and_stays_in_range(length: int, limit: int | None) -> None:
    other = other_length(length, limit)
    assert other != length and other >= MIN_LENGTH and (limit is None or other <= limit)


def test_with_length_sets_dim_1_of_the_sequence_inputs_only() -> None:
    specs = TEXT + [TensorSpec("pixel_values", ("batch", 3, 8, 8))]
    axis = SequenceAxis({"input_ids": "sequence", "attention_mask": "sequence"}, None)
    assert [s.shape for s in with_length(specs, axis, {"sequence": 5})] == [("batch", 5), ("batch", 5),
                                                                            ("batch", 3, 8, 8)]


def test_dynamic_shapes_for_torch_export() -> None:
    torch = pytest.importorskip("torch")
    axis = SequenceAxis({"input_ids": "sequence"}, 64)
    shapes = axis.dynamic_shapes(torch, ["input_ids", "pixel_values"], batch_dynamic=False)
    assert shapes["pixel_values"] is None and list(shapes["input_ids"]) == [1]
    assert shapes["input_ids"][1].__name__ == "sequence"


def test_recorded_lengths_fill_an_onnx_inputs_sequence() -> None:
    from onnx import TensorProto, helper

    from optcli.onnx_model import io_specs
    from optcli.sequence_axis import DEFAULT_LENGTH, fill_lengths, record_lengths, recorded_lengths

    graph = helper.make_graph([helper.make_node("Identity", ["input_ids"], ["y"])], "g",
                              [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
                               helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "width"])],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, ["batch", "sequence"])])
    model = helper.make_model(graph)
    specs, _ = io_specs(model)
    assert [s.shape for s in fill_lengths(specs, recorded_lengths(model))] == [("batch", DEFAULT_LENGTH),
                                                                               ("batch", "width")]
    record_lengths(model, {"sequence": 24})
    record_lengths(model, {"sequence": 32})  # replaces, never duplicates
    assert recorded_lengths(model) == {"sequence": 32} and len(model.metadata_props) == 1
    assert fill_lengths(specs, recorded_lengths(model))[0].shape == ("batch", 32)


@pytest.mark.parametrize("text", ['{"sequence": 1}', '{"sequence": "64"}', '{"other": 64}', "[64]", "not json",
                                  '{"sequence": true}', '{"sequence": 1e9}'])
def test_recorded_lengths_take_sane_integers_only(text: str) -> None:
    from onnx import ModelProto

    from optcli.sequence_axis import METADATA_KEY, recorded_lengths

    model = ModelProto()
    prop = model.metadata_props.add()
    prop.key, prop.value = METADATA_KEY, text
    assert recorded_lengths(model) == {}
