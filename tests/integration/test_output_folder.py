"""Issue 30, items 3 and 17: where a compile writes is the command line's decision. A config file in a
cloned repository set `[compile] out = "/elsewhere"` and a plain `optcli compile` overwrote report.json
and report.md there; `--out` naming a folder optcli did not make overwrote the user's report.md. Now a
config file may only name a folder inside its project folder (and the run says where it writes), and a
non-empty folder without optcli's run marker is refused unless --force."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

import optcli
from compile_testkit import FAST_BENCH_TOML, one_error_line, read_report, run_main
from optcli.errors import UsageError

EXIT_USAGE = 2
COMPILE = ("--no-bench", "--backend", "onnxruntime", "--target", "cpu")


@pytest.fixture()
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cloned repository as the working folder, and a folder of the user's beside it."""
    repo = tmp_path / "repo"
    repo.mkdir()
    monkeypatch.chdir(repo)
    return repo


def user_folder(path: Path) -> Path:
    """A folder of someone's own files, with the names a run writes."""
    path.mkdir(parents=True, exist_ok=True)
    for name in ("report.md", "report.json", ".report.json.abc.partial"):
        (path / name).write_text("the user's own")
    return path


def untouched(path: Path) -> bool:
    return all((path / n).read_text() == "the user's own" for n in ("report.md", "report.json",
                                                                    ".report.json.abc.partial"))


def write_config(project: Path, name: str, out: str) -> None:
    table = "[tool.optcli.compile]" if name == "pyproject.toml" else "[compile]"
    (project / name).write_text(f'{table}\nout = "{out}"\n')


# -- item 3: a config file names only a folder inside its project ------------------------------------

@pytest.mark.parametrize("config_name", ["optcli.toml", "pyproject.toml"])
@pytest.mark.parametrize("out", ["ABSOLUTE", "../elsewhere", "build/../../elsewhere", "LINK/sub", "LINK", "", ".",
                                 "build/\x00x"])
def test_a_config_file_cannot_send_the_output_outside_its_project(project: Path, matmul_onnx: Path,
                                                                  config_name: str, out: str) -> None:
    elsewhere = user_folder(project.parent / "elsewhere")
    (project / "LINK").symlink_to(elsewhere, target_is_directory=True)
    text = {"ABSOLUTE": str(elsewhere)}.get(out, out).replace("\x00", "\\u0000")
    write_config(project, config_name, text)
    code, _, stderr = run_main("compile", str(matmul_onnx), *COMPILE)
    one_error_line(code, stderr, EXIT_USAGE, config_name, "[compile] out")
    assert untouched(elsewhere) and not (elsewhere / "sub").exists()
    assert not (elsewhere / ".optcli.lock").exists()


@pytest.mark.parametrize("config_name", ["optcli.toml", "pyproject.toml"])
def test_a_config_file_may_name_a_folder_inside_its_project(project: Path, matmul_onnx: Path,
                                                            config_name: str) -> None:
    write_config(project, config_name, "build/mlp")
    code, _, stderr = run_main("compile", str(matmul_onnx), *COMPILE)
    assert code == 0, stderr
    assert read_report(project / "build" / "mlp")["status"] == "ok"
    assert f"output: {project / 'build' / 'mlp'}" in stderr  # the run says where it writes


def test_out_on_the_command_line_goes_anywhere(project: Path, matmul_onnx: Path, tmp_path: Path) -> None:
    write_config(project, "optcli.toml", "/nowhere/at/all")
    code, _, stderr = run_main("compile", str(matmul_onnx), "--out", str(tmp_path / "mine"), *COMPILE)
    assert code == 0, stderr
    assert (tmp_path / "mine" / "report.json").is_file() and not Path("/nowhere").exists()


def test_an_explicit_config_file_names_a_folder_inside_its_own_folder(project: Path, matmul_onnx: Path,
                                                                       tmp_path: Path) -> None:
    other = tmp_path / "settings"
    other.mkdir()
    (other / "fast.toml").write_text(FAST_BENCH_TOML + '[compile]\nout = "o"\n')
    code, _, stderr = run_main("compile", str(matmul_onnx), "--config", str(other / "fast.toml"), *COMPILE)
    assert code == 0, stderr
    assert (other / "o" / "report.json").is_file()


# -- item 17: a folder optcli did not make -----------------------------------------------------------

def test_a_non_empty_folder_optcli_did_not_make_is_refused(matmul_onnx: Path, tmp_path: Path) -> None:
    mine = user_folder(tmp_path / "notes")
    code, _, stderr = run_main("compile", str(matmul_onnx), "--out", str(mine), *COMPILE)
    one_error_line(code, stderr, EXIT_USAGE, str(mine), "not an optcli output folder")
    assert untouched(mine) and sorted(os.listdir(mine)) == [".report.json.abc.partial", "report.json", "report.md"]
    with pytest.raises(UsageError, match="not an optcli output folder"):
        optcli.compile(str(matmul_onnx), out=mine, bench=False)
    assert untouched(mine)


def test_force_writes_into_it_and_marks_it(matmul_onnx: Path, tmp_path: Path) -> None:
    mine = user_folder(tmp_path / "notes")
    code, _, stderr = run_main("compile", str(matmul_onnx), "--out", str(mine), "--force", *COMPILE)
    assert code == 0, stderr
    assert read_report(mine)["status"] == "ok"
    code, _, stderr = run_main("compile", str(matmul_onnx), "--out", str(mine), *COMPILE)  # optcli's now
    assert code == 0, stderr


def test_an_empty_folder_and_a_rerun_need_no_force(matmul_onnx: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    for _ in range(2):
        code, _, stderr = run_main("compile", str(matmul_onnx), "--out", str(empty), *COMPILE)
        assert code == 0, stderr
