"""The double's surface is exactly tensorrt_api.TABLE (which check_bindings.py holds to the real
bindings), per TensorRT version; and optcli names no `trt.` attribute outside the table."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from fake_tensorrt import Enum, make_tensorrt
from tensorrt_api import TABLE, rows_for

VERSIONS = ("10.3.0.26", "10.8.0.43", "10.13.0.35", "11.1.0.6")
# Test hooks of the double, not TensorRT API (documented in fake_tensorrt.py).
_HOOKS = {"calls", "builds", "device_cc", "capturing", "device_ranges", "plugins_registered", "global_logger",
          "io_format", "_classes"}


def fake_surface(version: str) -> set[tuple[str, str]]:
    trt = make_tensorrt(version)
    surface = {("tensorrt", n) for n in vars(trt) if n not in _HOOKS and (not n.startswith("_") or n == "__version__")
               and n not in ("__name__", "__doc__", "__package__", "__loader__", "__spec__", "__getattr__")}
    for name, value in vars(trt).items():
        if isinstance(value, Enum):
            surface |= {(name, m) for m in value._members}
    for owner, cls in trt._classes.items():
        surface |= {(owner, n) for n in vars(cls) if not n.startswith("_")}
    return surface


@pytest.mark.parametrize("version", VERSIONS)
def test_the_double_has_exactly_the_tables_surface(version):
    table = {(r.owner, r.name) for r in rows_for(version)}
    fake = fake_surface(version)
    assert sorted(fake - table) == [], "the double models members the table does not list"
    assert sorted(table - fake) == [], "the table lists members the double lacks"


def test_version_gated_members_differ_between_releases():
    assert (("BuilderFlag", "FP16") in fake_surface("10.8.0.43")
            and ("BuilderFlag", "FP16") not in fake_surface("11.1.0.6"))
    assert ("HardwareCompatibilityLevel", "SAME_COMPUTE_CAPABILITY") not in fake_surface("10.8.0.43")
    assert ("NetworkDefinitionCreationFlag", "EXPLICIT_BATCH") in fake_surface("10.3.0.26")
    assert int(make_tensorrt("10.8.0.43").NetworkDefinitionCreationFlag.STRONGLY_TYPED) == 1   # NvInfer.h 10.x
    assert int(make_tensorrt("11.1.0.6").NetworkDefinitionCreationFlag.STRONGLY_TYPED) == 0    # NvInfer.h 11.x


def test_optcli_names_only_tabled_tensorrt_attributes():
    root = Path(__file__).resolve().parents[2] / "optcli"
    names = {(r.owner, r.name) for r in TABLE}
    used = set()
    for path in root.rglob("*.py"):
        for attr, member in re.findall(r'(?<![\w"])trt\.([A-Za-z_]\w*)(?:\.([A-Z][A-Z0-9_]*)\b)?', path.read_text()):
            used.add(("tensorrt", attr))
            if member:
                used.add((attr, member))
    assert used and sorted(used - names) == []


def test_every_row_has_a_signature_source_and_version():
    for row in TABLE:
        assert row.signature and row.source and re.fullmatch(r"\d+\.\d+", row.since), row
