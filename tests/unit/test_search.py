"""The candidate search on synthetic latencies: ordering by prediction, building only what could win,
sequential elimination, the time budget, and thorough == exhaustive."""
from __future__ import annotations

import numpy as np
import pytest

from optcli.backends.onnxruntime.priors import INPUT as ORT_INPUT
from optcli.backends.openvino.priors import NNCF, NNCF_TRANSFORMER, S8S8
from optcli.search.elimination import Standing, clearly_behind, settled, standing, tied_for_good
from optcli.search.priors import UNKNOWN, Features, Prediction, predict
from optcli.search.search import Search


class Bench:
    """Fake candidates: each has a true median latency; a clock that builds and measures advance."""

    def __init__(self, latency: dict[str, float], rejected: set[str] = frozenset(), failed: set[str] = frozenset(),
                 build_cost: float = 1.0) -> None:
        self.latency, self.rejected, self.failed, self.cost = latency, rejected, failed, build_cost
        self.now = 0.0
        self.built: list[str] = []
        self.rng = np.random.default_rng(0)

    def clock(self) -> float:
        return self.now

    def build(self, name: str) -> str | None:
        self.built.append(name)
        self.now += self.cost
        return None if name in self.failed else name

    def passes(self, handle: str) -> bool:
        return handle not in self.rejected

    def measure(self, handle: str) -> list[float]:
        mu = self.latency[handle]
        samples = list(mu * (1 + 0.02 * self.rng.standard_normal(5)))
        self.now += sum(samples) / 1000.0
        return samples


P = {"a": Prediction(1.0, 0.05, "a wins"), "b": Prediction(1.5, 0.10, "b is slower"),
     "c": Prediction(1.02, 0.02, "c ties", less_accurate=True)}


def test_thorough_builds_and_measures_every_candidate_in_the_given_order() -> None:
    bench = Bench({"a": 10.0, "b": 15.0, "c": 10.2}, rejected={"c"})
    r = Search("thorough", min_rounds=3, clock=bench.clock).run(["b", "c", "a"], bench.build, bench.passes,
                                                                 bench.measure, P)
    assert bench.built == ["b", "c", "a"]
    assert [e.name for e in r.entries] == ["b", "c", "a"]
    assert {e.name: e.status for e in r.entries} == {"b": "passed", "c": "rejected", "a": "passed"}
    # every candidate that ran is measured, the rejected one too (the report shows its cost), and none early-stopped
    calls = {e.name: len(e.samples) for e in r.entries}
    assert calls["a"] == calls["b"] == calls["c"] > 0
    assert not any(e.eliminated for e in r.entries) and r.degraded is None


def test_fast_builds_the_likely_winner_first_and_skips_what_cannot_win() -> None:
    bench = Bench({"a": 10.0, "b": 15.0, "c": 10.2})
    r = Search("fast", clock=bench.clock).run(["b", "c", "a"], bench.build, bench.passes, bench.measure, P)
    assert bench.built == ["a"]
    assert r.entry("a").status == "passed" and r.entry("a").samples  # measured for the report
    for name in ("b", "c"):
        e = r.entry(name)
        assert e.status == "not built" and "cannot beat a" in e.reason and not e.samples


def test_fast_confirms_with_a_free_candidate_and_eliminates_it_once_clearly_behind() -> None:
    bench = Bench({"a": 10.0, "b": 15.0, "c": 10.2})
    r = Search("fast", clock=bench.clock).run(["b", "c", "a"], bench.build, bench.passes, bench.measure, P,
                                              free={"b"})
    assert bench.built == ["b", "a"]  # free first: measuring it tests the prediction
    b = r.entry("b")
    assert b.eliminated and "clearly behind a" in b.reason
    assert len(b.samples) <= len(r.entry("a").samples)
    assert r.rounds == 3  # min_rounds, then settled


def test_fast_explores_when_measurement_refutes_the_prediction() -> None:
    # The free candidate b was predicted 1.5x slower but is faster: now a and c may win, so c is built.
    bench = Bench({"a": 10.0, "b": 6.0, "c": 5.0})
    r = Search("fast", clock=bench.clock).run(["a", "b", "c"], bench.build, bench.passes, bench.measure, P,
                                              free={"b"})
    assert bench.built == ["b", "a", "c"]
    assert r.entry("a").eliminated and r.entry("b").eliminated
    assert [e.name for e in r.entries if e.samples and not e.eliminated] == ["c"]


def test_a_rejected_leader_makes_the_next_candidate_worth_building() -> None:
    bench = Bench({"a": 10.0, "b": 15.0, "c": 10.2}, rejected={"a"})
    r = Search("fast", clock=bench.clock).run(["a", "b", "c"], bench.build, bench.passes, bench.measure, P)
    assert bench.built == ["a", "c"]
    assert r.entry("a").status == "rejected" and r.entry("c").status == "passed"
    assert r.entry("b").status == "not built"


def test_a_more_accurate_candidate_is_built_where_it_could_tie_a_less_accurate_leader() -> None:
    preds = {"fast_but_lossy": Prediction(0.95, 0.05, "wins on speed, loses accuracy", less_accurate=True),
             "accurate": Prediction(1.0, 0.05, "the accurate one"), "slow": Prediction(1.3, 0.05, "slow")}
    bench = Bench({"fast_but_lossy": 9.5, "accurate": 10.0, "slow": 13.0})
    r = Search("fast", clock=bench.clock).run(list(preds), bench.build, bench.passes, bench.measure, preds,
                                              free={"fast_but_lossy"})
    assert bench.built == ["fast_but_lossy", "accurate"]
    assert "cannot even tie" in r.entry("slow").reason


def test_ties_within_the_band_stop_measuring_without_a_winner_on_speed() -> None:
    flat = {k: Prediction(1.0, 0.5, "unknown") for k in "ab"}
    bench = Bench({"a": 10.0, "b": 10.05})
    r = Search("fast", min_rounds=3, clock=bench.clock).run(["a", "b"], bench.build, bench.passes, bench.measure, flat)
    assert bench.built == ["a", "b"]
    assert not any(e.eliminated for e in r.entries)
    assert r.rounds < 10 and not r.notes  # settled as a tie long before max_seconds


def test_time_budget_degrades_to_the_best_so_far_and_says_so() -> None:
    flat = {k: Prediction(1.0, 0.5, "unknown") for k in "abc"}
    bench = Bench({"a": 10.0, "b": 9.0, "c": 8.0}, build_cost=5.0)
    r = Search("thorough", clock=bench.clock, deadline=4.0).run(["a", "b", "c"], bench.build, bench.passes,
                                                                bench.measure, flat)
    assert bench.built == ["a"]  # the first build already passed the deadline
    assert "time budget" in r.degraded
    assert [e.status for e in r.entries] == ["passed", "not built", "not built"]
    assert "time budget" in r.entry("b").reason
    assert r.entry("a").samples  # still measured once, so the choice has a latency


def test_over_budget_with_nothing_usable_still_builds_until_one_passes() -> None:
    bench = Bench({"a": 10.0, "b": 9.0}, rejected={"a"}, build_cost=5.0)
    r = Search("fast", clock=bench.clock, deadline=1.0).run(["a", "b"], bench.build, bench.passes, bench.measure,
                                                            {k: UNKNOWN for k in "ab"})
    assert bench.built == ["a", "b"] and r.entry("b").status == "passed"


def test_failed_builds_are_recorded_and_the_search_goes_on() -> None:
    bench = Bench({"a": 10.0, "c": 10.2}, failed={"a"})
    r = Search("fast", clock=bench.clock).run(["a", "c"], bench.build, bench.passes, bench.measure, P)
    assert r.entry("a").status == "failed" and r.entry("a").build_seconds == 1.0
    assert r.entry("c").status == "passed"


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError):
        Search("quick")


# -- elimination ---------------------------------------------------------------------------------
def test_clearly_behind_needs_separated_intervals_and_more_than_the_tie_band() -> None:
    lead = Standing("a", 10.0, 9.9, 10.1, 50)
    assert clearly_behind(Standing("b", 12.0, 11.8, 12.2, 50), lead)
    assert not clearly_behind(Standing("b", 10.3, 10.2, 10.4, 50), lead)      # within the band: a tie
    assert not clearly_behind(Standing("b", 12.0, 9.5, 14.0, 50), lead)       # overlapping intervals
    assert tied_for_good(Standing("b", 10.1, 10.0, 10.2, 50), lead)
    assert not tied_for_good(Standing("b", 10.1, 9.0, 11.0, 50), lead)
    assert settled([lead, Standing("b", 12.0, 11.8, 12.2, 50), Standing("c", 10.1, 10.0, 10.2, 50)])
    assert not settled([lead, Standing("b", 10.5, 9.0, 12.0, 50)])


def test_standing_is_the_median_with_its_interval() -> None:
    s = standing("a", [1.0, 2.0, 3.0, 4.0, 100.0])
    assert s.p50 == 3.0 and s.low <= 3.0 <= s.high and s.calls == 5


# -- priors --------------------------------------------------------------------------------------
def test_the_most_specific_prior_applies_and_cites_its_evidence() -> None:
    big = Features("int8", "encoder", "large", "vnni")
    small = Features("int8", "encoder", "small", "vnni")
    assert predict(big, NNCF_TRANSFORMER).ratio == 1.0
    assert predict(small, NNCF_TRANSFORMER).ratio > 1.0  # tiny_bert: NNCF's defaults were faster
    assert predict(big, NNCF).less_accurate and "MiniLM" in predict(big, NNCF).evidence
    assert predict(big, ORT_INPUT).ratio > 1.2
    assert predict(Features("int8", "other", "large", "vnni"), S8S8) is UNKNOWN


def test_priors_measured_with_vnni_are_less_certain_without_it() -> None:
    vnni = predict(Features("int8", "conv", "large", "vnni"), NNCF)
    plain = predict(Features("int8", "conv", "large", "plain"), NNCF)
    assert plain.ratio == vnni.ratio and plain.spread == 2 * vnni.spread
    # where this CPU has its own evidence, that row applies as measured
    assert "AVX2" in predict(Features("int8", "encoder", "large", "plain"), NNCF).evidence


def test_a_leader_measured_well_inside_the_accuracy_budget_must_be_beaten_on_speed() -> None:
    """The evidence (from other models) has the leader less accurate, but this run measured it within
    ACCURACY_HEADROOM of the budget: a more accurate candidate that could only tie it is not built."""
    from optcli.search.search import ACCURACY_HEADROOM

    preds = {"fast_but_lossy": Prediction(0.95, 0.05, "wins on speed, loses accuracy", less_accurate=True),
             "accurate": Prediction(1.0, 0.05, "the accurate one")}
    for used, built in ((0.04, ["fast_but_lossy"]), (ACCURACY_HEADROOM + 0.5, ["fast_but_lossy", "accurate"]),
                        (None, ["fast_but_lossy", "accurate"])):
        bench = Bench({"fast_but_lossy": 9.5, "accurate": 10.0})
        r = Search("fast", clock=bench.clock).run(list(preds), bench.build, bench.passes, bench.measure, preds,
                                                  free={"fast_but_lossy"}, budget_used=lambda h, u=used: u)
        assert bench.built == built, used
        if len(built) == 1:
            assert "accuracy budget" in r.entry("accurate").reason
            assert r.entry("fast_but_lossy").to_json()["accuracy_budget_used"] == used


def test_budget_used_is_the_worst_output_against_each_bound() -> None:
    from optcli.accuracy import budget_used

    summary = {"outputs": {"a": {"cosine_mean": 0.999, "max_abs_err": 0.01},
                           "b": {"cosine_mean": 0.995, "max_abs_err": 0.04, "top1_agreement": 0.99}}}
    assert budget_used(summary, 0.99, None, None) == pytest.approx(0.5)
    assert budget_used(summary, None, 0.05, None) == pytest.approx(0.8)
    assert budget_used(summary, 0.99, 0.1, 0.98) == pytest.approx(0.5)
    assert budget_used(summary, 1.0, None, None) is None and budget_used(summary, None, None, None) is None


def test_each_backends_priors_live_in_its_folder_and_reach_the_search() -> None:
    # Issue 32: the priors are data, each backend's rows in its own folder, read through its descriptor.
    from optcli.backends import registry
    from optcli.search.priors import GENERAL_PRIORS, all_priors

    rows = all_priors()
    for backend in registry.all_backends():
        own = [p for p in rows if p.key.startswith(f"{backend.name}:")]
        if backend.priors:
            module = backend.priors.split(":")[0]
            assert module.startswith(f"optcli.backends.{backend.name.replace('-', '_')}."), backend.priors
            assert own and set(own) == set(registry.load_object(backend.priors)), backend.name
        else:
            assert not own, f"{backend.name} has priors rows but its descriptor names none"
    # what is left outside the backends' folders is about no one backend
    assert not [p.key for p in GENERAL_PRIORS if p.key.split(":")[0] in registry.names()]
    assert len(rows) == len(set(rows))


def test_a_backend_without_priors_gets_the_unknown_prediction() -> None:
    f = Features("int8", "encoder", "large", "vnni")
    assert predict(f, "somebackend:recipe") == UNKNOWN
