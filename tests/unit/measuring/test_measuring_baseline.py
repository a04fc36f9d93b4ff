"""The regression gate's arithmetic on crafted results (no measuring)."""
from __future__ import annotations

from pathlib import Path

import pytest

from optcli.benchmark.baseline import compare_to_baseline, load_baseline, parse_bound, regression_error, save_baseline
from optcli.benchmark.sweep import BenchResult, SweepPoint
from optcli.errors import RegressionError, UsageError
from optcli.latency import stats_from_samples


def _result(p50s: dict[tuple[int, int], float], sha: str = "a" * 64) -> BenchResult:
    points = []
    for (batch, conc), p50 in p50s.items():
        stats = stats_from_samples([p50] * 5, batch, "onnxruntime-cpu")
        points.append(SweepPoint(batch, conc, stats, batch * conc * 1000.0 / p50, (p50 * 0.99, p50 * 1.01)))
    return BenchResult({"sha256": sha}, "onnxruntime-cpu", {}, {}, {"cpu": "X"}, points, None)


@pytest.mark.parametrize("text, value", [("10%", 0.10), ("2.5%", 0.025), ("0.1", 0.1), (0.2, 0.2), (" 0 % ", 0.0)])
def test_parse_bound(text, value) -> None:
    assert parse_bound(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["10", "ten", "-5%", "%"])
def test_parse_bound_refuses(text) -> None:
    with pytest.raises(UsageError):
        parse_bound(text)


def test_within_and_beyond_the_bound() -> None:
    base = _result({(1, 1): 1.0, (8, 2): 4.0})
    ok = compare_to_baseline(_result({(1, 1): 1.09, (8, 2): 3.0}), base, 0.10)
    assert not ok["regressed"] and [r["regressed"] for r in ok["rows"]] == [False, False]
    bad = compare_to_baseline(_result({(1, 1): 1.11, (8, 2): 3.0}), base, 0.10)
    assert bad["regressed"] and [r["regressed"] for r in bad["rows"]] == [True, False]
    assert bad["rows"][0]["p50_change"] == pytest.approx(0.11) and bad["rows"][0]["beyond_noise"]
    err = regression_error(bad, "base.json")
    assert isinstance(err, RegressionError) and err.exit_code == 5
    assert "batch 1, concurrency 1: p50 latency rose 11.0%" in err.message and "base.json" in err.hint


def test_throughput_metric() -> None:
    base = _result({(4, 4): 2.0})
    slower = _result({(4, 4): 2.5})
    by_tput = compare_to_baseline(slower, base, 0.15, metric="throughput")
    assert by_tput["regressed"] and "throughput fell 20.0%" in regression_error(by_tput, "b").message
    with pytest.raises(UsageError, match="unknown regression metric"):
        compare_to_baseline(slower, base, 0.1, metric="p99")


def test_notes_and_unmatched_points(tmp_path: Path) -> None:
    base = _result({(1, 1): 1.0, (8, 1): 2.0}, sha="b" * 64)
    cmp = compare_to_baseline(_result({(1, 1): 1.0}), base, 0.1)
    assert "the artifact differs from the baseline's (sha256)" in cmp["notes"]
    assert "1 baseline point(s) not measured in this run" in cmp["notes"]
    with pytest.raises(UsageError, match="no \\(batch, concurrency\\) point in common"):
        compare_to_baseline(_result({(2, 2): 1.0}), base, 0.1)


def test_baseline_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    save_baseline(_result({(1, 1): 1.5}), path)
    back = load_baseline(path)
    assert back.point(1, 1).latency.p50 == pytest.approx(1.5) and back.point(1, 1).median_ci_ms[1] > 1.5
    (tmp_path / "other.json").write_text('{"kind": "optcli-profile"}')
    with pytest.raises(UsageError, match="not an optcli bench baseline"):
        load_baseline(tmp_path / "other.json")
    with pytest.raises(UsageError, match="baseline not found"):
        load_baseline(tmp_path / "missing.json")
