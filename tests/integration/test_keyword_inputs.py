"""A .pt2 exported with keyword inputs (how transformers models are usually exported) compiles."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")


class TwoInputs(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(50, 16)
        self.fc = torch.nn.Linear(16, 4)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        h = self.emb(input_ids) * attention_mask.unsqueeze(-1)
        return self.fc(h.mean(1))


def test_pt2_with_keyword_example_inputs(tmp_path: Path) -> None:
    from optcli import api

    model = TwoInputs().eval()
    ids = torch.randint(0, 50, (2, 8))
    batch = torch.export.Dim("batch", min=1, max=64)
    ep = torch.export.export(model, (), kwargs={"input_ids": ids, "attention_mask": torch.ones_like(ids)},
                             dynamic_shapes={"input_ids": {0: batch}, "attention_mask": {0: batch}})
    path = tmp_path / "kw.pt2"
    torch.export.save(ep, str(path))
    report = api.compile(path, out=tmp_path / "out", bench=False)
    export = report.stage("export")
    assert export.status == "ok" and export.accuracy["cosine_min"] > 0.9999
    assert [i["name"] for i in report.model["inputs"]] == ["input_ids", "attention_mask"]
    import onnxruntime as ort

    sess = ort.InferenceSession(str(tmp_path / "out" / report.final["artifact"]), providers=["CPUExecutionProvider"])
    feeds = {"input_ids": np.zeros((5, 8), np.int64), "attention_mask": np.ones((5, 8), np.int64)}
    assert sess.run(None, feeds)[0].shape == (5, 4)
