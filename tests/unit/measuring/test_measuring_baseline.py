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


# --- hostile baseline files (issue 30, items 10 and 11) ---------------------------------------------------
def _saved(tmp_path: Path) -> dict:
    import json

    path = tmp_path / "good.json"
    save_baseline(_result({(1, 1): 1.5, (8, 2): 4.0}), path)
    return json.loads(path.read_text())


def _write(tmp_path: Path, data: object, name: str = "b.json") -> Path:
    import json

    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


@pytest.mark.parametrize("p50", [float("nan"), -1.0, 0.0, float("inf")])
@pytest.mark.parametrize("metric", ["p50", "throughput"])
def test_a_baseline_that_would_turn_the_gate_off_is_refused(tmp_path: Path, p50: float, metric: str) -> None:
    """A p50 (or throughput) of NaN, 0, a negative number or infinity compared as `+0.0% ok`: refused."""
    data = _saved(tmp_path)
    key = "latency_ms" if metric == "p50" else None
    if key:
        data["points"][0]["latency_ms"]["p50"] = p50
    else:
        data["points"][0]["throughput"] = p50
    with pytest.raises(UsageError, match="malformed: point 0: (latency_ms.p50|throughput)"):
        load_baseline(_write(tmp_path, data))


@pytest.mark.parametrize("text", [
    "[" * 100_000 + "]" * 100_000,                                 # RecursionError in json
    '{"kind": "optcli-bench", "points": ' + "[" * 50_000 + "]" * 50_000 + "}",
])
def test_a_deeply_nested_baseline_is_refused(tmp_path: Path, text: str) -> None:
    with pytest.raises(UsageError, match="baseline .* (nested too deeply|is malformed|is not an optcli)"):
        load_baseline(_write(tmp_path, text))


@pytest.mark.parametrize("edit", [
    lambda d: d.update(artifact=[]),                               # AttributeError: .get on a list
    lambda d: d.update(environment="x"),
    lambda d: d.update(points=[[1, 2]]),
    lambda d: d.update(points={"a": 1}),
    lambda d: d["points"][0].update(latency_ms=[1.0]),
    lambda d: d["points"][0].update(batch=True),
    lambda d: d["points"][0].update(batch="1"),
    lambda d: d["points"][0].update(concurrency=10**400),
    lambda d: d["points"][0]["latency_ms"].update(p99="slow"),
    lambda d: d["points"][0].update(p50_ci95_ms=[1.0]),
    lambda d: d["points"][0].update(p50_ci95_ms="x"),
    lambda d: d["points"][0].update(batches=[]),
    lambda d: d["points"][0]["latency_ms"].pop("runs"),
])
def test_a_malformed_baseline_is_a_usage_error(tmp_path: Path, edit) -> None:
    data = _saved(tmp_path)
    edit(data)
    with pytest.raises(UsageError, match="baseline .* is malformed"):
        load_baseline(_write(tmp_path, data))


def test_a_baseline_that_is_not_a_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not a regular file"):
        load_baseline(tmp_path)
    with pytest.raises(UsageError, match="not a regular file"):
        load_baseline(Path("/dev/zero"))  # read whole, it would never end


def test_any_edit_of_a_baseline_loads_and_compares_or_is_a_usage_error(tmp_path: Path) -> None:
    """The class: replace any value anywhere in a saved baseline with any JSON value (NaN and deep
    nesting included); loading and comparing either works or raises UsageError, and a comparison
    that works measures a real change (never the gate silently off)."""
    import json
    import math

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    base = _saved(tmp_path)
    current = _result({(1, 1): 3.0, (8, 2): 8.0})  # twice as slow as the saved baseline everywhere
    leaves = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                       st.text(max_size=5))
    values = st.recursive(leaves, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4),
                                                                                                   inner, max_size=3),
                          max_leaves=8)

    def paths(node, prefix=()):
        yield prefix
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            yield from paths(v, prefix + (k,))

    all_paths = [p for p in paths(base) if p]

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(where=st.sampled_from(all_paths), value=values)
    def check(where, value):
        data = json.loads(json.dumps(base))
        node = data
        for k in where[:-1]:
            node = node[k]
        node[where[-1]] = value
        path = tmp_path / "edited.json"
        path.write_text(json.dumps(data))
        try:
            loaded = load_baseline(path)
            cmp = compare_to_baseline(current, loaded, 0.1)
        except UsageError:
            return
        for row in cmp["rows"]:
            assert math.isfinite(row["p50_change"]) and math.isfinite(row["throughput_change"])
            assert row["p50_ms"][0] > 0 and row["throughput"][0] > 0

    check()


@pytest.mark.parametrize("p50_ms", [256000.0, 0.00001])
def test_rows_keep_very_slow_and_very_fast_points_nonzero(p50_ms: float) -> None:
    """Hypothesis found it: fixed decimals rounded a 256 s/sample baseline's throughput (0.0039/s) to 0.0
    in the comparison's rows; a 10 ns p50 went to 0.0 ms the same way."""
    cmp = compare_to_baseline(_result({(1, 1): p50_ms * 2}), _result({(1, 1): p50_ms}), 0.1)
    row = cmp["rows"][0]
    assert row["p50_ms"][0] == pytest.approx(p50_ms, rel=1e-5)
    assert row["throughput"][0] == pytest.approx(1000.0 / p50_ms, rel=1e-5)
    assert row["regressed"]


@pytest.mark.parametrize("p50_ms", [256000.0, 0.00001])
def test_a_saved_baseline_of_a_very_slow_or_very_fast_model_loads_with_its_figures(tmp_path: Path,
                                                                                     p50_ms: float) -> None:
    """The same class in the saved file itself: `bench --save-baseline` wrote throughput at 2 decimals and
    latencies at 4, so a 256 s/sample model saved throughput 0.0 and a 10 ns p50 saved 0.0 ms, which
    load_baseline then refused as a gate that could never fire."""
    save_baseline(_result({(1, 1): p50_ms}), tmp_path / "b.json")
    loaded = load_baseline(tmp_path / "b.json")
    point = loaded.points[0]
    assert point.latency.p50 == pytest.approx(p50_ms, rel=1e-5)
    assert point.throughput == pytest.approx(1000.0 / p50_ms, rel=1e-5)
    assert point.median_ci_ms[0] == pytest.approx(p50_ms * 0.99, rel=1e-5)
    assert not compare_to_baseline(_result({(1, 1): p50_ms}), loaded, 0.1)["regressed"]
