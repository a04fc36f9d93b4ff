"""Config files: optcli.toml, [tool.optcli] in pyproject.toml, flags over files, unknown keys."""
from __future__ import annotations

from pathlib import Path

import pytest

from optcli.config import CompileConfig, compile_config_from_dict, load_toml, model_stem
from optcli.errors import UsageError
from optcli.tensor_spec import TensorSpec

OPTCLI_TOML = """
[compile]
target = "cpu"
out = "build/resnet"
inputs = ["x:1x3x224x224"]

[export]
opset = 17
static-batch = true

[fuse]
level = "basic"
transformer = "off"

[bench]
runs = 7
"""


def test_optcli_toml(tmp_path: Path) -> None:
    path = tmp_path / "optcli.toml"
    path.write_text(OPTCLI_TOML)
    cfg = compile_config_from_dict("m.pt2", load_toml(path))
    assert cfg.target == "cpu" and cfg.out == Path("build/resnet")
    assert cfg.inputs == [TensorSpec("x", (1, 3, 224, 224), "")]
    assert cfg.export.opset == 17 and cfg.export.static_batch is True  # kebab-case keys accepted
    assert cfg.fuse.level == "basic" and cfg.fuse.transformer == "off"
    assert cfg.bench.runs == 7
    assert cfg.simplify.enabled is True  # untouched sections keep their defaults
    cfg.validate()


def test_pyproject_tool_optcli(tmp_path: Path) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text('[project]\nname = "x"\n\n[tool.optcli.export]\nopset = 19\n\n'
                    '[tool.optcli.bench]\nenabled = false\n')
    cfg = compile_config_from_dict("m.onnx", load_toml(path))
    assert cfg.export.opset == 19 and cfg.bench.enabled is False


def test_pyproject_without_optcli_table_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text('[project]\nname = "x"\n')
    assert load_toml(path) == {}


def test_unknown_key_in_a_section(tmp_path: Path) -> None:
    path = tmp_path / "optcli.toml"
    path.write_text("[export]\nopsett = 17\n")
    with pytest.raises(UsageError) as info:
        compile_config_from_dict("m.pt2", load_toml(path))
    assert "unknown key 'opsett' in [export]" in info.value.message
    assert "opset" in (info.value.hint or "")


def test_unknown_key_in_compile_table(tmp_path: Path) -> None:
    path = tmp_path / "optcli.toml"
    path.write_text('[compile]\ntargett = "cpu"\n')
    with pytest.raises(UsageError, match="unknown key 'targett' in \\[compile\\]"):
        compile_config_from_dict("m.pt2", load_toml(path))


def test_bad_toml_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "optcli.toml"
    bad.write_text("[export\nopset = 17\n")
    with pytest.raises(UsageError, match="not valid TOML"):
        load_toml(bad)
    with pytest.raises(UsageError, match="config file not found"):
        load_toml(tmp_path / "missing.toml")


def test_bad_input_in_config_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="malformed --input"):
        compile_config_from_dict("m.pt2", {"compile": {"inputs": ["x"]}})


@pytest.mark.parametrize("change, fragment", [
    (lambda c: setattr(c, "target", "gpu"), "unknown target"),
    (lambda c: setattr(c.fuse, "level", "all"), "unknown fuse level"),
    (lambda c: setattr(c.export, "exporter", "fx"), "unknown exporter"),
    (lambda c: setattr(c.quantize, "precision", "int4"), "unknown precision"),
    (lambda c: setattr(c.bench, "batch", 0), "batch sizes"),
])
def test_validate(change, fragment: str) -> None:
    cfg = CompileConfig(model="m.onnx")
    cfg.validate()
    change(cfg)
    with pytest.raises(UsageError, match=fragment):
        cfg.validate()


def test_out_dir_default_and_model_stem() -> None:
    assert CompileConfig(model="a/b/resnet.pt2").out_dir() == Path("optcli-out/resnet")
    assert CompileConfig(model="m.onnx", out=Path("x")).out_dir() == Path("x")
    assert model_stem("models/f.py:make_net") == "f-make_net"


def test_the_documented_config_example_loads() -> None:
    # docs/cli.md shows a full optcli.toml: it must stay a valid config.
    import re

    doc = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    blocks = re.findall(r"```toml\n(.*?)```", doc, re.S)
    assert len(blocks) >= 2
    import tomllib

    full = compile_config_from_dict("m.pt2", tomllib.loads(blocks[0]))
    full.validate()
    assert full.export.opset == 18 and full.bench.min_seconds == 0.5 and full.bench.threads == 2
    assert full.inputs[0].shape == (1, 3, 224, 224)
    tool = tomllib.loads(blocks[1])["tool"]["optcli"]
    assert compile_config_from_dict("m.pt2", tool).export.opset == 17


def test_misspelt_table_is_refused(tmp_path) -> None:
    import pytest

    from optcli.config import compile_config_from_dict
    from optcli.errors import UsageError
    from optcli.pipeline import Pipeline

    with pytest.raises(UsageError, match=r"unknown config table \[fusee\]"):
        compile_config_from_dict("m.onnx", {"fusee": {"level": "basic"}})
    with pytest.raises(UsageError, match=r"unknown config table \[fusee\]"):  # a config built by hand
        Pipeline(CompileConfig(model="m.onnx", extra={"fusee": {"level": "basic"}}))
    owned = compile_config_from_dict("m.onnx", {"tensorrt": {}})
    Pipeline(owned)  # [tensorrt] belongs to the build-tensorrt stage


def test_one_setting_four_ways_in_gives_one_config() -> None:
    # TOML, API keywords and --variant strings all go through set_option: the same setting, the same config.
    from optcli.api import apply_options
    from optcli.comparison.variants import apply_variant, parse_variants

    toml = compile_config_from_dict("m.onnx", {"cpu": {"backend": "openvino", "min-seconds": 1.0},
                                               "export": {"opset": 17}, "quantize": {"exclude-ops": ["Gemm"]}})
    api = CompileConfig(model="m.onnx")
    apply_options(api, {"backend": "openvino", "cpu": {"min_seconds": 1.0}, "opset": 17, "exclude_ops": ["Gemm"]})
    variant = CompileConfig(model="m.onnx")
    (v,) = parse_variants("v", ["v:backend=openvino,cpu.min_seconds=1.0,export.opset=17,quantize.exclude_ops=Gemm"])
    apply_variant(variant, v)
    assert toml.to_json() == api.to_json() == variant.to_json()
    assert toml.extra["cpu"] == {"backend": "openvino", "min_seconds": 1.0}


def test_set_option_refuses_what_no_section_has() -> None:
    from optcli.config import UnknownOption, set_option

    cfg = CompileConfig(model="m.onnx")
    with pytest.raises(UnknownOption, match=r"unknown key 'rounds' in \[cpu\]") as info:
        set_option(cfg, "cpu.rounds", 3)
    assert "min_rounds" in (info.value.hint or "") and info.value.exit_code == 2
    with pytest.raises(UnknownOption, match=r"unknown config table \[warp\]"):
        set_option(cfg, "warp.speed", 9)
    with pytest.raises(UnknownOption, match="unknown compile option 'speed'"):
        set_option(cfg, "speed", 9)
    set_option(cfg, "tensorrt.workspace", "4G")
    set_option(cfg, "out", "build/x")
    assert cfg.extra["tensorrt"] == {"workspace": "4G"} and cfg.out == Path("build/x")


def test_a_frozen_config_refuses_changes_and_its_copy_does_not() -> None:
    cfg = CompileConfig(model="m.onnx")
    cfg.freeze()
    for change in (lambda c: setattr(c, "target", "cpu"), lambda c: setattr(c.quantize, "precision", "int8")):
        with pytest.raises(UsageError, match="frozen once a run starts"):
            change(cfg)
    dup = cfg.copy()
    dup.quantize.precision = "int8"
    assert dup.quantize.precision == "int8" and cfg.quantize.precision == "fp32"


@pytest.mark.slow
def test_the_pipeline_freezes_its_copy_and_never_the_callers(tmp_path: Path) -> None:
    from compile_testkit import make_matmul_add_relu
    from optcli.pipeline import Pipeline

    cfg = CompileConfig(model=str(make_matmul_add_relu(tmp_path / "m.onnx")), out=tmp_path / "out", target="cpu")
    cfg.bench.enabled = False
    cfg.extra["cpu"] = {"min_rounds": 1, "min_seconds": 0.0, "max_seconds": 0.5, "block_ms": 5.0, "switch_ms": 1.0}
    pipeline = Pipeline(cfg)
    assert pipeline.run().status == "ok"
    with pytest.raises(UsageError, match="frozen"):
        pipeline.config.export.opset = 17
    cfg.export.opset = 17  # the caller's own config stays theirs


@pytest.mark.parametrize("settle", [-0.1, 1.0, "1%"])
def test_bench_settle_must_be_a_fraction(tmp_path, settle) -> None:
    from optcli.config import CompileConfig

    config = CompileConfig(model="m.onnx", out=tmp_path)
    config.bench.settle = settle
    with pytest.raises(UsageError, match="bench settle"):
        config.validate()


@pytest.mark.parametrize("table, key, value", [
    ("compile", "out", True), ("compile", "out", 5), ("compile", "inputs", [5]), ("compile", "inputs", "x:1x4"),
    ("compile", "target", 5), ("compile", "force", "yes"), ("compile", "time-budget", "60"),
    ("bench", "runs", "x"), ("bench", "threads", 1.5), ("bench", "enabled", 0), ("accuracy", "cosine", True),
    ("quantize", "calib", 5), ("quantize", "calib-options", {"a": 1}), ("quantize", "exclude-ops", "MatMul"),
    ("cpu", "min-rounds", "x"), ("cpu", "keep-candidates", "no"),
])
def test_a_config_value_of_the_wrong_type_is_exit_2(table: str, key: str, value: object) -> None:
    """hypothesis found it (issue 30, the property test): [compile] out = true, inputs = [5] and
    [cpu] min-rounds = "x" ended in TypeError or AttributeError deep in the run (exit 1 'internal error');
    [cpu] keep-candidates = "no" passed as true. Every value of a config file has its field's TOML type."""
    from optcli.cpu.options import cpu_config

    with pytest.raises(UsageError) as err:
        cpu_config(compile_config_from_dict("m.onnx", {table: {key: value}}))
    assert err.value.exit_code == 2 and key.replace("-", "_") in err.value.message and err.value.hint


def test_config_values_of_the_right_type_still_load() -> None:
    from optcli.cpu.options import cpu_config

    cfg = compile_config_from_dict("m.onnx", {"compile": {"time-budget": 60, "out": "o"},
                                              "accuracy": {"cosine": 1, "max-abs": 0.5},
                                              "bench": {"runs": 3},
                                              "quantize": {"calib-samples": 10, "exclude-ops": ["MatMul"]},
                                              "cpu": {"min-seconds": 1, "keep-candidates": True}})
    assert cfg.accuracy.cosine == 1 and cpu_config(cfg).keep_candidates is True
