"""config.pbtxt generation: every config is parsed into Triton's own ModelConfig protobuf."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from optcli.deploy.pbtxt import Enum, MapEntries, quote, render
from optcli.deploy.triton_config import TritonOptions, build_config, parse_dynamic_batching
from optcli.deploy.triton_source import resolve_source
from optcli.errors import UsageError
from optcli.tensor_spec import TensorSpec, parse_input_spec
from triton_fixtures import conv_onnx, engine_meta, fake_engine, parse_config, qdq_onnx, token_onnx


def config_for(path: Path, **options) -> tuple[mc.ModelConfig, object]:
    resolved = build_config(resolve_source(path), TritonOptions(**options), "m", header="test header")
    return parse_config(render(resolved.tree)), resolved


def test_the_validator_itself_rejects_unknown_fields_and_wrong_types():
    parse_config('name: "ok" max_batch_size: 4')
    with pytest.raises(text_format.ParseError):
        parse_config('name: "x" max_batch_sizes: 4')          # unknown field
    with pytest.raises(text_format.ParseError):
        parse_config('name: "x" max_batch_size: "4"')         # wrong type
    with pytest.raises(text_format.ParseError):
        parse_config('instance_group [ { kind: KIND_TPU } ]')  # unknown enum value


def test_onnx_fp32_full_options(tmp_path):
    cfg, resolved = config_for(conv_onnx(tmp_path / "conv.onnx"), max_batch_size=32, dynamic_batching=True,
                               preferred_batch_sizes=[16, 8, 32], max_queue_delay_us=2000, instances=2,
                               preserve_ordering=True, intra_op_threads=1)
    assert cfg.name == "m" and cfg.platform == "onnxruntime_onnx" and cfg.max_batch_size == 32
    # The batch dim is left out of dims when max_batch_size > 0.
    assert [(i.name, i.data_type, list(i.dims)) for i in cfg.input] == [("x", mc.TYPE_FP32, [3, 8, 8])]
    assert [(o.name, o.data_type, list(o.dims)) for o in cfg.output] == [("logits", mc.TYPE_FP32, [4])]
    assert cfg.WhichOneof("scheduling_choice") == "dynamic_batching"
    assert list(cfg.dynamic_batching.preferred_batch_size) == [8, 16, 32]
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 2000
    assert cfg.dynamic_batching.preserve_ordering is True
    (group,) = cfg.instance_group
    assert group.count == 2 and group.kind == mc.ModelInstanceGroup.KIND_CPU
    assert cfg.optimization.HasField("graph") and cfg.optimization.graph.level == 0
    assert cfg.parameters["intra_op_thread_count"].string_value == "1"
    warm = {w.name: w for w in cfg.model_warmup}
    assert set(warm) == {"batch_1", "batch_32"} and warm["batch_32"].batch_size == 32
    x = warm["batch_1"].inputs["x"]
    assert list(x.dims) == [3, 8, 8] and x.data_type == mc.TYPE_FP32
    assert x.WhichOneof("input_data_type") == "random_data"
    assert resolved.notes == []


def test_onnx_defaults_batch_when_the_batch_dim_is_dynamic(tmp_path):
    cfg, resolved = config_for(conv_onnx(tmp_path / "conv.onnx"))
    assert cfg.max_batch_size == 8 and cfg.HasField("dynamic_batching")
    assert list(cfg.dynamic_batching.preferred_batch_size) == []
    assert cfg.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU
    assert resolved.kind == "cpu"


def test_graph_level_uses_the_onnxruntime_backend_mapping(tmp_path):
    path = conv_onnx(tmp_path / "conv.onnx")
    levels = {name: config_for(path, graph_level=name)[0].optimization.graph.level
              for name in ("all", "extended", "basic", "disabled")}
    assert levels == {"all": 0, "extended": 1, "basic": -1, "disabled": 2}


def test_static_batch_model_is_not_batched_and_batching_is_refused(tmp_path):
    path = conv_onnx(tmp_path / "static.onnx", batch=1)
    cfg, resolved = config_for(path)
    assert cfg.max_batch_size == 0 and cfg.WhichOneof("scheduling_choice") is None
    assert list(cfg.input[0].dims) == [1, 3, 8, 8]            # full shape when not batching
    assert any("fixed dim 0" in n for n in resolved.notes)
    with pytest.raises(UsageError, match="cannot batch"):
        config_for(path, max_batch_size=8)
    with pytest.raises(UsageError, match="dynamic batching needs"):
        config_for(path, dynamic_batching=True)


def test_batching_off_keeps_the_dynamic_batch_dim_as_minus_one(tmp_path):
    cfg, _ = config_for(conv_onnx(tmp_path / "conv.onnx"), max_batch_size=0)
    assert cfg.max_batch_size == 0 and list(cfg.input[0].dims) == [-1, 3, 8, 8]
    assert list(cfg.output[0].dims) == [-1, 4] and len(cfg.model_warmup) == 1


def test_dynamic_dims_are_minus_one_and_warmup_needs_a_size(tmp_path):
    path = token_onnx(tmp_path / "tok.onnx")
    cfg, resolved = config_for(path, max_batch_size=16)
    ids = cfg.input[0]
    assert ids.data_type == mc.TYPE_INT64 and list(ids.dims) == [-1]
    # A batch-only output: dims [1] with an empty reshape, as Triton documents.
    n = next(o for o in cfg.output if o.name == "n")
    assert list(n.dims) == [1] and n.HasField("reshape") and list(n.reshape.shape) == []
    assert len(cfg.model_warmup) == 0
    assert any("seq" in note and "--input input_ids" in note for note in resolved.notes)

    cfg, resolved = config_for(path, max_batch_size=16, inputs=[parse_input_spec("input_ids:1x12")])
    warm = cfg.model_warmup[0].inputs["input_ids"]
    # Integer inputs warm up with zeros: Triton's random bytes would be out-of-range token ids.
    assert list(warm.dims) == [12] and warm.WhichOneof("input_data_type") == "zero_data"
    assert resolved.perf_shapes == {"input_ids": (12,)}


def test_int8_qdq_onnx(tmp_path):
    path = qdq_onnx(tmp_path / "qdq.onnx")
    model = resolve_source(path)
    assert model.precision == "int8" and model.facts["qdq"]
    cfg, _ = config_for(path, max_batch_size=4)
    assert cfg.platform == "onnxruntime_onnx" and list(cfg.input[0].dims) == [16]
    cfg, _ = config_for(path, max_batch_size=4, kind="gpu", ort_tensorrt=True)
    assert cfg.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU
    (acc,) = cfg.optimization.execution_accelerators.gpu_execution_accelerator
    assert acc.name == "tensorrt" and acc.parameters["precision_mode"] == "INT8"
    with pytest.raises(UsageError, match="needs GPU"):
        config_for(path, ort_tensorrt=True, kind="cpu")


def test_engine_from_metadata(tmp_path):
    engine = fake_engine(tmp_path / "run")
    cfg, resolved = config_for(engine)
    assert cfg.platform == "tensorrt_plan" and cfg.max_batch_size == 32    # the profile's max batch
    assert cfg.input[0].data_type == mc.TYPE_FP16 and list(cfg.input[0].dims) == [3, 224, 224]
    assert list(cfg.output[0].dims) == [1000]
    assert cfg.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU
    assert not cfg.HasField("optimization") and len(cfg.parameters) == 0   # ONNX Runtime settings only for ONNX
    assert list(cfg.model_warmup[0].inputs["images"].dims) == [3, 224, 224]
    assert resolved.kind == "gpu"


def test_engine_refuses_a_batch_larger_than_its_profile(tmp_path):
    engine = fake_engine(tmp_path / "run", engine_meta(max_batch=16))
    assert config_for(engine, max_batch_size=16)[0].max_batch_size == 16
    with pytest.raises(UsageError, match="exceeds the engine's profile max batch 16"):
        config_for(engine, max_batch_size=32)
    with pytest.raises(UsageError, match="GPU only"):
        config_for(engine, kind="cpu")
    with pytest.raises(UsageError, match="applies to ONNX"):
        config_for(engine, graph_level="basic")


def test_engine_dynamic_dims_use_the_profile_opt_for_warmup(tmp_path):
    engine = fake_engine(tmp_path / "run", engine_meta(seq_dynamic=True))
    cfg, resolved = config_for(engine)
    assert list(cfg.input[0].dims) == [3, -1, 224]
    assert list(cfg.model_warmup[0].inputs["images"].dims) == [3, 224, 224]
    assert resolved.perf_shapes == {"images": (3, 224, 224)}


def test_engine_metadata_variants_are_tolerated(tmp_path):
    meta = {"inputs": {"ids": {"data_type": "DataType.INT32", "dims": [None, 128]}},
            "outputs": [{"name": "out", "dtype": "HALF", "shape": ["batch", 2]}],
            "profiles": [{"ids": [[1, 128], [4, 128], [8, 128]]}, {"ids": [[8, 128], [32, 128], [64, 128]]}],
            "unknown_key": {"ignored": True}}
    cfg, _ = config_for(fake_engine(tmp_path / "a", meta, name="bert.plan"))
    assert cfg.max_batch_size == 64                      # the largest of the profiles
    assert cfg.input[0].data_type == mc.TYPE_INT32 and list(cfg.input[0].dims) == [128]
    assert cfg.output[0].data_type == mc.TYPE_FP16
    assert list(cfg.instance_group[0].profile) == ["0", "1"]


def test_engine_without_profile_needs_an_explicit_batch(tmp_path):
    meta = engine_meta()
    del meta["inputs"][0]["profile"]
    engine = fake_engine(tmp_path / "run", meta)
    with pytest.raises(UsageError, match="no optimization profile"):
        config_for(engine)
    cfg, resolved = config_for(engine, max_batch_size=4, warmup=False)
    assert cfg.max_batch_size == 4 and any("not checked" in n for n in resolved.notes)


@pytest.mark.parametrize("meta, message", [
    ({"outputs": []}, "'inputs' must be"),
    ({"inputs": [{"name": "x", "shape": [1]}], "outputs": [{"name": "y", "dtype": "float32", "shape": [1]}]},
     "dtype"),
    ({"inputs": [{"name": "x", "dtype": "float32", "shape": "1x3"}],
      "outputs": [{"name": "y", "dtype": "float32", "shape": [1]}]}, "shape must be a list"),
])
def test_bad_engine_metadata_is_a_usage_error(tmp_path, meta, message):
    with pytest.raises(UsageError, match=message):
        resolve_source(fake_engine(tmp_path / "run", meta))


def test_engine_without_metadata_is_a_usage_error(tmp_path):
    engine = tmp_path / "lonely.plan"
    engine.write_bytes(b"x")
    with pytest.raises(UsageError, match="no metadata file"):
        resolve_source(engine)


def test_preferred_sizes_and_queue_delay_are_checked(tmp_path):
    path = conv_onnx(tmp_path / "conv.onnx")
    with pytest.raises(UsageError, match="outside 1..8"):
        config_for(path, max_batch_size=8, preferred_batch_sizes=[4, 16])
    with pytest.raises(UsageError, match="need dynamic batching"):
        config_for(path, max_batch_size=8, dynamic_batching=False, preferred_batch_sizes=[4])
    cfg, _ = config_for(path, max_batch_size=8, dynamic_batching=False)
    assert cfg.WhichOneof("scheduling_choice") is None


def test_parse_dynamic_batching():
    assert parse_dynamic_batching("preferred=8,16,32") == (True, [8, 16, 32])
    assert parse_dynamic_batching("on") == (True, [])
    assert parse_dynamic_batching("off") == (False, [])
    for bad in ("preferred=", "preferred=8,x", "preferred=0", "sometimes"):
        with pytest.raises(UsageError):
            parse_dynamic_batching(bad)


def test_strange_tensor_names_survive_the_round_trip(tmp_path):
    name = 'in"put\\ü\n✓'
    model = resolve_source(conv_onnx(tmp_path / "conv.onnx"))
    model.inputs = [TensorSpec(name, model.inputs[0].shape, "float32")]
    cfg = parse_config(render(build_config(model, TritonOptions(), "m").tree))
    assert cfg.input[0].name == name and name in cfg.model_warmup[0].inputs


def test_bfloat16_io_is_refused_for_onnxruntime(tmp_path):
    model = resolve_source(conv_onnx(tmp_path / "conv.onnx"))
    model.inputs = [TensorSpec("x", ("batch", 3), "bfloat16")]
    with pytest.raises(UsageError, match="bfloat16"):
        build_config(model, TritonOptions(), "m")


def test_renderer_output_is_plain_text_format():
    text = render({"name": "a", "input": [{"name": "x", "data_type": Enum("TYPE_FP32"), "dims": [1, -1]}],
                   "dynamic_batching": {},
                   "parameters": MapEntries([{"key": "k", "value": {"string_value": "v"}}])})
    cfg = parse_config(text)
    assert cfg.HasField("dynamic_batching") and cfg.parameters["k"].string_value == "v"
    assert quote('a"b') == '"a\\"b"'
    assert json.loads(json.dumps(text))  # renders to a plain str


def test_onnx_default_batch_makes_room_for_preferred_sizes(tmp_path):
    cfg, _ = config_for(conv_onnx(tmp_path / "conv.onnx"), preferred_batch_sizes=[16, 32])
    assert cfg.max_batch_size == 32 and list(cfg.dynamic_batching.preferred_batch_size) == [16, 32]


def test_input_pins_are_checked_against_the_model(tmp_path):
    path = token_onnx(tmp_path / "tok.onnx")
    with pytest.raises(UsageError, match="no input of that name"):
        config_for(path, inputs=[parse_input_spec("ids:1x12")])
    with pytest.raises(UsageError, match="rank 3"):
        config_for(path, inputs=[parse_input_spec("input_ids:1x12x3")])
    with pytest.raises(UsageError, match="dim 1 is 5 but the model fixes it at 3"):
        config_for(conv_onnx(tmp_path / "conv.onnx"), inputs=[parse_input_spec("x:1x5x8x8")])


def test_the_python_backend_lets_an_encoders_lengths_share_a_batch(tmp_path):
    """allow_ragged_batch on the sequence inputs, only where optcli's runner merges them (the Python
    backend pads them to the batch's longest: optcli/batch_merge.py); Triton's own backends need equal shapes."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from triton_fixtures import _save

    emb = numpy_helper.from_array(np.ones((100, 8), np.float32), "emb")
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["h"]),
             helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT)]
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"])
              for n in ("input_ids", "attention_mask")]
    outputs = [helper.make_tensor_value_info("h", TensorProto.FLOAT, ["batch", "seq", 8]),
               helper.make_tensor_value_info("m", TensorProto.FLOAT, ["batch", "seq"])]
    path = _save(helper.make_graph(nodes, "enc", inputs, outputs, [emb]), tmp_path / "enc.onnx", opset=18)
    from optcli.deploy.triton_python import python_backend_model

    def ragged(python: bool, **options) -> dict[str, bool]:
        model = python_backend_model(path) if python else resolve_source(path)
        tree = build_config(model, TritonOptions(**options), "m").tree
        return {i.name: i.allow_ragged_batch for i in parse_config(render(tree)).input}

    assert ragged(True) == {"input_ids": True, "attention_mask": True}
    assert ragged(False) == {"input_ids": False, "attention_mask": False}
    assert ragged(True, max_batch_size=0) == {"input_ids": False, "attention_mask": False}
