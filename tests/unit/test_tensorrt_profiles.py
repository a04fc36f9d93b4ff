"""Optimization profiles from input specs, and the [tensorrt] option parsers."""
from __future__ import annotations

import pytest

from optcli.backends.tensorrt.options import TensorRTConfig, parse_batch, parse_size, tensorrt_config
from optcli.backends.tensorrt.profiles import InputProfile, build_profiles, check_batches, default_batch
from optcli.config import CompileConfig
from optcli.errors import UsageError
from optcli.tensor_spec import TensorSpec, parse_input_spec

IMAGE = TensorSpec("x", ("batch", 3, 224, 224), "float32")
TOKENS = TensorSpec("input_ids", ("batch", "seq"), "int64")


def test_explicit_input_profile_wins():
    pin = parse_input_spec("x:1x3x224x224/8x3x224x224/32x3x224x224")
    [p] = build_profiles([IMAGE], pinned=[pin], batch=(2, 4, 8))
    assert (p.min, p.opt, p.max) == ((1, 3, 224, 224), (8, 3, 224, 224), (32, 3, 224, 224))
    assert p.dynamic_axes == (0,) and p.describe() == "x:1x3x224x224/8x3x224x224/32x3x224x224"


def test_batch_flag_fills_the_dynamic_batch_dim():
    [p] = build_profiles([IMAGE], batch=(1, 8, 32))
    assert (p.min, p.opt, p.max) == ((1, 3, 224, 224), (8, 3, 224, 224), (32, 3, 224, 224))


def test_default_batch_when_nothing_is_said():
    assert default_batch(bench_batch=1, accuracy_batch=2) == (1, 1, 32)
    assert default_batch(bench_batch=64, accuracy_batch=2) == (1, 64, 64)
    [p] = build_profiles([IMAGE], fallback_batch=default_batch(4, 2))
    assert (p.min[0], p.opt[0], p.max[0]) == (1, 4, 32)


def test_other_dynamic_dims_take_pinned_sizes():
    pin = parse_input_spec("input_ids:1x128:int64")
    [p] = build_profiles([TOKENS], pinned=[pin], batch=(1, 4, 16))
    assert (p.min, p.opt, p.max) == ((1, 128), (4, 128), (16, 128)) and p.dynamic_axes == (0, 1)


def test_unknown_dynamic_dim_names_the_flag_to_use():
    with pytest.raises(UsageError, match="dynamic dim 'seq' at axis 1") as info:
        build_profiles([TOKENS], batch=(1, 4, 16))
    # The suggested profile keeps the batch range (issue 29, F2: 1x128/1x128/1x128 then failed the batch check).
    assert "--input input_ids:1x128," in info.value.hint and "--input input_ids:1x1/4x128/16x128" in info.value.hint


def test_a_sequence_the_pipeline_runs_at_gets_a_range_up_to_its_length():
    # Issue 29, F2: a dynamic sequence needed --input for every text input; the pipeline's own length decides.
    run = [TensorSpec("input_ids", ("batch", 128), "int64")]
    [p] = build_profiles([TOKENS], batch=(1, 4, 16), run_specs=run)
    assert (p.min, p.opt, p.max) == ((1, 1), (4, 128), (16, 128)) and p.dynamic_axes == (0, 1)
    [p] = build_profiles([TOKENS], batch=(1, 4, 16), run_specs=run, max_seq=512)
    assert (p.min, p.opt, p.max) == ((1, 1), (4, 128), (16, 512))
    with pytest.raises(UsageError, match="--max-seq 64 is below the length 128") as info:
        build_profiles([TOKENS], batch=(1, 4, 16), run_specs=run, max_seq=64)
    assert "--max-seq 128" in info.value.hint
    pin = parse_input_spec("input_ids:1x32:int64")  # a pin is the length the user asked for: fixed
    [p] = build_profiles([TOKENS], pinned=[pin], batch=(1, 4, 16), run_specs=run, max_seq=512)
    assert (p.min, p.max) == ((1, 32), (16, 32))


def test_batch_hint_for_an_explicit_profile_widens_that_profile():
    # Issue 29, F2: --batch cannot override an explicit --input profile, so its hint must not suggest it.
    p = InputProfile("input_ids", (1, 128), (1, 128), (1, 128), (0, 1))
    with pytest.raises(UsageError, match="accuracy check batch 2 is outside") as info:
        check_batches([p], {"accuracy check": 2}, explicit={"input_ids"})
    assert info.value.hint == "widen its profile: --input input_ids:1x128/1x128/2x128"


def test_static_model_needs_no_profile_and_refuses_batch():
    static = TensorSpec("x", (4, 3), "float32")
    [p] = build_profiles([static])
    assert not p.dynamic and p.min == p.opt == p.max == (4, 3)
    with pytest.raises(UsageError, match="model fixes it at 4"):
        build_profiles([static], batch=(1, 2, 8))


def test_explicit_profile_must_respect_fixed_dims_and_rank():
    with pytest.raises(UsageError, match="fixes dim 1 at 3"):
        build_profiles([IMAGE], pinned=[parse_input_spec("x:1x4x224x224/1x4x224x224/2x4x224x224")])
    with pytest.raises(UsageError, match="profile rank 2"):
        build_profiles([IMAGE], pinned=[parse_input_spec("x:1x3/2x3/4x3")])
    with pytest.raises(UsageError, match="no input of that name"):
        build_profiles([IMAGE], pinned=[parse_input_spec("y:1x3/2x3/4x3")])


def test_check_batches_only_for_dynamic_batch_inputs():
    dyn = InputProfile("x", (2, 3), (4, 3), (8, 3), (0,))
    check_batches([dyn], {"bench": 4})
    with pytest.raises(UsageError, match="the bench batch 1 is outside the batch range 2..8") as info:
        check_batches([dyn], {"bench": 1})
    assert info.value.hint == "widen it with --batch 1/4/8"
    check_batches([InputProfile("y", (1, 3), (1, 3), (1, 3), ())], {"bench": 5})  # static: not ours to judge


def test_profile_json_round_trip():
    p = InputProfile("x", (1, 3), (4, 3), (8, 3), (0,))
    assert InputProfile.from_json(p.to_json()) == p
    assert p.accepts((5, 3)) and not p.accepts((9, 3)) and not p.accepts((5, 3, 1))


@pytest.mark.parametrize("text,expected", [("4G", 4 << 30), ("512M", 512 << 20), ("1.5GiB", 3 << 29),
                                           ("1024", 1024), ("64k", 64 << 10), (2048, 2048)])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "4X", "-1G", "0", "G"])
def test_parse_size_rejects(bad):
    with pytest.raises(UsageError):
        parse_size(bad)


def test_parse_batch():
    assert parse_batch("1/8/32") == (1, 8, 32)
    assert parse_batch("8") == (8, 8, 8)
    assert parse_batch([1, 2, 4]) == (1, 2, 4)
    for bad in ("8/1/32", "0/1/2", "1/2", "a/b/c"):
        with pytest.raises(UsageError):
            parse_batch(bad)


def test_tensorrt_section_from_toml_values():
    cfg = tensorrt_config(CompileConfig(model="m.onnx", extra={"tensorrt": {
        "batch": "1/4/16", "workspace": "2G", "builder-opt-level": 0, "hardware_compat": "ampere+",
        "version_compat": True, "timing_cache": "t.cache"}}))
    assert cfg.batch == (1, 4, 16) and cfg.workspace == 2 << 30 and cfg.builder_opt_level == 0
    assert cfg.hardware_compat == "ampere+" and cfg.version_compat and str(cfg.timing_cache) == "t.cache"
    assert tensorrt_config(CompileConfig(model="m.onnx")) == TensorRTConfig()


@pytest.mark.parametrize("section,message", [
    ({"batchsize": 4}, "unknown key 'batchsize' in \\[tensorrt\\]"),
    ({"builder_opt_level": 9}, "builder_opt_level must be 0-5"),
    ({"hardware_compat": "turing"}, "unknown hardware compatibility"),
    ({"version_compat": "yes"}, "version_compat must be true or false"),
])
def test_tensorrt_section_rejects_bad_values(section, message):
    with pytest.raises(UsageError, match=message):
        TensorRTConfig.from_dict(section)


def test_default_cache_root_follows_environment(monkeypatch, tmp_path):
    from optcli.backends.tensorrt.options import default_cache_root

    monkeypatch.setenv("OPTCLI_CACHE_DIR", str(tmp_path / "c"))
    assert default_cache_root() == tmp_path / "c" / "tensorrt"
    monkeypatch.delenv("OPTCLI_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert default_cache_root() == tmp_path / "x" / "optcli" / "tensorrt"
    assert TensorRTConfig().engine_cache_dir() == tmp_path / "x" / "optcli" / "tensorrt" / "engines"
