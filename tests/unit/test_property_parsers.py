"""Property-based: whatever a user types into a flag, or whatever bytes sit in a report.json or
stage.json, optcli answers with exit 2 and one `error:` line with a `hint:` (or accepts it), and never
a traceback or an internal error. hypothesis generates the text."""
from __future__ import annotations

import json
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compile_testkit import run_main
from optcli.backends.tensorrt.options import parse_batch
from optcli.errors import UsageError
from optcli.quantize.tolerance import parse_tolerance
from optcli.tensor_spec import parse_input_spec

# Text a user could type: printable characters, the grammar's own separators made likely.
TYPED = st.text(alphabet=st.sampled_from(string.printable + "xX:/,=.-_01289" * 4 + "é\u00a0"), max_size=40)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _ok_or_usage(fn, text: str) -> None:
    try:
        fn(text)
    except UsageError as exc:
        assert exc.message and "\n" not in exc.message
        assert exc.exit_code == 2


@SETTINGS
@given(TYPED)
def test_input_spec_parser(text: str) -> None:
    _ok_or_usage(parse_input_spec, text)


@SETTINGS
@given(TYPED)
def test_tolerance_parser(text: str) -> None:
    _ok_or_usage(lambda t: parse_tolerance([t]), text)


@SETTINGS
@given(TYPED)
def test_tensorrt_batch_parser(text: str) -> None:
    _ok_or_usage(parse_batch, text)


def _one_line(code: int, stdout: str, stderr: str) -> None:
    assert "Traceback" not in stderr + stdout and "internal error" not in stderr, stderr
    if code != 0:
        assert code == 2, (code, stderr)
        lines = stderr.splitlines()
        errors = [i for i, ln in enumerate(lines) if ln.startswith("error: ")]
        assert len(errors) == 1 and lines[errors[0] + 1].startswith("hint: "), stderr


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flag=st.sampled_from(["--input", "--tolerance", "--calib-opt", "--batch", "--threads", "--opset"]),
       text=TYPED)
def test_compile_flags_through_the_cli(tmp_path: Path, flag: str, text: str) -> None:
    # The model does not exist: a value that parses ends at "model not found", also exit 2.
    extra = ["--int8", "--calib", str(tmp_path)] if flag == "--calib-opt" else []
    _one_line(*run_main("compile", str(tmp_path / "missing.onnx"), f"{flag}={text}", *extra,
                        "--out", str(tmp_path / "o")))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=TYPED)
def test_bench_batch_flag(tmp_path: Path, text: str) -> None:
    _one_line(*run_main("bench", str(tmp_path / "missing.onnx"), f"--batch={text}"))


JSON_LEAF = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | TYPED
JSON = st.recursive(JSON_LEAF, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TYPED, inner, max_size=3),
                    max_leaves=10)
REPORT_KEYS = ["schema_version", "status", "stages", "final", "model", "target", "config", "error"]
FINAL_KEYS = ["artifact", "sha256", "format", "precision", "latency_ms", "backend"]
REPORTISH = st.fixed_dictionaries({}, optional={
    **{k: JSON for k in REPORT_KEYS},
    "stages": st.lists(st.dictionaries(st.sampled_from(["name", "status", "artifact", "details"]), JSON), max_size=3),
    "final": st.none() | st.fixed_dictionaries({}, optional={
        **{k: JSON for k in FINAL_KEYS},
        "artifact": st.sampled_from(["model.onnx", "../x.onnx", "/etc/passwd", "", "a/../../b", "model.onnx\x00"])
        | TYPED}),
})


@SETTINGS
@given(content=REPORTISH.map(json.dumps) | TYPED | st.binary(max_size=64).map(lambda b: b.decode("latin-1")))
def test_any_report_json_loads_or_is_refused_with_exit_2(tmp_path: Path, matmul_onnx: Path, content: str) -> None:
    import optcli

    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    (run / "model.onnx").write_bytes(matmul_onnx.read_bytes())
    (run / "report.json").write_text(content, encoding="utf-8", errors="surrogateescape")
    try:
        optcli.load(run).close()
    except UsageError as exc:
        assert exc.exit_code == 2 and "\n" not in exc.message
    _one_line(*run_main("export-triton", str(run), "--repo", str(tmp_path / "repo"), "--force"))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.dictionaries(st.sampled_from(["key", "artifact", "sha256", "format", "precision", "backend",
                                                "meta", "details", "graph", "latency_ms", "seconds", "accuracy"]),
                               JSON).map(json.dumps) | TYPED)
def test_any_stage_json_is_rebuilt_or_refused(tmp_path_factory: pytest.TempPathFactory, matmul_onnx: Path,
                                              content: str) -> None:
    out = tmp_path_factory.mktemp("stagejson")
    args = ("compile", str(matmul_onnx), "--out", str(out), "--no-bench", "--backend", "onnxruntime", "--no-fuse")
    assert run_main(*args)[0] == 0
    record = next(out.glob("*-simplify/stage.json"))
    record.write_text(content)
    _one_line(*run_main(*args))


def test_a_newline_in_a_recorded_path_stays_on_one_line(tmp_path: Path) -> None:
    """hypothesis found it: final.artifact = "a\\nb" put a newline into the one-line error."""
    import optcli
    from optcli.safe_paths import verified

    (tmp_path / "report.json").write_text(json.dumps({"stages": [], "status": "ok",
                                                      "final": {"artifact": "x\nmodel.onnx", "sha256": "0" * 64}}))
    (tmp_path / "x\nmodel.onnx").write_bytes(b"not the recorded bytes")
    with pytest.raises(UsageError) as err:
        optcli.load(tmp_path)
    assert "\n" not in err.value.message
    with pytest.raises(UsageError) as err:
        verified(tmp_path / "x\nmodel.onnx", "0" * 64, tmp_path / "report\n.json")
    assert "\n" not in err.value.message


@pytest.mark.parametrize("parse, text", [
    (parse_input_spec, "x\n:1x3"),          # "^...$" matched "x\n": a name with a newline in messages and files
    (lambda t: __import__("optcli.comparison.variants", fromlist=["parse_variants"]).parse_variants(["fp32"], [t]),
     "fast\n:fuse.enabled=false"),          # a variant name becomes a folder name
])
def test_names_with_a_trailing_newline_are_refused(parse, text: str) -> None:
    """The class hypothesis found: a regex anchored with `$` accepts a trailing newline."""
    with pytest.raises(UsageError) as err:
        parse(text)
    assert "\n" not in err.value.message.replace("\\n", "")
