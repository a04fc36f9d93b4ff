"""The repository layout: versions, --force, names, path safety, atomic writes, README, report input."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optcli.deploy import TritonOptions, export_triton, sanitize_model_name
from optcli.errors import UsageError
from optcli.tensor_spec import parse_input_spec
from triton_fixtures import (
    IR_VERSION,
    conv_onnx,
    fake_engine,
    parse_config,
    qdq_onnx,
    run_like_triton,
    token_onnx,
    write_report,
)


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def conv(tmp_path: Path) -> Path:
    return conv_onnx(tmp_path / "resnet_tiny.onnx")


def test_onnx_repository_layout(tmp_path, conv):
    repo = tmp_path / "models"
    out = export_triton(conv, repo, TritonOptions(max_batch_size=32, preferred_batch_sizes=[8, 16, 32],
                                                  max_queue_delay_us=2000, instances=2), name="resnet")
    assert (out.name, out.version, out.platform) == ("resnet", 1, "onnxruntime_onnx")
    assert files_under(repo) == {"resnet/config.pbtxt", "resnet/README.md", "resnet/1/model.onnx"}
    assert (repo / "resnet/1/model.onnx").read_bytes() == conv.read_bytes()
    cfg = parse_config((repo / "resnet/config.pbtxt").read_text())
    assert cfg.name == "resnet" and cfg.max_batch_size == 32   # name must match the folder
    readme = (repo / "resnet/README.md").read_text()
    assert "tritonserver --model-repository=" in readme and "--load-model=resnet" in readme
    assert "perf_analyzer -m resnet -x 1" in readme and "--concurrency-range 1:128:16" in readme
    assert "--gpus all" not in readme                          # a CPU model needs no GPU in docker
    assert any("--intra-op-threads" in n for n in out.notes)   # 2 CPU instances oversubscribe by default


def test_int8_qdq_repository(tmp_path):
    out = export_triton(qdq_onnx(tmp_path / "qdq.onnx"), tmp_path / "models", TritonOptions(max_batch_size=16))
    cfg = parse_config(out.config_path.read_text())
    assert out.name == "qdq" and cfg.max_batch_size == 16 and list(cfg.input[0].dims) == [16]
    assert "precision: int8" in out.readme_path.read_text()


def test_engine_repository(tmp_path):
    engine = fake_engine(tmp_path / "optcli-out" / "resnet" / "05-build")
    out = export_triton(engine, tmp_path / "models", TritonOptions(instances=2), name="resnet_trt")
    assert files_under(tmp_path / "models") == {"resnet_trt/config.pbtxt", "resnet_trt/README.md",
                                                "resnet_trt/1/model.plan"}
    assert (out.model_dir / "1/model.plan").read_bytes() == engine.read_bytes()
    cfg = parse_config(out.config_path.read_text())
    assert cfg.platform == "tensorrt_plan" and cfg.max_batch_size == 32 and cfg.instance_group[0].count == 2
    readme = out.readme_path.read_text()
    assert "--gpus all" in readme and "TensorRT 10.13.0" in readme and "NVIDIA H100" in readme


def test_engine_default_name_skips_the_stage_folder(tmp_path):
    engine = fake_engine(tmp_path / "resnet" / "05-build")
    assert export_triton(engine, tmp_path / "models").name == "resnet"


def test_versions_next_free_explicit_and_force(tmp_path, conv):
    repo = tmp_path / "models"
    assert export_triton(conv, repo, name="m").version == 1
    assert export_triton(conv, repo, name="m").version == 2
    # Folders Triton ignores (non-numeric, or starting with 0) do not count.
    (repo / "m" / "07").mkdir()
    (repo / "m" / "notes").mkdir()
    assert export_triton(conv, repo, name="m").version == 3
    assert export_triton(conv, repo, name="m", version=10).version == 10
    with pytest.raises(UsageError, match="already exists") as err:
        export_triton(conv, repo, name="m", version=2)
    assert "--force" in err.value.hint
    marker = repo / "m" / "2" / "stale.txt"
    marker.write_text("old")
    out = export_triton(conv, repo, TritonOptions(max_batch_size=4), name="m", version=2, force=True)
    assert out.replaced and not marker.exists() and (repo / "m/2/model.onnx").is_file()
    assert any("older than version 10" in n for n in out.notes)
    with pytest.raises(UsageError, match="positive"):
        export_triton(conv, repo, name="m", version=0, force=True)


@pytest.mark.parametrize("raw, clean", [("resnet50", "resnet50"), ("my model!", "my_model"),
                                        ("bert-base.int8", "bert-base.int8"), ("..hidden", "hidden"),
                                        ("Modèle:v2", "Mod_le_v2"), ("-x-", "x")])
def test_names_are_sanitised(raw, clean):
    assert sanitize_model_name(raw) == clean


@pytest.mark.parametrize("bad", ["../evil", "/tmp/evil", "a/b", "..", "a\\b", "!!!"])
def test_names_that_would_escape_the_repo_are_refused(tmp_path, conv, bad):
    repo = tmp_path / "models"
    with pytest.raises(UsageError):
        export_triton(conv, repo, name=bad)
    assert files_under(tmp_path) == {"resnet_tiny.onnx"}


def test_a_symlink_out_of_the_repo_is_refused(tmp_path, conv):
    repo, outside = tmp_path / "models", tmp_path / "elsewhere"
    repo.mkdir()
    outside.mkdir()
    os.symlink(outside, repo / "m")
    with pytest.raises(UsageError, match="outside --repo"):
        export_triton(conv, repo, name="m")
    assert list(outside.iterdir()) == []


def test_repo_that_is_a_file_is_refused(tmp_path, conv):
    (tmp_path / "models").write_text("x")
    with pytest.raises(UsageError, match="is a file"):
        export_triton(conv, tmp_path / "models")


def test_a_failed_copy_leaves_no_version_folder(tmp_path, conv, monkeypatch):
    repo = tmp_path / "models"

    def broken_copy(*_args, **_kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(shutil, "copy2", broken_copy)
    with pytest.raises(OSError):
        export_triton(conv, repo, name="m")
    # Nothing Triton would load: no numeric folder and no config for a model without a version.
    assert [p.name for p in (repo / "m").iterdir()] == []


def test_external_data_onnx_becomes_a_model_folder(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    onnx.save_model(model, str(src / "big.onnx"), save_as_external_data=True, location="big.onnx.data",
                    size_threshold=0)
    out = export_triton(src / "big.onnx", tmp_path / "models")
    assert files_under(out.model_dir) == {"config.pbtxt", "README.md", "1/model.onnx/model.onnx",
                                          "1/model.onnx/big.onnx.data"}
    loaded = onnx.load(str(out.model_dir / "1/model.onnx/model.onnx"))   # weights resolve in the new place
    assert numpy_helper.to_array(loaded.graph.initializer[0]).sum() == 12


def test_from_a_report(tmp_path, conv):
    run = tmp_path / "optcli-out" / "resnet_tiny"
    (run / "03-fuse").mkdir(parents=True)
    shutil.copy(conv, run / "03-fuse" / "model.onnx")
    write_report(run, "03-fuse/model.onnx", precision="fp32",
                 model_inputs=[{"name": "x", "shape": [1, 3, 8, 8], "dtype": "float32"}])
    out = export_triton(run / "report.json", tmp_path / "models")
    assert out.name == "resnet_tiny" and out.kind == "cpu"      # name from the run's model, kind from its target
    assert "report.json" in out.readme_path.read_text()
    # The run folder works as well as its report.json.
    assert export_triton(run, tmp_path / "models").version == 2


def test_report_targeting_tensorrt_serves_onnx_on_gpu(tmp_path, conv):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(conv, run / "model.onnx")
    write_report(run, "model.onnx", target="tensorrt")
    out = export_triton(run / "report.json", tmp_path / "models")
    assert out.kind == "gpu" and parse_config(out.config_path.read_text()).instance_group[0].kind == 1


def test_report_with_an_engine(tmp_path):
    run = tmp_path / "run"
    fake_engine(run / "05-build")
    write_report(run, "05-build/model.engine", fmt="engine", target="tensorrt", precision="int8")
    out = export_triton(run / "report.json", tmp_path / "models", TritonOptions(max_batch_size=8))
    assert out.platform == "tensorrt_plan" and (out.model_dir / "1/model.plan").is_file()


@pytest.mark.parametrize("status", ["failed", "interrupted"])
def test_report_without_a_final_artifact_is_refused(tmp_path, status):
    run = tmp_path / "run"
    run.mkdir()
    write_report(run, "x.onnx", status=status)
    with pytest.raises(UsageError, match=f"no final artifact \\(status: {status}\\)"):
        export_triton(run / "report.json", tmp_path / "models")


def test_unsupported_inputs_are_refused(tmp_path):
    (tmp_path / "model.pt2").write_bytes(b"x")
    with pytest.raises(UsageError, match="cannot serve"):
        export_triton(tmp_path / "model.pt2", tmp_path / "models")
    with pytest.raises(UsageError, match="does not exist"):
        export_triton(tmp_path / "missing.onnx", tmp_path / "models")
    (tmp_path / "garbage.onnx").write_bytes(b"\x00\x01garbage")
    with pytest.raises(UsageError, match="not a valid ONNX"):
        export_triton(tmp_path / "garbage.onnx", tmp_path / "models")


def test_report_with_disabled_optimizers_serves_at_extended_level(tmp_path, conv):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(conv, run / "model.onnx")
    report = write_report(run, "model.onnx", precision="fp16")
    data = json.loads(report.read_text())
    settings = {"graph_optimization": "all", "disabled_optimizers": ["NchwcTransformer"]}
    data["final"]["latency_ms"] = {"settings": settings}
    report.write_text(json.dumps(data))
    out = export_triton(report, tmp_path / "models")
    assert parse_config(out.config_path.read_text()).optimization.graph.level == 1
    assert any("NchwcTransformer" in n for n in out.notes)
    out = export_triton(report, tmp_path / "models", TritonOptions(graph_level="all"))
    assert parse_config(out.config_path.read_text()).optimization.graph.level == 0


@pytest.mark.parametrize("builder, pins, expected", [
    (conv_onnx, [], {"logits": (32, 4)}),
    (qdq_onnx, [], {"y": (32, 8)}),
    (token_onnx, ["input_ids:1x12"], {"pooled": (32, 8), "n": (32,)}),
])
def test_the_served_onnx_accepts_what_the_config_promises(tmp_path, builder, pins, expected):
    out = export_triton(builder(tmp_path / "m.onnx"), tmp_path / "models",
                        TritonOptions(max_batch_size=32, inputs=[parse_input_spec(p) for p in pins]))
    assert run_like_triton(out.model_dir) == expected


def test_batching_off_config_matches_a_static_model(tmp_path):
    out = export_triton(conv_onnx(tmp_path / "m.onnx", batch=2), tmp_path / "models")
    assert run_like_triton(out.model_dir) == {"logits": (2, 4)}


def test_public_api(tmp_path, conv):
    import optcli

    out = optcli.export_triton(conv, tmp_path / "models", name="api", dynamic_batching="preferred=4,8",
                               max_queue_delay_us=100, instances=3, intra_op_threads=2, inputs=["x:1x3x8x8"])
    cfg = parse_config(out.config_path.read_text())
    assert cfg.max_batch_size == 8 and list(cfg.dynamic_batching.preferred_batch_size) == [4, 8]
    assert cfg.instance_group[0].count == 3 and out.to_json()["version"] == 1
    with pytest.raises(UsageError, match="needs dynamic batching"):
        optcli.export_triton(conv, tmp_path / "models", dynamic_batching="off", max_queue_delay_us=100)


# --- another model under an existing name (issue 30, item 14) ---------------------------------------------
def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("other, change", [
    (lambda d: token_onnx(d / "tok.onnx"), "its inputs are x FP32 [-1, 3, 8, 8], this one's input_ids INT64 [-1, -1]"),
    (lambda d: qdq_onnx(d / "qdq.onnx"), "its inputs are x FP32 [-1, 3, 8, 8], this one's x FP32 [-1, 16]"),
    (lambda d: conv_onnx(d / "fixed.onnx", batch=2),
     "its inputs are x FP32 [-1, 3, 8, 8], this one's x FP32 [2, 3, 8, 8]"),
    (lambda d: None, "its platform is onnxruntime_onnx, this one's python"),   # the same file, Python backend
])
def test_a_different_model_under_an_existing_name_is_refused(tmp_path, conv, other, change):
    """Was: config.pbtxt silently rewritten for the new model, so version 1 no longer matched it."""
    repo = tmp_path / "models"
    export_triton(conv, repo, name="m")
    before = _snapshot(repo)
    source = other(tmp_path) or conv
    options = TritonOptions(backend="python") if source == conv else None
    with pytest.raises(UsageError, match="holds version\\(s\\) 1 of a different model") as err:
        export_triton(source, repo, options, name="m")
    assert change in err.value.message and "--replace" in err.value.hint
    assert _snapshot(repo) == before  # nothing written: the old version still matches its config
    out = export_triton(source, repo, options, name="m", replace=True)
    assert out.version == 2 and files_under(repo / "m") >= {"config.pbtxt", "2/" + out.model_path.name}
    assert not (repo / "m" / "1").exists() and any("removed version(s) 1" in n for n in out.notes)
    assert parse_config(out.config_path.read_text()).name == "m"


def test_the_same_model_with_other_serving_settings_is_a_new_version(tmp_path, conv):
    repo = tmp_path / "models"
    export_triton(conv, repo, TritonOptions(max_batch_size=8), name="m")
    out = export_triton(conv_onnx(tmp_path / "retrained.onnx"), repo, TritonOptions(max_batch_size=32, instances=2),
                        name="m")
    assert out.version == 2 and (repo / "m" / "1").is_dir()
    # Batching off: dims gain the batch axis, the served shapes stay the same.
    assert export_triton(conv, repo, TritonOptions(max_batch_size=0), name="m").version == 3
    # The only version, replaced with --force by another model: nothing else to keep consistent.
    solo = tmp_path / "solo"
    export_triton(conv, solo, name="m")
    assert export_triton(token_onnx(tmp_path / "t.onnx"), solo, name="m", version=1, force=True).replaced


def test_an_existing_config_that_cannot_be_compared_is_refused(tmp_path, conv):
    repo = tmp_path / "models"
    export_triton(conv, repo, name="m")
    config = repo / "m" / "config.pbtxt"
    # A hand-written config with the same tensors, in another layout, compares equal.
    config.write_text('# mine\nname:"m" platform:"onnxruntime_onnx" max_batch_size:4 '
                      'input[{name:"x",data_type:TYPE_FP32,dims:[3,8,8]}] '
                      'output{name:"logits" data_type:TYPE_FP32 dims:[4]}')
    assert export_triton(conv, repo, name="m").version == 2
    for text, fragment in (("name: {{{{", "cannot be read"), ("input [ { dims: [ 3 ", "cannot be read"),
                           ("{" * 10_000, "cannot be read"), (None, "no config.pbtxt")):
        if text is None:
            config.unlink()
        else:
            config.write_text(text)
        with pytest.raises(UsageError, match=fragment):
            export_triton(conv, repo, name="m")


def test_export_triton_cli_refuses_another_model_in_one_line(tmp_path, conv):
    from compile_testkit import run_main

    repo = tmp_path / "models"
    assert run_main("export-triton", str(conv), "--repo", str(repo), "--name", "m")[0] == 0
    code, _, err = run_main("export-triton", str(token_onnx(tmp_path / "t.onnx")), "--repo", str(repo), "--name", "m")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 2 and "of a different model" in lines[0] and "--replace" in lines[1], err
    code, out, err = run_main("export-triton", str(tmp_path / "t.onnx"), "--repo", str(repo), "--name", "m",
                              "--replace")
    assert code == 0 and "removed version(s) 1" in err, err


def test_configs_read_back_as_triton_reads_them(tmp_path, conv):
    """served_signature reads what render writes, and agrees with Triton's own ModelConfig parser."""
    from optcli.deploy.triton_repo import served_signature

    for source, options in ((conv, TritonOptions()), (token_onnx(tmp_path / "t.onnx"), TritonOptions(max_batch_size=0)),
                            (qdq_onnx(tmp_path / "q.onnx"), TritonOptions(backend="python"))):
        out = export_triton(source, tmp_path / "r", options)
        cfg = parse_config(out.config_text)
        sig = served_signature(out.config_text)
        batch = [-1] if cfg.max_batch_size > 0 else []
        assert sig["input"] == sorted((t.name, "TYPE_" + model_config_type(t.data_type), tuple(batch + list(t.dims)))
                                      for t in cfg.input)
        assert sig["platform"] == (cfg.platform or cfg.backend)


def model_config_type(value: int) -> str:
    from tritonclient.grpc import model_config_pb2

    return model_config_pb2.DataType.Name(value).removeprefix("TYPE_")
