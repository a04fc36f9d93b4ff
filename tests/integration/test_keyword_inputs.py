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


@pytest.mark.parametrize("dynamic_length", [False, True])
def test_a_pt2_keeps_the_shapes_it_was_exported_with(tmp_path: Path, dynamic_length: bool,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A .pt2 program's shapes were fixed by its own export: optcli exports it once (asking it for a
    symbolic sequence cost BERT-base a 3 s export that always failed), and a sequence the program left
    dynamic stays dynamic in the ONNX."""
    from optcli import api

    model = TwoInputs().eval()
    ids = torch.randint(0, 50, (2, 8))
    dims = {0: torch.export.Dim("batch", min=1, max=64)}
    if dynamic_length:
        dims[1] = torch.export.Dim("length", min=2, max=32)
    ep = torch.export.export(model, (), kwargs={"input_ids": ids, "attention_mask": torch.ones_like(ids)},
                             dynamic_shapes={"input_ids": dims, "attention_mask": dims})
    path = tmp_path / "kw.pt2"
    torch.export.save(ep, str(path))
    calls = []
    export = torch.onnx.export
    monkeypatch.setattr(torch.onnx, "export", lambda *a, **k: calls.append(1) or export(*a, **k))
    report = api.compile(path, out=tmp_path / "out", bench=False)
    assert report.stage("export").status == "ok" and len(calls) == 1
    assert report.stage("export").details["attempts"] == []
    import onnxruntime as ort

    sess = ort.InferenceSession(str(tmp_path / "out" / report.final["artifact"]), providers=["CPUExecutionProvider"])
    length = 13 if dynamic_length else 8
    feeds = {"input_ids": np.zeros((3, length), np.int64), "attention_mask": np.ones((3, length), np.int64)}
    assert sess.run(None, feeds)[0].shape == (3, 4)
    # a dynamic program's length is taken at the example's size and named like an exported folder's
    assert sess.get_inputs()[0].shape[1] == ("sequence" if dynamic_length else 8)
    assert (report.stage("export").details["dynamic_sequence"] is not None) == dynamic_length
