"""Atomic writes: a failure inside the block leaves neither the final name nor a .partial behind."""
from __future__ import annotations

from pathlib import Path

import pytest

from optcli.atomic_write import atomic_dir, atomic_path, remove_stale_partials, write_text_atomic


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_atomic_path_success(tmp_path: Path) -> None:
    final = tmp_path / "sub" / "model.onnx"
    with atomic_path(final) as tmp:
        assert tmp.parent == final.parent and tmp.name.endswith(".partial")
        tmp.write_bytes(b"abc")
        assert not final.exists()  # nothing under the final name until the block ends
    assert final.read_bytes() == b"abc"
    assert _leftovers(final.parent) == ["model.onnx"]


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt()])
def test_atomic_path_failure_leaves_nothing(tmp_path: Path, exc: BaseException) -> None:
    final = tmp_path / "report.json"
    with pytest.raises(type(exc)):
        with atomic_path(final) as tmp:
            tmp.write_text("half")
            raise exc
    assert _leftovers(tmp_path) == []


def test_atomic_path_failure_keeps_the_old_file(tmp_path: Path) -> None:
    final = tmp_path / "report.json"
    final.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(final) as tmp:
            tmp.write_text("new but unfinished")
            raise RuntimeError
    assert final.read_text() == "old"
    assert _leftovers(tmp_path) == ["report.json"]


def test_write_text_atomic_replaces(tmp_path: Path) -> None:
    final = tmp_path / "a.txt"
    write_text_atomic(final, "1")
    write_text_atomic(final, "2")
    assert final.read_text() == "2" and _leftovers(tmp_path) == ["a.txt"]


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt()])
def test_atomic_dir_failure_leaves_nothing(tmp_path: Path, exc: BaseException) -> None:
    final = tmp_path / "02-simplify"
    with pytest.raises(type(exc)):
        with atomic_dir(final) as tmp:
            (tmp / "model.onnx").write_bytes(b"half")
            (tmp / "nested").mkdir()
            raise exc
    assert _leftovers(tmp_path) == []


def test_atomic_dir_replaces_old_folder_only_on_success(tmp_path: Path) -> None:
    final = tmp_path / "01-export"
    final.mkdir()
    (final / "old.onnx").write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_dir(final) as tmp:
            (tmp / "model.onnx").write_text("new")
            raise RuntimeError
    assert _leftovers(final) == ["old.onnx"]
    with atomic_dir(final) as tmp:
        (tmp / "model.onnx").write_text("new")
    assert _leftovers(final) == ["model.onnx"]
    assert _leftovers(tmp_path) == ["01-export"]  # no .old or .partial folder left


def test_remove_stale_partials(tmp_path: Path) -> None:
    (tmp_path / ".report.json.abc.partial").write_text("x")
    (tmp_path / ".01-export.xyz.partial").mkdir()
    (tmp_path / "report.json").write_text("keep")
    remove_stale_partials(tmp_path)
    assert _leftovers(tmp_path) == ["report.json"]
    remove_stale_partials(tmp_path / "missing")  # no folder: nothing to do


def test_modes_are_those_of_a_plain_write(tmp_path: Path) -> None:
    # mkstemp/mkdtemp create 0600/0700; reports and stage folders must be readable like any file.
    import os

    mask = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "report.json", "{}")
        with atomic_dir(tmp_path / "01-export") as tmp:
            (tmp / "model.onnx").write_text("x")
    finally:
        os.umask(mask)
    assert (tmp_path / "report.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "01-export").stat().st_mode & 0o777 == 0o755
