"""The fallback search as an algorithm: never worse between rounds, finds the damaging units, keeps
its budget, never calls everything-in-float an INT8 result. The model of accuracy is a function
here (each unit adds some damage, some interactions); the real quantizer is in tests/integration."""
from __future__ import annotations

import random

import pytest

from optcli.quantize.fallback_search import FallbackSearch, Trial, accepts

TOL = 0.99


class Clock:
    """Each evaluation costs `step` seconds of a clock the test owns (the budget is then exact)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make_eval(damage: dict[str, float], clock: Clock, step: float = 1.0, interaction: float = 0.0):
    def evaluate(excluded: frozenset[str]):
        clock.now += step
        lost = sum(d for u, d in damage.items() if u not in excluded)
        # a float unit next to INT8 ones can also cost a little (requantization between them)
        lost += interaction * len(excluded) * (len(damage) - len(excluded)) / max(len(damage), 1)
        cos = max(0.0, 1.0 - lost)
        return {"cosine_mean": cos}, cos >= TOL
    return evaluate


def check_monotone(rounds: list[dict]) -> None:
    """Kept accuracy never decreases while the tolerance is missed; once met it is never lost."""
    met = False
    for prev, cur in zip(rounds, rounds[1:]):
        if met:
            assert cur["passed"], rounds
        elif not cur["passed"]:
            assert cur["cosine"] >= prev["cosine"], (prev, cur)
        met = met or cur["passed"]


@pytest.mark.parametrize("seed", range(60))
def test_rounds_never_get_worse_and_budget_holds(seed: int) -> None:
    rng = random.Random(seed)
    damages = [rng.uniform(-0.002, 0.05) * (rng.random() < 0.5) for _ in range(rng.randint(1, 40))]
    interaction, budget = rng.uniform(0.0, 0.01), rng.uniform(3.0, 60.0)
    damage = {f"u{i}": d for i, d in enumerate(damages)}
    ranked = sorted(damage, key=lambda u: -damage[u])  # a perfect ranking is not assumed below
    ranked = ranked[1::2] + ranked[::2]
    clock = Clock()
    result = FallbackSearch(ranked, make_eval(damage, clock, interaction=interaction), budget, clock=clock).run()
    check_monotone(result.rounds)
    kept = [r for r in result.rounds if r["kept"]]
    assert result.best.score == kept[-1]["cosine"] or abs(result.best.score - kept[-1]["cosine"]) < 1e-6
    assert len(result.best.excluded) < len(damage) or len(damage) == 0
    assert result.seconds <= budget + 1e-9, "an evaluation started that the budget had no room for"
    assert result.best.score >= result.baseline.score or result.best.passed


def test_finds_the_two_damaging_units_among_forty() -> None:
    damage = {f"layer.{i}": 0.0002 for i in range(40)}
    damage["layer.7"] = 0.2
    damage["layer.31"] = 0.05
    clock = Clock()
    ranked = sorted(damage, key=lambda u: -damage[u])
    result = FallbackSearch(ranked, make_eval(damage, clock), 1000, clock=clock).run()
    assert result.passed and result.stopped == "tolerance met"
    assert {"layer.7", "layer.31"} <= result.best.excluded
    assert len(result.best.excluded) <= 4, sorted(result.best.excluded)  # the prune pass gives the rest back


def test_a_misleading_ranking_still_finds_them_by_groups() -> None:
    """The local ranking puts the damaging units last: the group screen measures end to end."""
    damage = {f"n{i}": 0.0 for i in range(32)}
    damage["n30"], damage["n31"] = 0.3, 0.3
    clock = Clock()
    ranked = [f"n{i}" for i in range(32)]
    result = FallbackSearch(ranked, make_eval(damage, clock), 1000, clock=clock).run()
    assert result.passed and {"n30", "n31"} == set(result.best.excluded)


def test_budget_stops_the_search_and_keeps_the_best_so_far() -> None:
    damage = {f"u{i}": 0.01 for i in range(30)}
    clock = Clock()
    result = FallbackSearch(list(damage), make_eval(damage, clock, step=10.0), 45, clock=clock).run()
    assert result.stopped == "budget spent" and not result.passed
    assert result.evaluations <= 5 and result.seconds <= 45
    check_monotone(result.rounds)


def test_everything_in_float_is_never_accepted() -> None:
    current = Trial(frozenset({"a"}), {"cosine_mean": 0.5}, False)
    everything = Trial(frozenset({"a", "b"}), {"cosine_mean": 1.0}, True)
    assert not accepts(everything, current, "add", 2)
    assert accepts(everything, current, "add", 3)


def test_prune_may_spend_accuracy_above_the_tolerance_only() -> None:
    met = Trial(frozenset({"a", "b"}), {"cosine_mean": 0.999}, True)
    assert accepts(Trial(frozenset({"a"}), {"cosine_mean": 0.995}, True), met, "prune", 10)
    assert not accepts(Trial(frozenset({"a"}), {"cosine_mean": 0.98}, False), met, "prune", 10)
    assert not accepts(Trial(frozenset({"a", "b", "c"}), {"cosine_mean": 0.995}, True), met, "add", 10)
