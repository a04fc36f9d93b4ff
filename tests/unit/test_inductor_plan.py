"""When build-cpu plans an AOTInductor candidate: only for a PyTorch input, FP32 or INT8 (INT8 with
torchao), always under --backend inductor, and under --backend auto only where it can win (INT8 at
batch >= 8) or where the run has no ONNX."""
from __future__ import annotations

from typing import Any

from optcli.backends.recipe import PlanRequest
from optcli.cpu.candidates import plan


def _inductor(**request: Any) -> dict[str, str | None]:
    request.setdefault("torch_source", True)
    request.setdefault("facts", {"inductor": {"torchao": True}})
    return {c.name: c.skip for c in plan(PlanRequest(**request)) if c.backend == "inductor"}


def test_forced_it_builds_fp32_and_int8_from_pytorch_only() -> None:
    assert _inductor(precision="fp32", backend="inductor") == {"inductor-fp32": None}
    assert _inductor(precision="int8", backend="inductor") == {"inductor-int8": None}
    assert _inductor(precision="bf16", backend="inductor") == {} and _inductor(precision="fp16", backend="auto") == {}
    onnx = _inductor(precision="fp32", backend="inductor", torch_source=False)["inductor-fp32"]
    assert onnx is not None and "the input is ONNX" in onnx


def test_int8_without_torchao_names_the_extra() -> None:
    skip = _inductor(precision="int8", backend="inductor", facts={"inductor": {"torchao": False}})["inductor-int8"]
    assert skip is not None and "optcli[inductor]" in skip


def test_auto_tries_it_only_where_it_can_win() -> None:
    assert "not tried by --backend auto" in (_inductor(precision="fp32", batch=8)["inductor-fp32"] or "")
    assert "not tried by --backend auto" in (_inductor(precision="int8", batch=1)["inductor-int8"] or "")
    assert _inductor(precision="int8", batch=8) == {"inductor-int8": None}
    assert _inductor(precision="fp32", input_format="pt2") == {"inductor-fp32": None}  # no ONNX: the only way
