"""The backend registry is the one place backend knowledge lives.

Structural: outside optcli/backends/, no code compares a format, backend or suffix with a registered
backend's name, format or file suffix (it asks the registry). Behavioural: a backend registered by its
one line (a fake one, written here) shows up in `--backend`, `[cpu] backend`, the runner lookup,
`optcli.load`, build-cpu's plan, and a whole compile that chooses it."""
from __future__ import annotations

import ast
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import optcli
from compile_testkit import FAST_BENCH_TOML, make_matmul_add_relu, run_main
from optcli.backends import registry

ROOT = Path(optcli.__file__).parent
# Names an expression may carry when it is a format, backend, file suffix or a backend's own --target.
_SUBJECTS = {"format", "fmt", "backend", "suffix", "platform", "target"}

FAKE_BACKEND = '''
"""A backend for tests: runs ONNX files saved as .fake with onnxruntime."""
import shutil

from optcli.backends.onnxruntime.runner import OnnxRuntimeRunner
from optcli.backends.recipe import Built, CpuRecipe
from optcli.backends.registry import Backend

BACKEND = Backend(name="fakert", label="FakeRT", formats=("fake",), suffixes=(".fake",),
                  runner="fake_backend:FakeRunner", cpu_recipes=("fake_backend:RECIPE",),
                  cpu_precisions=("fp32",))


class FakeRunner(OnnxRuntimeRunner):
    backend = "fakert"

    def __init__(self, path, **options):
        super().__init__(path, **options)
        self.backend = "fakert"


class CopyRecipe(CpuRecipe):
    name = "copy"
    backend = "fakert"
    simplicity = 1

    def plan(self, req):
        return [self.candidate("fakert-fp32", "fp32")] if req.precision == "fp32" else []

    def build(self, cand, ctx):
        ctx.folder.mkdir(parents=True, exist_ok=True)
        target = ctx.folder / "model.fake"
        shutil.copy2(ctx.float_onnx().path, target)
        return Built(target, "fake", details={"from": ctx.float_onnx().path.name})


RECIPE = CopyRecipe()
'''


def _subject(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute):
        return node.attr in _SUBJECTS
    if isinstance(node, ast.Name):
        return node.id in _SUBJECTS
    if isinstance(node, ast.Call):  # path.suffix.lower()
        return _subject(node.func.value) if isinstance(node.func, ast.Attribute) else False
    return False


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for e in node.elts for s in _strings(e)]
    return []


def offending_lines(bad: Callable[[ast.AST], bool]) -> list[str]:
    """`file:line: code` of every AST node `bad` flags in a module of the package outside optcli/backends/."""
    found = []
    for f in sorted(ROOT.rglob("*.py")):
        if (ROOT / "backends") in f.parents:
            continue
        text = f.read_text(encoding="utf-8")
        lines = text.splitlines()
        found += [f"{f.relative_to(ROOT.parent)}:{node.lineno}: {lines[node.lineno - 1].strip()}"
                  for node in ast.walk(ast.parse(text)) if bad(node)]
    return found


def backend_knowledge_outside_backends() -> list[str]:
    """`file:line: code` of every comparison outside optcli/backends/ of a format/backend/suffix with a
    registered backend's name, format, suffix or Triton name, and every registered suffix spelled out."""
    backends = registry.all_backends()
    names = {*registry.names(), *registry.formats(), *(b.triton_platform for b in backends if b.triton_platform)}
    suffixes = {s for b in backends for s in (*b.suffixes, *b.companions)}

    def bad(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant) and node.value in suffixes:
            return True
        if not isinstance(node, ast.Compare):
            return False
        operands = [node.left, *node.comparators]
        literals = {s for o in operands for s in _strings(o)}
        return any(_subject(o) for o in operands) and bool(literals & names)

    return offending_lines(bad)


def test_no_backend_comparisons_outside_the_backends_folder() -> None:
    assert backend_knowledge_outside_backends() == []


def test_the_structural_check_finds_what_it_looks_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The check above can fail: a module with the comparisons it forbids is reported, line by line.
    pkg = tmp_path / "optcli"
    (pkg / "backends").mkdir(parents=True)
    (pkg / "backends" / "inside.py").write_text('ok = fmt == "openvino"\n')
    (pkg / "stage.py").write_text('a = artifact.format == "engine"\nb = backend in ("x", "openvino")\n'
                                  'c = path.suffix.lower() == ".xml"\nd = fmt == "auto"\n'
                                  'e = ctx.target == "tensorrt"\nf = target == "cpu"\n')
    monkeypatch.setattr(sys.modules[__name__], "ROOT", pkg)
    assert sorted(int(line.split(":")[1]) for line in backend_knowledge_outside_backends()) == [1, 2, 3, 5]


def names_compared_outside_backends() -> list[str]:
    """`file:line: code` of every comparison outside optcli/backends/, whatever its subject, with a registered
    backend's or target's name as a string constant: what a stage, the planner or the CLI needs to know of a
    backend belongs in its descriptor (registry.Backend), asked through a lookup, never by its name."""
    names = {*registry.names(), *registry.targets()}
    return offending_lines(lambda node: isinstance(node, ast.Compare) and bool(
        {s for o in (node.left, *node.comparators) for s in _strings(o)} & names))


def test_no_backend_or_target_name_is_compared_outside_the_backends_folder() -> None:
    assert names_compared_outside_backends() == []


def test_the_name_check_finds_comparisons_of_any_subject(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Any subject, not only `format` or `backend`: a target held in a local, a config field, a call's result.
    pkg = tmp_path / "optcli"
    (pkg / "backends" / "x").mkdir(parents=True)
    (pkg / "backends" / "x" / "inside.py").write_text('ok = kind == "tensorrt"\n')
    (pkg / "plan.py").write_text('a = ctx.config.target == "tensorrt"\nb = "openvino" != chosen\n'
                                 'c = pick() in ("inductor", "x")\nd = level == "extended"\n'
                                 'e = kind not in {"tensorrt-rtx"}\n')
    monkeypatch.setattr(sys.modules[__name__], "ROOT", pkg)
    assert sorted(int(line.split(":")[1]) for line in names_compared_outside_backends()) == [1, 2, 3, 5]


def targets_compared_by_name() -> list[str]:
    """`file:line: code` of every comparison outside optcli/backends/ of a target (a name or attribute called
    `target`) with any target's name as a string, optcli's own (`auto`, `cpu`) included: ask
    optcli.plan.build_choice (builds_on_cpu, work_for) or compare with config.AUTO / config.CPU."""
    from optcli.config import TARGETS

    def bad(node: ast.AST) -> bool:
        if not isinstance(node, ast.Compare):
            return False
        operands = [node.left, *node.comparators]
        subject = any((isinstance(o, ast.Name) and o.id == "target")
                      or (isinstance(o, ast.Attribute) and o.attr == "target") for o in operands)
        return subject and bool({s for o in operands for s in _strings(o)} & set(TARGETS))

    return offending_lines(bad)


def test_no_target_is_compared_by_name_outside_the_backends_folder() -> None:
    assert targets_compared_by_name() == []


def test_the_target_check_finds_its_own_targets_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "optcli"
    (pkg / "backends").mkdir(parents=True)
    (pkg / "backends" / "inside.py").write_text('ok = target == "cpu"\n')
    (pkg / "plan.py").write_text('a = self.ctx.target == "cpu"\nb = config.target != "auto"\nc = device == "cpu"\n'
                                 'd = target in ("cpu", "x")\ne = target == CPU\n')
    monkeypatch.setattr(sys.modules[__name__], "ROOT", pkg)
    assert sorted(int(line.split(":")[1]) for line in targets_compared_by_name()) == [1, 2, 4]


def tensorrt_family_callers() -> list[str]:
    """`file:line: code` of every use of the name `tensorrt_family` outside optcli/backends/. The predicate ("does
    this target end in a TensorRT engine?") is gone: a module asks registry.graph_needs(target) for a property
    of the target's builder, or optcli.plan.build_choice (builds_on_cpu, work_for) which work builds for it."""

    def names(node: ast.AST) -> list[str]:
        return ([a.name for a in node.names] if isinstance(node, ast.ImportFrom) else
                [node.id] if isinstance(node, ast.Name) else
                [node.attr] if isinstance(node, ast.Attribute) else [])

    return offending_lines(lambda node: "tensorrt_family" in names(node))


def test_no_module_asks_whether_a_target_is_tensorrt() -> None:
    assert tensorrt_family_callers() == []


def test_the_tensorrt_family_check_finds_imports_and_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "optcli"
    (pkg / "backends").mkdir(parents=True)
    (pkg / "stages").mkdir()
    (pkg / "backends" / "inside.py").write_text("from optcli.targets import tensorrt_family\n")
    (pkg / "stages" / "fuse.py").write_text("from optcli.targets import tensorrt_family\n"
                                           "import optcli.targets\nx = optcli.targets.tensorrt_family(t)\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", pkg)
    assert [line.split(": ")[0] for line in tensorrt_family_callers()] == ["optcli/stages/fuse.py:1",
                                                                           "optcli/stages/fuse.py:3"]


def test_lookups_by_name_format_and_suffix() -> None:
    assert registry.cpu_backend_names() == ("onnxruntime", "openvino", "inductor")
    assert sorted(registry.targets()) == ["tensorrt", "tensorrt-rtx"] and registry.for_target("cpu") is None
    assert registry.for_target("tensorrt-rtx").toolkit and registry.for_target("tensorrt-rtx").runs_here
    assert registry.for_format("engine").name == "tensorrt"
    assert registry.for_path(Path("m.XML")) == (registry.get("openvino"), "openvino")
    assert registry.for_path(Path("m.plan"))[1] == "engine" and registry.for_path(Path("m.txt")) is None
    assert registry.get("onnxruntime").triton_platform == "onnxruntime_onnx"
    with pytest.raises(optcli.errors.UsageError, match="unknown backend 'tvm'"):
        registry.get("tvm")


@pytest.fixture
def fake_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, register_backend) -> Path:
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "fake_backend.py").write_text(FAKE_BACKEND)
    monkeypatch.syspath_prepend(str(folder))
    register_backend("fake_backend")  # the one line: its module name in BACKEND_MODULES
    return tmp_path


def test_a_backend_registered_by_one_line_appears_everywhere(fake_backend: Path) -> None:
    from optcli.config import CompileConfig
    from optcli.cpu.options import cpu_config
    from optcli.runtime import runner_for_format

    code, out, _ = run_main("compile", "--help")
    assert code == 0 and "fakert" in out.split("--backend", 1)[1].split("\n")[0]
    assert cpu_config(CompileConfig(model="m.onnx", extra={"cpu": {"backend": "fakert"}})).backend == "fakert"
    assert runner_for_format("fake").__name__ == "FakeRunner"
    model = make_matmul_add_relu(fake_backend / "m.onnx")
    fake = fake_backend / "m.fake"
    fake.write_bytes(model.read_bytes())
    with optcli.load(fake) as m:
        assert m.backend == "fakert"
        y = m.predict({"X": np.ones((2, 4), np.float32)})["Y"]
    assert y.shape == (2, 3)
    code, _, err = run_main("compile", str(model), "--backend", "nosuch")
    assert code == 2 and "fakert" in err


@pytest.mark.slow
def test_build_cpu_chooses_among_a_registered_backends_candidates(fake_backend: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    model = make_matmul_add_relu(fake_backend / "m.onnx")
    config = fake_backend / "optcli.toml"
    config.write_text(FAST_BENCH_TOML + "\n[cpu]\nmin_rounds = 1\nmin_seconds = 0.0\nmax_seconds = 1.0\n"
                      "block_ms = 5.0\nswitch_ms = 1.0\n")
    out = fake_backend / "out"
    code, _, err = run_main("compile", str(model), "--target", "cpu", "--backend", "fakert", "--config", str(config),
                            "--out", str(out))
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    build = next(s for s in report["stages"] if s["name"] == "build")
    assert build["details"]["chosen"] == "fakert-fp32"
    assert {c["name"]: c["status"] for c in build["details"]["candidates"]}["onnxruntime-fp32"] == "skipped"
    assert report["final"]["format"] == "fake" and report["final"]["backend"] == "fakert"
    with optcli.load(out) as m:
        assert m.backend == "fakert"


def test_two_backends_sharing_an_engine_file_are_told_apart_by_its_metadata(tmp_path: Path) -> None:
    """TensorRT and TensorRT-RTX both write model.engine; the metadata beside it names the builder, and
    a folder (an engine cache entry) resolves like a file does."""
    from optcli.config import TARGETS

    assert TARGETS == ("auto", "cpu", "tensorrt", "tensorrt-rtx")
    for toolkit, expected in ((None, "tensorrt"), ("tensorrt-rtx", "tensorrt-rtx")):
        folder = tmp_path / (toolkit or "plain")
        folder.mkdir()
        (folder / "model.engine").write_bytes(b"plan")
        options = {"toolkit": toolkit} if toolkit else {}
        (folder / "model.engine.json").write_text(json.dumps({
            "format": "optcli-tensorrt-engine", "tensorrt_version": "1", "cache_key": "k", "engine_sha256": "s",
            "inputs": [], "outputs": [], "gpu": None, "compute_capability": None, "onnx_sha256": "o",
            "engine_bytes": 4, "profiles": [], "options": options, "build_seconds": 0.1}))
        assert registry.for_path(folder / "model.engine")[0].name == expected
        assert registry.for_folder(folder)[0].name == expected
