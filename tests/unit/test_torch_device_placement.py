"""A .pt2 opened for a device other than the CPU must have the devices written into its graph moved
too, not only its parameters: on an H100 a transformers BERT .pt2 failed "Tensor device mismatch!
Expected: cpu, Got: cuda:0" because the masks it builds with arange/ones(device="cpu") stayed put.
The CPU has no CUDA, so the class is tested with the meta device, which the same code path takes."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from optcli.backends.torch.loader import detect, load_torch  # noqa: E402


class MakesTensors(torch.nn.Module):
    """Builds tensors inside forward with an explicit device, as transformers does for masks."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) + torch.arange(x.shape[1], device="cpu") + torch.ones(x.shape[1], device="cpu")


def _save(tmp_path) -> str:
    batch = torch.export.Dim("batch", min=1, max=64)
    ep = torch.export.export(MakesTensors().eval(), (torch.ones(2, 4),), dynamic_shapes=({0: batch},))
    path = tmp_path / "makes.pt2"
    torch.export.save(ep, str(path))
    return str(path)


def _graph_devices(module) -> set[str]:
    return {str(n.kwargs["device"]) for n in module.graph.nodes
            if n.op == "call_function" and n.kwargs.get("device") is not None}


def test_pt2_loaded_for_another_device_moves_graph_devices_and_parameters(tmp_path):
    model = load_torch(detect(_save(tmp_path)), [], device="meta")
    assert _graph_devices(model.module) == {"meta"}
    assert {p.device.type for p in model.module.parameters()} == {"meta"}
    out = model.module(torch.ones(3, 4, device="meta"))  # would raise "Tensor on device meta is not on ... cpu"
    assert out.shape == (3, 4) and out.device.type == "meta"


def test_pt2_loaded_for_the_cpu_is_untouched(tmp_path):
    model = load_torch(detect(_save(tmp_path)), [])
    assert _graph_devices(model.module) == {"cpu"}
    assert model.module(torch.zeros(1, 4)).shape == (1, 4)
