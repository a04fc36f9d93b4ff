"""Property-based (issue 30): nothing a file on disk says steers a run out of its folder. hypothesis writes
random stage.json records, report.json files, optcli.toml files and Hugging Face shard indexes, full of
paths that lead out (`../`, absolute, through a link), runner options that name files, huge thread counts
and plugins; then optcli runs on them. For every example:

- nothing outside the run's own folders is opened, read, written, made or removed: the files the hostile
  paths name sit in a watched folder (inotify, tests/fs_watch.py: reads by C++ and Rust count too), and
  the folder holding the run's folders is watched for new entries;
- no code the command line did not name runs (a plugin file there writes a marker if imported);
- the exit code is one that docs/cli.md documents, and a failure is one `error:` line and a `hint:`,
  never a traceback or an internal error.

Examples are few and each is a real run (~0.3 s for the ONNX ones); the file runs in well under a minute."""
from __future__ import annotations

import contextlib
import json
import re
import shutil
import string
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from compile_testkit import REPO, run_main, sharded_copy
from fs_watch import FolderWatch

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
                derandomize=True)  # the same examples on every CI run: a failure is reproducible
ONNX_RUN = ("--no-bench", "--backend", "onnxruntime", "--target", "cpu")


def documented_exit_codes() -> set[int]:
    """The codes docs/cli.md's exit-code table lists."""
    text = (REPO / "docs" / "cli.md").read_text()
    table = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    return {int(m.group(1)) for m in re.finditer(r"^\|\s*(\d+)\s*\|", table, re.MULTILINE)}


DOCUMENTED = documented_exit_codes()


def check_outcome(code: int, stdout: str, stderr: str) -> None:
    assert code in DOCUMENTED, (code, stderr)
    assert "Traceback" not in stderr + stdout and "internal error" not in stderr, stderr
    if code != 0:
        lines = stderr.splitlines()
        errors = [i for i, ln in enumerate(lines) if ln.startswith("error: ")]
        assert len(errors) == 1 and errors[0] + 1 < len(lines) and lines[errors[0] + 1].startswith("hint: "), stderr


# -- the sandbox: where a run may go, and the decoys where it may not -------------------------------

class Sandbox:
    """base/ holds the run's own folders (named in `own`) and elsewhere/ (decoys: a valid model, a report,
    a .partial file, a config file, a subfolder), which no run may touch. A plugin file in the run's
    folders writes base/pwned when imported."""

    def __init__(self, base: Path, onnx_model: Path) -> None:
        self.base = base
        self.elsewhere = base / "elsewhere"
        (self.elsewhere / "sub").mkdir(parents=True)
        shutil.copy(onnx_model, self.elsewhere / "model.onnx")
        for name in ("report.json", "report.md", ".model.onnx.x.partial", "optcli.toml"):
            (self.elsewhere / name).write_text("{}")
        self.pwned = base / "pwned"

    def plugin(self, folder: Path) -> None:
        (folder / "evil.py").write_text(f"open({str(self.pwned)!r}, 'w').write('ran')\nclass R:\n    pass\n")

    def link_out(self, folder: Path) -> None:
        """Links inside a run's folder that lead out of it (a path through one must be refused)."""
        (folder / "link-out").symlink_to(self.elsewhere)
        (folder / "model-link.onnx").symlink_to(self.elsewhere / "model.onnx")

    def fill(self, text: str) -> str:
        return text.replace("@ELSEWHERE@", str(self.elsewhere))

    @contextlib.contextmanager
    def watched(self, own: set[str]) -> Any:
        watch = FolderWatch(self.base, self.elsewhere, self.elsewhere / "sub")
        try:
            yield
        finally:
            events = watch.events()
            watch.close()
        outside = [e for e in events if e[0] != self.base or e[1] not in own]
        assert outside == [], outside
        assert not self.pwned.exists(), "a file on disk made optcli import a plugin"


# -- what hypothesis draws --------------------------------------------------------------------------

TYPED = st.text(alphabet=st.sampled_from(string.printable + "./_-" * 4 + "é"), max_size=24)
# Paths that lead out of a folder, or stay in, as a record or config file would name them.
PATHS = st.sampled_from(["../elsewhere/model.onnx", "@ELSEWHERE@/model.onnx", "../../elsewhere/model.onnx",
                         "sub/../../elsewhere/model.onnx", "link-out/model.onnx", "model-link.onnx",
                         "model.onnx", "../elsewhere", "@ELSEWHERE@", "link-out", "", ".", "a\nb", "x\x00y"]) | TYPED
LEAF = st.none() | st.booleans() | st.integers(-2**63, 2**63) | st.floats(allow_nan=True) | TYPED | PATHS
JSON = st.recursive(LEAF, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TYPED, inner, max_size=3),
                    max_leaves=8)
# Runner options: ones that name a file or a count, as a record on disk might carry them.
RUNNER_OPTIONS = st.dictionaries(
    st.sampled_from(["profile_prefix", "enable_profiling", "optimized_model_filepath", "threads",
                     "inter_op_threads", "disabled_optimizers", "precision", "cache_dir", "optimization"]) | TYPED,
    st.sampled_from(["@ELSEWHERE@/profile", "../elsewhere/profile", 10**6, -1, 0, True, ["NchwcTransformer"],
                     "FP32", "all"]) | LEAF, max_size=3)
FIGURES = st.fixed_dictionaries({}, optional={k: st.floats(allow_nan=True) | LEAF
                                              for k in ("cosine_min", "cosine_mean", "max_abs_err", "top1_agreement")})
# Now and then the whole file is arbitrary text instead of the structured forgery.
RAW = st.tuples(st.integers(0, 3), TYPED).map(lambda t: t[1] if t[0] == 0 else None)
# A forgery of a real record: its key and types, so the run takes it seriously, with fields drawn over it
# ("@REAL@": keep the record's own; "@SHA@": the sha256 of the file the artifact names).
STAGE_RECORD = st.fixed_dictionaries({
    "artifact": st.just("@REAL@") | PATHS, "sha256": st.sampled_from(["@SHA@", "@REAL@"]) | TYPED,
    "meta": st.fixed_dictionaries({}, optional={"runner_options": RUNNER_OPTIONS,
                                                "external_data": st.lists(PATHS, max_size=2), "accuracy": JSON})},
    optional={"key": TYPED, "format": st.sampled_from(["onnx", "openvino", "pt2", "aoti", "engine"]) | TYPED,
              "precision": st.sampled_from(["fp32", "int8"]) | LEAF, "backend": LEAF, "details": JSON,
              "graph": JSON, "latency_ms": JSON, "seconds": LEAF, "accuracy": FIGURES | JSON, "bench_key": LEAF})
# The same over a real report: its final artifact's fields drawn, now and then the rest too.
REPORT = st.fixed_dictionaries({
    "final": st.fixed_dictionaries({"artifact": st.just("@REAL@") | PATHS,
                                    "sha256": st.sampled_from(["@SHA@", "@REAL@"]) | TYPED},
                                   optional={"format": st.sampled_from(["onnx", "openvino", "pt2", "aoti"]) | LEAF,
                                             "backend": st.sampled_from(["onnxruntime", "openvino"]) | LEAF,
                                             "precision": LEAF, "runner_options": RUNNER_OPTIONS | JSON})},
    optional={"schema_version": LEAF, "status": st.sampled_from(["ok", "failed", "running"]) | LEAF,
              "stages": st.lists(st.dictionaries(st.sampled_from(["name", "status", "artifact", "details"]), JSON),
                                 max_size=2), "model": JSON, "config": JSON})


def _over(real: dict[str, Any], drawn: dict[str, Any]) -> dict[str, Any]:
    """`real` with `drawn`'s fields over it ("@REAL@" keeps real's; dicts merge one level down)."""
    out = dict(real)
    for key, value in drawn.items():
        if value == "@REAL@":
            continue
        out[key] = {**real[key], **value} if isinstance(value, dict) and isinstance(real.get(key), dict) else value
    return out


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return {float("inf"): "inf", float("-inf"): "-inf"}.get(value, "nan" if value != value else repr(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(value)  # a TOML basic string takes JSON's escapes


TOML_VALUE = (st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=True) | PATHS
              | st.lists(PATHS, max_size=2))
TOML_KEYS = {
    "compile": st.sampled_from(["out", "target", "inputs", "force"]),
    "bench": st.sampled_from(["threads", "runs", "enabled", "batch"]),
    "export": st.sampled_from(["allow-pickle", "opset", "task"]),
    "quantize": st.sampled_from(["calib-reader", "calib", "precision", "eval", "calib-samples"]),
    "cpu": st.sampled_from(["backend", "search", "keep-candidates", "min-seconds", "max-seconds", "min-rounds"]),
}
TOML_SPECIAL = st.sampled_from([("compile", "out", "../elsewhere"), ("compile", "out", "@ELSEWHERE@"),
                                ("compile", "out", "link-out/run"), ("compile", "out", "sub/../../elsewhere"),
                                ("compile", "out", "build/run"), ("bench", "threads", 100000),
                                ("quantize", "calib-reader", "evil.py:R"), ("export", "allow-pickle", True),
                                ("quantize", "precision", "int8"), ("quantize", "calib", "."),
                                ("quantize", "calib", "@ELSEWHERE@")])
TOML_ENTRIES = st.lists(TOML_SPECIAL | st.tuples(st.sampled_from(sorted(TOML_KEYS)), TYPED, TOML_VALUE)
                        | st.sampled_from(sorted(TOML_KEYS)).flatmap(
                            lambda t: st.tuples(st.just(t), TOML_KEYS[t], TOML_VALUE)), max_size=5)


def toml_text(entries: list[tuple[str, str, Any]]) -> str:
    tables: dict[str, dict[str, Any]] = {}
    for table, key, value in entries:
        tables.setdefault(table, {})[key] = value
    return "".join(f"[{table}]\n" + "".join(f"{json.dumps(k)} = {_toml_value(v)}\n" for k, v in keys.items())
                   for table, keys in tables.items())


# -- the runs ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def onnx_run(tmp_path_factory: pytest.TempPathFactory, matmul_onnx: Path) -> Path:
    """One finished FP32 run of a small ONNX: each example works on a copy."""
    out = tmp_path_factory.mktemp("property-run") / "run"
    code, _, err = run_main("compile", str(matmul_onnx), "--out", str(out), *ONNX_RUN)
    assert code == 0, err
    assert list(out.glob("*/stage.json")), "stage records to forge"
    return out


def _fresh(tmp_path_factory: pytest.TempPathFactory, matmul_onnx: Path, run: Path | None = None) -> Sandbox:
    box = Sandbox(tmp_path_factory.mktemp("property"), matmul_onnx)
    (box.base / "input").mkdir()
    shutil.copy(matmul_onnx, box.base / "input" / "model.onnx")
    if run is not None:
        shutil.copytree(run, box.base / "run")
        box.link_out(box.base / "run")
        box.plugin(box.base / "run")
    return box


def _sha_of(folder: Path, name: str) -> str:
    """The sha256 of the file `name` names from `folder` (a consistent forgery), or zeros."""
    from optcli.artifact import sha256_file

    try:
        return sha256_file(folder / name) if (folder / name).is_file() else "0" * 64
    except (OSError, ValueError):  # a NUL in the name
        return "0" * 64


@settings(max_examples=16, **SETTINGS)
@example(record={"artifact": "../elsewhere/model.onnx", "sha256": "@SHA@", "meta": {}}, stage=0, raw=None,
         command="compile")
@example(record={"artifact": "model-link.onnx", "sha256": "@SHA@", "meta": {}}, stage=1, raw=None, command="compile")
@example(record={"artifact": "@REAL@", "sha256": "@REAL@",
                 "meta": {"runner_options": {"profile_prefix": "@ELSEWHERE@/profile"}}}, stage=1, raw=None,
         command="compile")
@example(record={"artifact": "@REAL@", "sha256": "@REAL@", "meta": {"external_data": ["../elsewhere/model.onnx"]}},
         stage=0, raw=None, command="compile")
@example(record={"artifact": "@REAL@", "sha256": "@REAL@",  # issue 30, item 1: a profile written elsewhere
                 "meta": {"runner_options": {"profile_prefix": "@ELSEWHERE@/profile"}}}, stage=1, raw=None,
         command="bench")
@example(record={"artifact": "@REAL@", "sha256": "@REAL@",
                 "meta": {"runner_options": {"threads": "many"}}}, stage=0, raw=None, command="load")  # item 8
@given(record=STAGE_RECORD, stage=st.integers(0, 5), raw=RAW, command=st.sampled_from(["compile", "bench", "load"]))
def test_any_stage_record(tmp_path_factory: pytest.TempPathFactory, matmul_onnx: Path, onnx_run: Path,
                          record: dict[str, Any], stage: int, raw: str | None, command: str) -> None:
    """A stage.json of any content (a consistent forgery included: the real key, and the sha256 of the
    file its artifact names), read by a rerun's stage cache, or beside the artifact that bench or
    optcli.load opens by path: it is reused, rebuilt or refused, its runner options never name a file
    optcli writes, and nothing it names outside is touched."""
    import optcli
    from optcli.errors import OptcliError

    box = _fresh(tmp_path_factory, matmul_onnx, onnx_run)
    records = sorted((box.base / "run").glob("*/stage.json"))
    path = records[stage % len(records)]
    real = json.loads(path.read_text())
    forged = _over(real, record)
    text = raw if raw is not None else box.fill(json.dumps(forged))
    if "@SHA@" in text:  # the sha256 of what the artifact names: read here, before the watch starts
        text = text.replace("@SHA@", _sha_of(path.parent, box.fill(str(forged["artifact"]))))
    box.plugin(path.parent)
    path.write_text(text)
    artifact = path.parent / real["artifact"]
    with box.watched(own={"run", "input"}):
        if command == "compile":
            check_outcome(*run_main("compile", str(box.base / "input" / "model.onnx"), "--out",
                                    str(box.base / "run"), *ONNX_RUN))
        elif command == "bench":
            check_outcome(*run_main("bench", str(artifact), "--runs", "2", "--warmup", "0", "--warmup-seconds", "0",
                                    "--min-seconds", "0", "--max-seconds", "0.05"))
        else:
            try:
                with optcli.load(artifact) as model:
                    model.predict({"X": __import__("numpy").ones((1, 4), "float32")})
            except OptcliError as exc:
                assert exc.exit_code in DOCUMENTED and "\n" not in exc.message


@settings(max_examples=15, **SETTINGS)
@example(report={"final": {"artifact": "../elsewhere/model.onnx", "sha256": "@SHA@"}}, raw=None, command="bench")
@example(report={"final": {"artifact": "model-link.onnx", "sha256": "@SHA@"}}, raw=None, command="load")
@example(report={"final": {"artifact": "@REAL@", "sha256": "@REAL@",
                           "runner_options": {"profile_prefix": "@ELSEWHERE@/profile", "enable_profiling": True}}},
         raw=None, command="profile")
@given(report=REPORT, raw=RAW, command=st.sampled_from(["load", "bench", "profile"]))
def test_any_report(tmp_path_factory: pytest.TempPathFactory, matmul_onnx: Path, onnx_run: Path,
                    report: dict[str, Any], raw: str | None, command: str) -> None:
    """A report.json of any content, read by optcli.load, bench and profile: the artifact it names outside
    the folder (through `..`, an absolute path or a link) is never opened, its runner options never name a
    file optcli writes, and a refusal is exit 2 on one line."""
    import optcli
    from optcli.errors import OptcliError

    box = _fresh(tmp_path_factory, matmul_onnx, onnx_run)
    run = box.base / "run"
    forged = _over(json.loads((run / "report.json").read_text()), report)
    text = raw if raw is not None else box.fill(json.dumps(forged))
    if "@SHA@" in text:
        text = text.replace("@SHA@", _sha_of(run, box.fill(str(forged["final"]["artifact"]))))
    (run / "report.json").write_text(text)
    fast = ["--runs", "2", "--warmup", "0"]
    with box.watched(own={"run", "input"}):
        if command == "load":
            try:
                with optcli.load(run) as model:
                    model.predict({"X": __import__("numpy").ones((1, 4), "float32")})
            except OptcliError as exc:
                assert exc.exit_code in DOCUMENTED and "\n" not in exc.message
        elif command == "bench":
            check_outcome(*run_main("bench", str(run), *fast, "--warmup-seconds", "0", "--min-seconds", "0",
                                    "--max-seconds", "0.05"))
        else:
            check_outcome(*run_main("profile", str(run), *fast))


@settings(max_examples=15, **SETTINGS)
@given(entries=TOML_ENTRIES, raw=RAW)
def test_any_config_file(tmp_path_factory: pytest.TempPathFactory, matmul_onnx: Path,
                         entries: list[tuple[str, str, Any]], raw: str | None) -> None:
    """An optcli.toml of any content in the working folder (a cloned repository's): the run writes only
    inside that project folder, imports no plugin it names, and a refusal is exit 2 on one line."""
    box = _fresh(tmp_path_factory, matmul_onnx)
    project = box.base / "project"
    project.mkdir()
    shutil.copy(matmul_onnx, project / "model.onnx")
    box.plugin(project)
    box.link_out(project)
    (project / "optcli.toml").write_text(raw if raw is not None else box.fill(toml_text(entries)))
    with box.watched(own={"project", "input"}), contextlib.chdir(project):
        check_outcome(*run_main("compile", "model.onnx", *ONNX_RUN))


# -- Hugging Face folders: the shard index ----------------------------------------------------------

@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory: pytest.TempPathFactory, torch_mod: Any) -> Path:
    tf = pytest.importorskip("transformers")
    torch_mod.manual_seed(0)
    folder = tmp_path_factory.mktemp("hf") / "bert"
    tf.BertModel(tf.BertConfig(vocab_size=50, max_position_embeddings=16, hidden_size=16, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=32)).save_pretrained(str(folder))
    return folder


SHARD_NAMES = (st.sampled_from(["@REAL@", "../elsewhere/escaped.safetensors", "@ELSEWHERE@/escaped.safetensors",
                                "sub/../../elsewhere/escaped.safetensors", "link-out/escaped.safetensors",
                                "missing.safetensors", "config.json", "", "."]) | LEAF)
# Drawn entries replace the shard of some parameters of the real index; now and then the whole map or
# the metadata is something else.
INDEX = st.fixed_dictionaries({"weight_map": st.dictionaries(st.integers(0, 40), SHARD_NAMES, min_size=1, max_size=4)
                               | LEAF}, optional={"metadata": JSON})


@settings(max_examples=10, **SETTINGS)
@example(index={"weight_map": {0: "@REAL@"}}, raw=None)  # the index as saved: the folder compiles
@example(index={"weight_map": {0: "../elsewhere/escaped.safetensors"}}, raw=None)
@example(index={"weight_map": {3: "link-out/escaped.safetensors"}}, raw=None)
@given(index=INDEX, raw=RAW)
def test_any_shard_index(tmp_path_factory: pytest.TempPathFactory, matmul_onnx: Path, hf_folder: Path,
                         index: dict[str, Any], raw: str | None) -> None:
    """A model.safetensors.index.json of any content: the weights it names outside the folder (`..`, an
    absolute path, a link) are never opened, and a refusal is exit 2 on one line."""
    box = _fresh(tmp_path_factory, matmul_onnx)
    model = box.base / "model"
    real = sharded_copy(hf_folder, model)
    shutil.copy(model / sorted(set(real["weight_map"].values()))[0], box.elsewhere / "escaped.safetensors")
    box.link_out(model)
    if raw is not None:
        text = raw
    else:
        drawn = index["weight_map"]
        if isinstance(drawn, dict):
            names = sorted(real["weight_map"])
            weight_map = dict(real["weight_map"])
            for i, shard in drawn.items():
                name = names[i % len(names)]
                weight_map[name] = weight_map[name] if shard == "@REAL@" else shard
            drawn = weight_map
        text = box.fill(json.dumps({**real, **index, "weight_map": drawn}))
    (model / "model.safetensors.index.json").write_text(text)
    with box.watched(own={"model", "run"}):
        check_outcome(*run_main("compile", str(model), "--out", str(box.base / "run"), *ONNX_RUN))
