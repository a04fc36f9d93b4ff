"""requirements/*.lock (issue 28): what `make demo` and `make test` install is what the suite passed with.

- every locked version lies inside pyproject.toml's range for it (the ranges are what `pip install optcli`
  users get; the lock is one point inside them)
- every package pyproject.toml asks for (for the extras a lock covers) is in that lock: a dependency added
  without `make lock` fails here
- the test lock holds every runtime package at the same version: test tools never move a runtime package
- in the venv `make` built, `pip freeze` equals the lock, package for package
"""
from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
REQS = REPO / "requirements"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")
# lock -> the extras it was compiled from (Makefile `lock`); torch comes from requirements/torch-*.in
LOCKS = {
    "cpu.lock": ("cpu", "openvino", "samples"),
    "cpu-test.lock": ("cpu", "openvino", "samples", "test"),
    "gpu.lock": ("gpu", "samples"),
    "gpu-test.lock": ("gpu", "samples", "test"),
}
RUNTIME_OF_TEST = {"cpu-test.lock": "cpu.lock", "gpu-test.lock": "gpu.lock"}
# pip itself is the venv's own, never locked (uv leaves it out)
UNLOCKED = {"pip"}


def pins(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        m = _PIN.match(line.strip())
        if m:
            out[canonicalize_name(m.group(1))] = m.group(2)
    return out


def lock(name: str) -> dict[str, str]:
    return pins((REQS / name).read_text())


def project_requirements(extras: tuple[str, ...]) -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in extras:
        reqs += [Requirement(r) for r in project["optional-dependencies"][extra]]
    return reqs


@pytest.mark.parametrize("name", sorted(LOCKS))
def test_every_locked_version_is_inside_its_pyproject_range(name: str) -> None:
    locked = lock(name)
    outside = []
    for req in project_requirements(LOCKS[name]):
        version = locked.get(canonicalize_name(req.name))
        if version is not None and not req.specifier.contains(version, prereleases=True):
            outside.append(f"{req.name}=={version} outside {req}")
    assert not outside, outside


@pytest.mark.parametrize("name", sorted(LOCKS))
def test_every_required_package_is_locked(name: str) -> None:
    locked = lock(name)
    missing = [str(r) for r in project_requirements(LOCKS[name]) if canonicalize_name(r.name) not in locked]
    assert not missing, f"{name} lacks {missing}: run `make lock`"


@pytest.mark.parametrize("test_lock", sorted(RUNTIME_OF_TEST))
def test_test_tools_never_move_a_runtime_package(test_lock: str) -> None:
    runtime, full = lock(RUNTIME_OF_TEST[test_lock]), lock(test_lock)
    moved = {n: (v, full.get(n)) for n, v in runtime.items() if full.get(n) != v}
    assert not moved, moved
    assert len(full) > len(runtime)


def test_every_lock_pins_with_hashes() -> None:
    for path in REQS.glob("*.lock"):
        text = path.read_text()
        assert pins(text), path
        blocks = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 2)[-1])
        unhashed = [b.split()[0] for b in blocks if _PIN.match(b) and "--hash=sha256:" not in b]
        assert not unhashed, (path.name, unhashed)


def test_the_cpu_lock_takes_the_cpu_build_of_torch() -> None:
    """An unpinned or CUDA torch costs GBs of nvidia-* wheels on a CPU machine."""
    for name in ("cpu.lock", "cpu-test.lock"):
        locked = lock(name)
        assert locked["torch"].endswith("+cpu"), (name, locked["torch"])
        assert not [n for n in locked if n.startswith("nvidia-")], name


def _made_by_make() -> bool:
    return Path(sys.prefix).resolve() == (REPO / ".venv").resolve()


@pytest.mark.skipif(not _made_by_make(), reason="runs in the .venv that `make test` builds from the lock")
def test_the_venv_holds_exactly_the_lock() -> None:
    """`make test` installed requirements/<extra>-test.lock and the serve binary: `pip freeze --all`
    matches them package for package (optcli itself is the editable checkout)."""
    frozen = pins(subprocess.run([sys.executable, "-m", "pip", "freeze", "--all"], capture_output=True, text=True,
                                 check=True).stdout)
    flavour = "gpu" if "onnxruntime-gpu" in frozen else "cpu"
    want = {**lock(f"{flavour}-test.lock"), **lock("serve-binary.lock")}
    if "nvidia-pytriton" not in frozen:  # the serve wheel is Linux x86_64 glibc 2.35+ only (Makefile `-`)
        want.pop("nvidia-pytriton")
    frozen.pop("optcli", None)
    for name in UNLOCKED:
        frozen.pop(name, None)
    extra = {n: v for n, v in frozen.items() if n not in want}
    differ = {n: (v, frozen.get(n)) for n, v in want.items() if frozen.get(n) != v}
    assert not extra and not differ, {"not in the lock": extra, "lock vs installed": differ}


@pytest.mark.parametrize("flavour", ["cpu", "gpu"])
def test_the_constraints_file_is_the_lock_without_hashes(flavour: str) -> None:
    """README's one-command install (`pip install ... -c requirements/cpu-constraints.txt`) pins what the
    lock pins: pip takes no hashes in a constraints file, so `make lock` writes this copy beside it."""
    assert pins((REQS / f"{flavour}-constraints.txt").read_text()) == lock(f"{flavour}.lock")
