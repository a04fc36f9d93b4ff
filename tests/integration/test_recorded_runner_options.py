"""Issue 30, items 1, 4 and 8: a stage.json beside an artifact (or in the stage cache, or a candidate-cache
record) supplied runner options, among them onnxruntime's profile_prefix, so a file on disk decided where
`optcli bench` and `optcli.load` wrote a 9.5 MB profile, and export-triton copied it into model.py. Now a
record may carry only what its backend allows (a word from a list, a short list of names); everything
else, and anything mistyped, is exit 2 naming the record (or, in a cache, a rebuilt entry). Threads are
bounded by the machine's cores wherever they are asked for."""
from __future__ import annotations

import inspect
import json
import os
from pathlib import Path
from typing import Any

import pytest

import optcli
from compile_testkit import FAST_BENCH_TOML, one_error_line, read_report, run_main
from optcli.backends import registry
from optcli.errors import UsageError

EXIT_USAGE = 2


def final_record(run: Path) -> Path:
    """The stage.json beside the run's final artifact (it names that file, with its sha256)."""
    return (run / read_report(run)["final"]["artifact"]).parent / "stage.json"


def set_runner_options(record: Path, options: Any) -> None:
    data = json.loads(record.read_text())
    data.setdefault("meta", {})["runner_options"] = options
    record.write_text(json.dumps(data))


def every_runner_option() -> list[str]:
    """Every keyword any registered backend's runner takes: what a record could try to set."""
    names = set()
    for backend in registry.all_backends():
        if backend.runner:
            cls = registry.load_object(backend.runner)
            names |= {n for n in inspect.signature(cls.__init__).parameters if n not in ("self", "path")}
    return sorted(names)


def hostile_value(name: str, elsewhere: Path) -> Any:
    """A value a record could carry for `name` that must not reach a runner."""
    return {"profile_prefix": str(elsewhere / "profile"), "threads": 100000, "concurrency": 100000,
            "device": "cuda", "optimization": "disabled", "allow_pickle": True, "perf_count": True,
            "inputs": ["x:1x4"], "outputs": "torch", "cuda_graph": True, "check_metadata": False,
            "precision": "bf16", "disabled_optimizers": ["NchwcTransformer"]}.get(name, "x")


# Options an .onnx artifact's record may carry, but typed wrong or out of bounds (item 8: a TypeError
# deep in onnxruntime was exit 1, "internal error").
MISTYPED = [{"disabled_optimizers": 5}, {"disabled_optimizers": "NchwcTransformer"},
            {"disabled_optimizers": [1]}, {"disabled_optimizers": ["../x"]}, {"disabled_optimizers": ["a"] * 17},
            {"disabled_optimizers": [{"nested": "dict"}]}, ["not", "a", "table"], "text"]


def allowed_for_onnx() -> set[str]:
    return {r.name for r in registry.for_format("onnx").recorded_options}


@pytest.mark.parametrize("options", [
    *[pytest.param({name: "HOSTILE"}, id=name) for name in every_runner_option() if name not in allowed_for_onnx()],
    *[pytest.param(o, id=f"mistyped-{i}") for i, o in enumerate(MISTYPED)],
])
def test_a_record_may_not_supply_this_runner_option(run_copy: Path, tmp_path: Path, options: Any) -> None:
    elsewhere = tmp_path / "elsewhere"
    if isinstance(options, dict) and list(options.values()) == ["HOSTILE"]:
        options = {name: hostile_value(name, elsewhere) for name in options}
    set_runner_options(final_record(run_copy), options)
    with pytest.raises(UsageError) as err:
        optcli.load(run_copy).close()
    assert err.value.exit_code == EXIT_USAGE and "stage.json" in err.value.message
    for cmd in (["bench", str(run_copy), "--runs", "2", "--warmup", "0", "--min-seconds", "0"],
                ["profile", str(run_copy), "--runs", "2", "--warmup", "0"],
                ["export-triton", str(run_copy), "--repo", str(tmp_path / "repo"), "--backend", "python"]):
        code, _, stderr = run_main(*cmd)
        one_error_line(code, stderr, EXIT_USAGE, "stage.json")
    assert not elsewhere.exists()  # no profile was written where the record said
    assert not list((tmp_path / "repo").rglob("model.py")) if (tmp_path / "repo").exists() else True


def test_what_a_record_may_carry_still_applies(run_copy: Path) -> None:
    """The FP16 stage records the optimizer that crashes onnxruntime on FP16 graphs: still honoured."""
    set_runner_options(final_record(run_copy), {"disabled_optimizers": ["NchwcTransformer"]})
    with optcli.load(run_copy) as model:
        assert model.disabled_optimizers == ["NchwcTransformer"]


def test_the_stage_cache_rebuilds_a_record_with_such_options(run_copy: Path, matmul_onnx: Path,
                                                             tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    set_runner_options(final_record(run_copy), {"profile_prefix": str(elsewhere / "profile")})
    code, _, err = run_main("compile", str(matmul_onnx), "--out", str(run_copy), "--no-bench", "--backend",
                            "onnxruntime", "--target", "cpu")
    assert code == 0, err
    fuse = next(s for s in read_report(run_copy)["stages"] if s["name"] == "fuse")
    assert fuse["status"] == "ok"  # rebuilt, not `cached` with the record's options
    assert not elsewhere.exists()
    assert "runner_options" not in json.loads(final_record(run_copy).read_text())["meta"]


def test_a_candidate_cache_record_with_such_options_is_rebuilt(tmp_path: Path) -> None:
    from optcli.cpu import candidate_cache

    model = tmp_path / "m.xml"
    model.write_text("<net/>")
    model.with_suffix(".bin").write_bytes(b"\0" * 8)
    cache, folder = tmp_path / "cache", tmp_path / "cand"
    candidate_cache.store(cache, "k", model, {"format": "openvino", "details": {},
                                              "runner_options": {"precision": "bf16"}})
    assert candidate_cache.load(cache, "k", folder) is not None  # what a build records: reused
    record = cache / "k" / candidate_cache.RECORD
    for options in ({"precision": "bf16", "threads": 100000}, {"precision": "int4"}, {"profile_prefix": "/tmp/p"},
                    None, "bf16"):
        data = json.loads(record.read_text())
        data["build"]["runner_options"] = options
        record.write_text(json.dumps(data))
        assert candidate_cache.load(cache, "k", folder) is None, options


# -- item 4: threads ---------------------------------------------------------------------------------

TOO_MANY = str((os.cpu_count() or 1) + 1)


@pytest.mark.parametrize("args", [
    ["compile", "MODEL", "--threads", TOO_MANY],
    ["compile", "MODEL", "--threads", "100000"],
    ["bench", "MODEL", "--threads", "100000", "--runs", "2"],
    ["profile", "MODEL", "--threads", "100000", "--runs", "2"],
], ids=["compile-cores+1", "compile", "bench", "profile"])
def test_threads_above_the_cores_exit_2(matmul_onnx: Path, tmp_path: Path, args: list[str]) -> None:
    args = [str(matmul_onnx) if a == "MODEL" else a for a in args]
    code, _, stderr = run_main(*args, *(["--out", str(tmp_path / "o"), "--no-bench"] if args[0] == "compile" else []))
    one_error_line(code, stderr, EXIT_USAGE, "threads", "cores")
    assert not (tmp_path / "o" / "report.json").exists()


def test_threads_from_a_config_file_are_bounded_too(matmul_onnx: Path, tmp_path: Path) -> None:
    (tmp_path / "optcli.toml").write_text(FAST_BENCH_TOML + "threads = 100000\n")
    code, _, stderr = run_main("compile", str(matmul_onnx), "--config", str(tmp_path / "optcli.toml"),
                               "--out", str(tmp_path / "o"))
    one_error_line(code, stderr, EXIT_USAGE, "threads", "cores")


@pytest.mark.parametrize("threads", [0, -1, 100000, "4", 2.5, True])
def test_api_threads_are_typed_and_bounded(matmul_onnx: Path, threads: Any) -> None:
    with pytest.raises(UsageError, match="threads") as err:
        optcli.load(matmul_onnx, threads=threads)
    assert err.value.exit_code == EXIT_USAGE
