"""An input over the most an artifact takes is refused with a one-line UsageError naming the input, its
length and the most, with a hint, before onnxruntime sees it (optcli/input_limits.py), on every way in:
`predict`, `predict_async`, batching, and `optcli serve` (a 400 for that request; the server stays up).

The class, on real models built here from a transformers config (no hub): a BERT exported by the
TorchScript exporter at a fixed length S and compiled by optcli, whose unpadded artifact takes any
length up to S (its dims are dynamic, its position constants S long: onnxruntime itself fails past S
with a raw message about a node); that export's own fixed dims (every input); and (tests/unit/
test_input_limits.py) fixed dims other than the sequence: the batch, an image's height and width."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import numpy as np
import pytest

import optcli
from compile_testkit import REPO, load_module
from optcli.errors import UsageError
from serve_testkit import needs_server, optcli_serve

pytest.importorskip("transformers")
ort = pytest.importorskip("onnxruntime")

NAMES = ["input_ids", "attention_mask", "token_type_ids"]


corpus = load_module("unpad_corpus_models", REPO / "benchmarks" / "unpad_corpus_models.py")
S = corpus.LENGTH


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """(the export at a fixed length S, optcli's unpadded artifact of it)."""
    outcome = corpus.check(corpus.Case("bert+token_type_ids", "torchscript-fixed", 17), tmp_path_factory.mktemp("lim"))
    assert outcome.applied, outcome.reason
    return outcome.model, outcome.artifact


def feeds(length: int, long: str | None = None, over: int = S + 12) -> dict[str, np.ndarray]:
    """Batch-1 inputs `length` long; the input `long` (if any) `over` long instead."""
    out = {}
    for name in NAMES:
        n = over if name == long else length
        out[name] = (np.arange(n) % 50 + 3)[None].astype(np.int64) if name == "input_ids" else np.ones((1, n), np.int64)
    out["token_type_ids"][:] = 0
    return out


def assert_refused(err: pytest.ExceptionInfo[UsageError], name: str, given: int, most: int) -> None:
    message = str(err.value)
    assert "\n" not in message and "\n" not in (err.value.hint or ""), message
    assert f"input {name!r}" in message and str(given) in message and f"{most}" in message, message
    assert "onnxruntime" not in message.lower() and "node" not in message.lower(), message
    assert err.value.hint


def test_the_unpadded_artifact_takes_up_to_s_and_onnxruntime_alone_fails_past_it(compiled: Any) -> None:
    """The bound is real: without optcli's check the runtime fails deep inside, with its raw message."""
    _, artifact = compiled
    session = ort.InferenceSession(str(artifact), providers=["CPUExecutionProvider"])
    assert [i.shape for i in session.get_inputs()] == [["batch", "sequence"]] * 3  # no fixed length to check
    session.run(None, feeds(S))
    session.run(None, feeds(14))
    with pytest.raises(Exception, match="node|Node") as raw:
        session.run(None, feeds(S + 12))
    assert "INVALID_ARGUMENT" in str(raw.value) or "RUNTIME_EXCEPTION" in str(raw.value)


@pytest.mark.parametrize("long", [None, *NAMES])
def test_predict_refuses_an_input_over_s_naming_it(compiled: Any, long: str | None) -> None:
    """Every sequence input, alone over S or all of them: predict, predict_async and batching."""
    _, artifact = compiled
    bad = feeds(14, long) if long else feeds(S + 12)
    name = long or "input_ids"
    with optcli.load(artifact) as model:
        assert model.predict(feeds(S))["output"].shape == (1, S, 32)  # S itself is taken
        with pytest.raises(UsageError) as err:
            model.predict(bad)
        assert_refused(err, name, S + 12, S)
        assert "dynamic sequence axis" in (err.value.hint or "") and "longer fixed length" in (err.value.hint or "")
        with pytest.raises(UsageError) as err:
            model.predict_async(bad).result(timeout=60)
        assert_refused(err, name, S + 12, S)
    with optcli.load(artifact, batching={"max_batch_size": 4}) as batched:
        with pytest.raises(UsageError) as err:
            batched.predict(bad)
        assert_refused(err, name, S + 12, S)
        with pytest.raises(UsageError):
            batched.predict_async(bad).result(timeout=60)
        assert batched.predict(feeds(9))["output"].shape == (1, 9, 32)  # the batcher still runs


@pytest.mark.parametrize("long", NAMES)
def test_the_fixed_length_export_refuses_a_longer_input_the_same_way(compiled: Any, long: str) -> None:
    export, _ = compiled
    with optcli.load(export) as model:
        with pytest.raises(UsageError) as err:
            model.predict(feeds(S, long))
    assert_refused(err, long, S + 12, S)
    assert "fixed" in str(err.value)


def _with_server_marks(test: Any) -> Any:
    for mark in needs_server:  # slow, and skipped without the serve extra
        test = mark(test)
    return test


@_with_server_marks
def test_serve_answers_400_for_an_input_over_s_and_stays_up(compiled: Any) -> None:
    _, artifact = compiled

    def infer(url: str, length: int) -> tuple[int, dict[str, Any]]:
        body = {"inputs": [{"name": n, "shape": list(v.shape), "datatype": "INT64", "data": v.ravel().tolist()}
                           for n, v in feeds(length).items()]}
        request = urllib.request.Request(url + "/infer", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    with optcli_serve(artifact, "--max-batch-size", "4") as (ready, proc):
        url = ready["urls"]["http"]
        status, answer = infer(url, S + 12)
        assert status == 400, (status, answer)
        assert "'input_ids'" in answer["error"] and f"at most {S}" in answer["error"], answer
        assert "dynamic sequence axis" in answer["error"], answer  # the hint travels with it
        status, answer = infer(url, 14)
        assert status == 200, answer
        assert answer["outputs"][0]["shape"] == [1, 14, 32]
        assert proc.poll() is None
