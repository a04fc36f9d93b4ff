"""The unpad stage end to end on a transformers BERT built from a 2-layer config: the artifact optcli
hands back equals the exported graph on every valid position of right-padded batches, and
`--no-unpad` takes the stage out of the run."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from compile_testkit import read_report, run_main

pytestmark = pytest.mark.slow
SEQ = 48

FACTORY = f'''
import torch
import transformers as tf


def make():
    torch.manual_seed(0)
    bert = tf.BertModel(tf.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=64, max_position_embeddings=64)).eval()

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask)
            return out.last_hidden_state, out.pooler_output

    ids = torch.randint(3, 100, (2, {SEQ}))
    return Net().eval(), {{"input_ids": ids, "attention_mask": torch.ones_like(ids)}}
'''


def padded(lengths: list[int]) -> dict[str, np.ndarray]:
    ids = np.random.default_rng(1).integers(3, 100, (len(lengths), SEQ))
    mask = (np.arange(SEQ)[None, :] < np.array(lengths)[:, None]).astype(np.int64)
    return {"input_ids": np.where(mask == 1, ids, 0).astype(np.int64), "attention_mask": mask}


def test_bert_artifact_equals_the_export_on_valid_positions(tmp_path: Path, torch_mod: Any) -> None:
    pytest.importorskip("transformers")
    import onnxruntime as ort

    from optcli.accuracy import compare_outputs, sequence_mask

    (tmp_path / "bert_factory.py").write_text(FACTORY)
    out = tmp_path / "out"
    code, _, err = run_main("compile", f"{tmp_path / 'bert_factory.py'}:make", "--out", str(out), "--target", "cpu",
                            "--backend", "onnxruntime", "--no-bench")
    assert code == 0, err
    report = read_report(out)
    unpad = next(s for s in report["stages"] if s["name"] == "unpad")
    assert unpad["status"] == "ok" and unpad["details"]["applied"], unpad
    assert list(unpad["details"]["sequence_outputs"].values()) == [[1]]  # the hidden states, not the pooled vector
    export = out / next(s for s in report["stages"] if s["name"] == "export")["artifact"]
    final = out / report["final"]["artifact"]
    ref_session = ort.InferenceSession(str(export), providers=["CPUExecutionProvider"])
    session = ort.InferenceSession(str(final), providers=["CPUExecutionProvider"])
    for lengths in ([5, 17, 1], [48, 2], [9]):
        feeds = padded(lengths)
        ref, got = ref_session.run(None, feeds), session.run(None, feeds)
        acc = compare_outputs(ref, got, ["hidden", "pooled"], valid=sequence_mask(feeds))
        assert acc["max_abs_err"] < 1e-4 and acc["cosine_min"] > 0.99999, (lengths, acc)
        assert not got[0][:, 32:].any() if max(lengths) <= 32 else True  # computed to 32 at most, 0 past it

    # length_buckets: a batch of mixed lengths runs as sub-batches; the rows come back in order, equal
    # on valid positions, the pooled output equal throughout
    import optcli

    feeds = padded([3, 47, 5, 30, 2, 18, 44, 9])
    with optcli.load(final) as plain, optcli.load(final, length_buckets=True) as bucketed:
        want, got = plain.predict(feeds), bucketed.predict(feeds)
        assert bucketed.stats() == {"calls": 1, "sub_batches": 3}  # extents to 16, 32, 48
    names = list(want)
    acc = compare_outputs([want[n] for n in names], [got[n] for n in names], names, valid=sequence_mask(feeds))
    assert acc["max_abs_err"] < 1e-4 and acc["cosine_min"] > 0.99999, acc

    # OpenVINO's candidates start from the exporter's graph: the stage proved the same rewrite there, and
    # the IR computes only to the bucket too (0 past it, as the rewrite pads), not every padded position
    ov = pytest.importorskip("openvino")
    code, _, err = run_main("compile", str(export), "--out", str(tmp_path / "ov"), "--target", "cpu",
                            "--backend", "openvino", "--no-bench")
    assert code == 0, err
    report = read_report(tmp_path / "ov")
    twin = next(s for s in report["stages"] if s["name"] == "build")["details"]["unpad_source"]
    assert len(twin) == 1 and twin[0]["applied"] and twin[0]["proof"][0]["max_abs_err"] < 1e-4, twin
    assert report["final"]["format"] == "openvino"
    compiled = ov.Core().compile_model(str(tmp_path / "ov" / report["final"]["artifact"]), "CPU")
    feeds = padded([5, 17, 1])
    hidden = np.asarray(compiled(feeds)[compiled.outputs[0]])
    assert hidden.shape[1] == SEQ and hidden[:, :17].any() and not hidden[:, 32:].any()

    # --no-unpad: the same ONNX, the stage is not in the run
    code, _, err = run_main("compile", str(export), "--out", str(tmp_path / "plain"), "--target", "cpu",
                            "--backend", "onnxruntime", "--no-bench", "--no-unpad")
    assert code == 0, err
    assert "unpad" not in [s["name"] for s in read_report(tmp_path / "plain")["stages"]]
