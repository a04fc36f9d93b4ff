"""No heavy import at start-up: every optcli module imports with torch, onnxruntime, tensorrt, onnxsim and
openvino hidden, and `optcli --help` / `--version` run without loading them.

Each check runs in a fresh subprocess (this test session has torch loaded already)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from compile_testkit import REPO, blocker_source, cli_env

HEAVY = ("torch", "onnxruntime", "tensorrt", "tensorrt_rtx_bindings", "tensorrt_rtx_libs", "onnxsim", "openvino")


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), cwd=REPO,
                          timeout=120)


def test_every_module_imports_with_heavy_dependencies_hidden() -> None:
    code = blocker_source(*HEAVY) + f"""
import importlib, json, pkgutil, sys, traceback
import optcli
failed = {{}}
names = ["optcli"]
for info in pkgutil.walk_packages(optcli.__path__, "optcli."):
    names.append(info.name)
    try:
        importlib.import_module(info.name)
    except BaseException as exc:
        failed[info.name] = "".join(traceback.format_exception_only(type(exc), exc)).strip()
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})
print(json.dumps({{"names": names, "failed": failed, "loaded": loaded}}))
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["failed"] == {}, result["failed"]
    assert result["loaded"] == []
    # the walk really covered the package: the modules this issue is about are all there
    for name in ("optcli.cli.main", "optcli.cli.compile_cmd", "optcli.pipeline", "optcli.stages.export",
                 "optcli.stages.simplify", "optcli.stages.fuse", "optcli.backends.onnxruntime.runner",
                 "optcli.backends.torch.runner", "optcli.backends.torch.loader", "optcli.api", "optcli.__main__"):
        assert name in result["names"], name


def test_stages_register_with_heavy_dependencies_hidden() -> None:
    code = blocker_source(*HEAVY) + """
from optcli.stages import all_stages
print(",".join(s.name for s in all_stages()))
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    names = proc.stdout.strip().split(",")
    assert names[:4] == ["export", "simplify", "fuse", "unpad"]  # later issues insert theirs by `order`


@pytest.mark.parametrize("argv, expect", [
    (["--help"], "compile"),
    (["--version"], "0.1.0"),
    (["compile", "--help"], "--static-batch"),
    (["bench", "--help"], "Usage"),
    (["profile", "--help"], "Usage"),
    (["compare", "--help"], "Usage"),
    (["export-triton", "--help"], "Usage"),
])
def test_help_and_version_with_heavy_dependencies_hidden(argv: list[str], expect: str) -> None:
    code = blocker_source(*HEAVY) + f"""
import json, sys
from optcli.cli.main import main
code = 0
try:
    main({argv!r})
except SystemExit as exc:
    code = exc.code or 0
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY + ("onnx",)!r})
print("\\nRESULT " + json.dumps({{"code": code, "heavy": heavy}}))
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    body, result_line = proc.stdout.rsplit("RESULT ", 1)
    result = json.loads(result_line)
    assert result == {"code": 0, "heavy": []}
    assert expect in body


def test_help_does_not_import_torch_even_when_installed() -> None:
    # Not a timing test: the fast start-up is guaranteed by what is *not* imported.
    code = """
import sys
import optcli.cli.main
assert "torch" not in sys.modules, "importing optcli.cli.main loaded torch"
from optcli.cli.main import main
try:
    main(["compile", "--help"])
except SystemExit:
    pass
print(sorted(m for m in ("torch", "onnxruntime", "onnx", "onnxsim", "onnxscript", "tensorrt") if m in sys.modules))
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_python_dash_m_optcli_help() -> None:
    proc = subprocess.run([sys.executable, "-m", "optcli", "--help"], capture_output=True, text=True,
                          env=cli_env(), cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "compile" in proc.stdout and "Exit codes" in proc.stdout


def test_the_blocker_really_blocks() -> None:
    # Guards the guard: with the blocker on, torch cannot be imported.
    proc = run_python(blocker_source("torch") + "import torch\n")
    assert proc.returncode != 0 and "blocked by the test" in proc.stderr


def test_stage_order_does_not_depend_on_import_order() -> None:
    # A stage module imported early (the TensorRT contract tests import the engine build, which imports
    # stages.base) once renumbered the run's folders (04-build-cpu became 05-build-cpu).
    code = """
import optcli.backends.tensorrt.engine_build, optcli.stages.build
from optcli.stages import all_stages
print(",".join(s.name for s in all_stages()))
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    names = proc.stdout.strip().split(",")
    assert names == ["export", "simplify", "fuse", "unpad", "quantize-fp16", "quantize-int8", "build"], names


def test_no_import_cycles_in_the_package() -> None:
    """No module of optcli imports (at module level or inside a function) one that imports it back."""
    import ast

    import optcli

    root = Path(optcli.__file__).parent
    graph: dict[str, set[str]] = {}
    for f in root.rglob("*.py"):
        name = ".".join(f.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__")
        deps: set[str] = set()
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("optcli"):
                deps |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("optcli")}
        graph[name] = deps
    graph = {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            m = todo.pop()
            if m == goal:
                return True
            if m not in seen:
                seen.add(m)
                todo.extend(graph[m])
        return False

    cycles = sorted((a, b) for a in graph for b in graph[a] if reaches(b, a))
    assert not cycles, f"import cycles through: {cycles[:5]}"



def test_no_stage_module_imports_another_stage() -> None:
    import ast

    import optcli.stages

    folder = Path(optcli.stages.__file__).parent
    stages = {f.stem for f in folder.glob("*.py") if f.stem not in ("__init__", "base")}
    offenders = []
    for f in folder.glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("optcli.stages."):
                if node.module.rsplit(".", 1)[1] in stages and f.stem != node.module.rsplit(".", 1)[1]:
                    offenders.append(f"{f.name} imports {node.module}")
    assert not offenders, offenders


def optcli_imports(path: Path) -> set[str]:
    """The optcli modules a file imports, at the top or inside functions (TYPE_CHECKING ones included)."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("optcli"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("optcli")}
    return found


def test_the_build_stage_only_delegates() -> None:
    # Issue 32: the build stage imports at most half of what the former build-cpu stage did (27 optcli
    # modules: a pipeline inside a stage); the work lives with its target (the CPU search, a backend's engine).


    import optcli.stages

    stage = Path(optcli.stages.__file__).parent / "build.py"
    imports = optcli_imports(stage)
    assert len(imports) <= 13, sorted(imports)
    assert not any(m.startswith(("optcli.cpu", "optcli.backends.tensorrt", "optcli.quantize")) for m in imports)


def test_the_fan_out_check_counts_what_it_should(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import os\nfrom optcli.a import x\nimport optcli.b\n\ndef f():\n    from optcli.c import y\n")
    assert optcli_imports(module) == {"optcli.a", "optcli.b", "optcli.c"}
