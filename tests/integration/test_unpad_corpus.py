"""The unpad corpus (issue 31): text encoders exported the ways people export them (dynamo; TorchScript at
a fixed length; TorchScript with a dynamic sequence axis; opsets 14 and 17), from transformers configs.
On every one, `optcli compile model.onnx` applies unpad and proves it, and the rewrite of the exporter's
graph (build-cpu's OpenVINO candidates) applies too. Checked again here, independently of the stage's
proof: the artifact equals the export on valid positions of right-padded batches (onnxruntime), and takes
a batch given unpadded at its own length.

The default run holds one case of each construct that broke the rewrite before; the rest of the matrix
(benchmarks/unpad_corpus.py prints it: docs/benchmarks/unpad-corpus.md) is marked slow."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from compile_testkit import REPO, load_module

pytest.importorskip("transformers")
ort = pytest.importorskip("onnxruntime")


corpus = load_module("unpad_corpus_models", REPO / "benchmarks" / "unpad_corpus_models.py")
# One case per construct that broke the rewrite before issue 31 (see docs/benchmarks/unpad-corpus.md).
DEFAULT = {
    ("sentence-transformers (bert, mean pool, L2)", "torchscript-fixed", 17),  # token_type_ids buffer Expand
    ("distilbert", "torchscript-fixed", 14),       # a flattened mask read at b * S + j
    ("bert+token_type_ids", "torchscript-dynamic", 14),  # a dynamic axis at opset 14 (no Shape start/end)
    ("roberta", "torchscript-fixed", 17),          # position ids from the mask's cumsum
    ("bert", "dynamo", 17),                        # every shape fixed, batch 1 included
}
CASES = [pytest.param(c, id=c.label.replace(" | ", "-").replace(" ", "_"),
                      marks=() if (c.family, c.exporter, c.opset) in DEFAULT else pytest.mark.slow)
         for c in corpus.all_cases()]


def right_padded(lengths: list[int], length: int, names: list[str]) -> dict[str, np.ndarray]:
    ids = np.random.default_rng(sum(lengths)).integers(3, corpus.VOCAB, (len(lengths), length))
    mask = (np.arange(length)[None, :] < np.array(lengths)[:, None]).astype(np.int64)
    feeds = {"input_ids": np.where(mask == 1, ids, 0).astype(np.int64), "attention_mask": mask}
    if "token_type_ids" in names:
        feeds["token_type_ids"] = np.zeros_like(mask)
    return feeds


def by_rows(run: Any, feeds: dict[str, np.ndarray], fixed_batch: bool) -> list[np.ndarray]:
    """`run(feeds)` as a list of outputs; row by row for an export with a fixed batch of 1 (dynamo's plain call)."""
    if not fixed_batch:
        return list(run(feeds))
    rows = [list(run({k: v[i:i + 1] for k, v in feeds.items()})) for i in range(len(feeds["input_ids"]))]
    return [np.concatenate([r[j] for r in rows]) for j in range(len(rows[0]))]


@pytest.mark.parametrize("case", CASES)
def test_unpad_applies_and_is_proven_on_every_export(case: Any, tmp_path: Path) -> None:
    import optcli
    from optcli.accuracy import compare_outputs, sequence_mask

    outcome = corpus.check(case, tmp_path)
    assert outcome.applied, f"{case.label}: {outcome.reason}"
    assert outcome.twin_applied, f"{case.label} (exporter's graph): {outcome.twin_reason}"
    export = ort.InferenceSession(str(outcome.model), providers=["CPUExecutionProvider"])
    names = [i.name for i in export.get_inputs()]
    shape = export.get_inputs()[0].shape
    length, fixed_batch = (corpus.LENGTH if isinstance(shape[1], int) else 64), isinstance(shape[0], int)
    if not isinstance(shape[1], int):  # a dynamic sequence axis: the inputs are sliced, no constant changes
        assert outcome.constants_changed == [], outcome.constants_changed
    with optcli.load(outcome.artifact) as artifact:
        def predict(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
            return list(artifact.predict(feeds).values())

        outputs = [o.name for o in artifact.outputs]
        for lengths in ([5, 17, 1], [length, 2], [9]):
            feeds = right_padded(lengths, length, names)
            want, got = by_rows(lambda f: export.run(None, f), feeds, fixed_batch), by_rows(predict, feeds, fixed_batch)
            acc = compare_outputs(want, got, outputs, valid=sequence_mask(feeds))
            assert acc["max_abs_err"] < 1e-4 and acc["cosine_min"] > 0.9999, (lengths, acc)
        # unpadded, at the batch's own length: what a sentence-transformers user sends
        feeds = right_padded([14, 9], length, names)
        want = by_rows(lambda f: export.run(None, f), feeds, fixed_batch)
        short = {k: v[:, :14] for k, v in feeds.items()}
        got = by_rows(predict, short, fixed_batch)
        acc = compare_outputs([w[:, :14] if w.ndim == 3 else w for w in want], got, outputs,
                              valid=sequence_mask(short))
        assert acc["max_abs_err"] < 1e-4 and acc["cosine_min"] > 0.9999, acc
