"""optcli/input_limits.py on real runtimes: an input over the most an artifact takes (a bound recorded on a
dynamic dim, or any fixed dim: the sequence, the batch, an image's height or width) is refused by the
runner with one line naming the input, the size given and the most, and a hint, before the runtime runs.
The BERT-sized case (an unpadded artifact compiled by optcli, and `optcli serve`):
tests/integration/test_input_limits.py."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import optcli
from optcli.errors import UsageError
from optcli.input_limits import MAX_DIMS_KEY, max_dims, record_max_dims
from optcli.tensor_spec import TensorSpec
from triton_fixtures import conv_onnx

S = 8


def bounded_encoder(path: Path, record: bool = True) -> Path:
    """input_ids, attention_mask [batch, sequence] -> h = ids + positions[:, :sequence], masked: a position
    table S long, as an unpadded artifact has. Past S the Add cannot broadcast: onnxruntime fails inside."""
    seq = ["batch", "sequence"]
    positions = numpy_helper.from_array(np.arange(S, dtype=np.float32)[None], "positions")
    consts = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
              (("one", [1]), ("two", [2]), ("zero", [0]))]
    nodes = [helper.make_node("Shape", ["input_ids"], ["shape"]),
             helper.make_node("Slice", ["shape", "one", "two"], ["length"]),
             helper.make_node("Slice", ["positions", "zero", "length", "one"], ["pos"]),
             helper.make_node("Cast", ["input_ids"], ["ids"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["ids", "pos"], ["sum"]),
             helper.make_node("Mul", ["sum", "mask"], ["h"])]
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, seq) for n in ("input_ids", "attention_mask")]
    graph = helper.make_graph(nodes, "bounded", inputs, [helper.make_tensor_value_info("h", TensorProto.FLOAT, seq)],
                              [positions, *consts])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    if record:
        record_max_dims(model, {"input_ids": {1: S}, "attention_mask": {1: S}})
    onnx.save(model, str(path))
    return path


def feeds(n: int, long: str | None = None, over: int = S + 3) -> dict[str, np.ndarray]:
    return {name: np.ones((1, over if name == long else n), np.int64) for name in ("input_ids", "attention_mask")}


def one_line(err: pytest.ExceptionInfo[UsageError], *fragments: str) -> None:
    text = str(err.value)
    assert "\n" not in text and err.value.hint and "\n" not in err.value.hint, text
    for fragment in fragments:
        assert fragment in text, text


@pytest.mark.parametrize("long", [None, "input_ids", "attention_mask"])
def test_a_recorded_bound_refuses_a_longer_input_before_onnxruntime(tmp_path: Path, long: str | None) -> None:
    import onnxruntime as ort

    path = bounded_encoder(tmp_path / "m.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match="Add"):  # what a caller got before: the runtime's own failure
        session.run(None, feeds(S + 3))
    bad = feeds(5, long) if long else feeds(S + 3)
    with optcli.load(path) as model:
        assert model.max_dims == {"input_ids": {1: S}, "attention_mask": {1: S}}
        assert model.predict(feeds(S))["h"].shape == (1, S) and model.predict(feeds(3))["h"].shape == (1, 3)
        with pytest.raises(UsageError) as err:
            model.predict(bad)
        one_line(err, f"input {long or 'input_ids'!r} is {S + 3} long", f"at most {S}")
        assert "dynamic sequence axis" in (err.value.hint or "")
        with pytest.raises(UsageError):
            model.predict_async(bad).result(timeout=30)
    with optcli.load(path, batching=True) as batched, pytest.raises(UsageError):
        batched.predict(bad)


def test_without_a_record_nothing_is_bounded(tmp_path: Path) -> None:
    with optcli.load(bounded_encoder(tmp_path / "m.onnx", record=False)) as model:
        assert model.max_dims == {}


def test_openvino_keeps_the_bound(tmp_path: Path) -> None:
    """OpenVINO's converter keeps ONNX metadata in the IR's rt_info ("framework"): the IR refuses too."""
    ov = pytest.importorskip("openvino")
    xml = tmp_path / "ir" / "model.xml"
    ov.save_model(ov.convert_model(str(bounded_encoder(tmp_path / "m.onnx"))), str(xml))
    with optcli.load(xml) as model:
        assert model.max_dims == {"input_ids": {1: S}, "attention_mask": {1: S}}  # dims unnamed in the IR
        assert model.predict(feeds(4))["h"].shape == (1, 4)
        with pytest.raises(UsageError) as err:
            model.predict(feeds(4, "attention_mask"))
    one_line(err, "input 'attention_mask'", f"at most {S}")


def test_every_fixed_dim_over_the_models_is_refused_naming_it(tmp_path: Path) -> None:
    """The batch, the height, the width of an image model: each over its fixed dim, one line and a hint
    that fits that dim; a smaller one keeps the shape message."""
    with optcli.load(conv_onnx(tmp_path / "conv.onnx")) as model:
        for axis, what in ((2, "dim 2"), (3, "dim 3")):
            shape = [1, 3, 8, 8]
            shape[axis] = 11
            with pytest.raises(UsageError) as err:
                model.predict(np.zeros(shape, np.float32))
            one_line(err, "input 'x'", f"has 11 on {what}", "exactly 8")
            assert f"dynamic dim {axis}" in (err.value.hint or "")
        with pytest.raises(UsageError) as err:
            model.predict(np.zeros((1, 3, 6, 8), np.float32))
        one_line(err, "has shape 1x3x6x8, the model takes batchx3x8x8")
    features = helper.make_graph([helper.make_node("Relu", ["f"], ["r"])], "tabular",
                                 [helper.make_tensor_value_info("f", TensorProto.FLOAT, ["batch", 4])],
                                 [helper.make_tensor_value_info("r", TensorProto.FLOAT, ["batch", 4])])
    tabular = helper.make_model(features, opset_imports=[helper.make_opsetid("", 17)])
    tabular.ir_version = 8
    onnx.save(tabular, str(tmp_path / "tabular.onnx"))
    with optcli.load(tmp_path / "tabular.onnx") as model, pytest.raises(UsageError) as err:
        model.predict(np.zeros((1, 6), np.float32))  # batch x features: not a sequence, whatever its rank
    one_line(err, "input 'f' has 6 on dim 1", "exactly 4")
    with optcli.load(conv_onnx(tmp_path / "fixed.onnx", batch=1)) as model:
        with pytest.raises(UsageError) as err:
            model.predict(np.zeros((4, 3, 8, 8), np.float32))
        one_line(err, "input 'x' has a batch of 4", "exactly 1")
        assert "--static-batch" in (err.value.hint or "")


def test_recorded_bounds_apply_to_dynamic_dims_of_the_models_inputs_only() -> None:
    ids = TensorSpec("input_ids", ("batch", "sequence"), "int64")
    mask = TensorSpec("attention_mask", ("batch", "attention_mask_dim1"), "int64")  # OpenVINO's names
    fixed = TensorSpec("token_type_ids", ("batch", 16), "int64")  # fixed: the spec bounds it already
    meta = {MAX_DIMS_KEY: '{"input_ids": {"1": 32}, "attention_mask": {"1": 32}, "token_type_ids": {"1": 8}, '
                          '"gone": {"1": 4}}'}
    assert max_dims(meta, [ids, mask, fixed]) == {"input_ids": {1: 32}, "attention_mask": {1: 32}}
    for text in ("", "[1]", '{"input_ids": {"1": "32"}}', '{"input_ids": {"1": -1}}', "{not json",
                 '{"input_ids": {"1": true}}', '{"input_ids": {"7": 3}}', '{"input_ids": {"-1": 3}}',
                 '{"input_ids": [32]}', "[" * 100_000):
        assert max_dims({MAX_DIMS_KEY: text}, [ids]) == {}, text
    assert max_dims({}, [ids]) == {}

