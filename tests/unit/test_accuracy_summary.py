"""The accuracy summary's TypedDicts (optcli/accuracy_summary.py) name every key the code writes and the report
reads, and the report's AccuracyResult carries a summary through unchanged."""
from __future__ import annotations

import dataclasses
import json
import typing

import numpy as np
import pytest

from optcli.accuracy import compare_outputs
from optcli.accuracy_summary import AccuracySummary, OutputSummary, headline
from optcli.report import AccuracyResult
from optcli.report.records import OutputAccuracy


def _keys(typed: type) -> set[str]:
    return set(typing.get_type_hints(typed))


@pytest.mark.parametrize(("record", "typed"), [(AccuracyResult, AccuracySummary), (OutputAccuracy, OutputSummary)])
def test_every_report_field_is_a_key_of_the_summary(record: type, typed: type) -> None:
    fields = {f.name for f in dataclasses.fields(record)} - {"extra"}
    assert fields <= _keys(typed), f"{record.__name__} fields missing from {typed.__name__}: {fields - _keys(typed)}"


def _summary(labels: np.ndarray | None) -> AccuracySummary:
    ref = np.array([[2.0, 0.5], [0.1, 1.0], [1.0, 3.0]], dtype=np.float32)
    got = ref + np.array([[0.0, 0.1], [0.5, 0.0], [0.0, -0.2]], dtype=np.float32)
    return compare_outputs([ref, ref[:, 0]], [got, got[:, 0]], ["logits", "score"], labels=labels)


@pytest.mark.parametrize("labels", [None, np.array([0, 1, 0])])
def test_compare_outputs_writes_only_declared_keys_of_declared_types(labels: np.ndarray | None) -> None:
    summary = _summary(labels)
    hints = typing.get_type_hints(AccuracySummary)
    for key, value in summary.items():
        assert key in hints
        if key != "outputs":
            assert isinstance(value, hints[key]), key
    out_hints = typing.get_type_hints(OutputSummary)
    for entry in summary["outputs"].values():
        assert OutputSummary.__required_keys__ <= set(entry)
        for key, value in entry.items():
            assert isinstance(value, out_hints[key]), key


def test_the_report_record_carries_a_summary_unchanged() -> None:
    summary = _summary(np.array([0, 1, 0]))
    summary.update(reference="fp32-onnx", samples=3, data="random", gate_deferred_to="build",
                   judged={"reference": "sha", "eval": "digest"})
    # the same keys and values (the report writes them in its fields' order), and the same again once read back
    record = AccuracyResult.of(summary)
    assert record.summary() == summary
    assert AccuracyResult.from_json(json.loads(json.dumps(record.to_json()))).summary() == summary


def test_headline_rounds_the_figures_it_has() -> None:
    summary: AccuracySummary = {"cosine_mean": 0.123456789, "max_abs_err": 2, "reference": "torch-fp32"}
    assert headline(summary) == {"cosine_mean": 0.123457, "max_abs_err": 2.0}
    assert headline(summary, ("max_abs_err",), digits=1) == {"max_abs_err": 2.0}
