"""The accuracy-driven INT8 fallback search: which units (units.py) to keep in float, within a budget.

Phases, each trial a full re-quantize and evaluate of the model (the stage supplies `evaluate`):
1. baseline: everything INT8.
2. screen: the ranked units (local damage, sensitivity.py) in contiguous groups, each group kept in
   float alone: which part of the model holds the damage, measured end to end (a measurement: only a
   group that meets the tolerance on its own is kept at once).
3. add: the groups that helped, best first, added to the float set; a group that does not help is
   split in halves and retried (bisection: groups before singletons). An added group is then
   narrowed to the half that holds its gain.
4. prune: units go back to INT8 one at a time, least damaging first.

A round that hurts is undone: the kept configuration's accuracy never decreases while the tolerance
is missed, and once it is met no round may lose it (the prune pass may spend accuracy above the
tolerance on INT8 coverage, never below it). `accepts` is that rule; tests check the sequence.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypedDict

SCREEN_GROUPS = 8
MAX_SINGLETONS = 16
# A gain below this share of the error still left (1 - cosine) is not a reason to keep units in
# float: on ResNet-50 (s8s8, cosine 0.981) a group of 7 convs in float moved the cosine by 5e-5,
# while the one layer that mattered closed 96% of the gap.
MIN_GAIN_SHARE = 0.05


def min_gain(current: Trial) -> float:
    return MIN_GAIN_SHARE * max(1.0 - current.score, 0.0)


@dataclass(frozen=True)
class Trial:
    excluded: frozenset[str]
    accuracy: Mapping[str, object]   # evaluate()'s summary; the search reads its cosine_mean
    passed: bool

    @property
    def score(self) -> float:
        cosine = self.accuracy.get("cosine_mean", 0.0)
        return float(cosine) if isinstance(cosine, (int, float)) else 0.0


# judge(excluded units) -> (accuracy summary, whether it meets the tolerance)
Evaluate = Callable[[frozenset[str]], tuple[Mapping[str, object], bool]]


class Round(TypedDict):
    """One step of the search, as the report's fallback section lists it."""

    round: int
    phase: str
    changed: list[str]
    trial_cosine: float
    trial_passed: bool
    kept: bool
    excluded: int
    cosine: float
    passed: bool
    seconds: float


def relabelled(r: Round, label: Mapping[str, str]) -> Round:
    """`r` with its changed units named by `label` (unit id -> module path), in the same key order."""
    out = r.copy()
    out["changed"] = [label.get(c, c) for c in r["changed"]]
    return out


@dataclass
class SearchResult:
    best: Trial
    baseline: Trial
    rounds: list[Round] = field(default_factory=list)
    evaluations: int = 0
    seconds: float = 0.0
    stopped: str = ""

    @property
    def passed(self) -> bool:
        return self.best.passed


def accepts(trial: Trial, current: Trial, phase: str, n_units: int) -> bool:
    """Whether the search may move from `current` to `trial` (the never-worse rule)."""
    if n_units and len(trial.excluded) >= n_units:
        return False  # everything in float is not an INT8 result
    if current.passed:
        return trial.passed and (phase == "prune" or trial.score >= current.score)
    if trial.passed:
        return True
    if phase == "prune":
        return trial.score >= current.score
    if phase == "screen":
        return False  # the screen measures groups; the add phase builds the float set from them
    return trial.score > current.score + min_gain(current)


def _halves(group: list[str]) -> list[list[str]]:
    mid = (len(group) + 1) // 2
    return [group[:mid], group[mid:]]


class FallbackSearch:
    """Runs the phases over `ranked` units (most damaging first) until the tolerance holds, the
    budget is spent, or nothing is left to try."""

    def __init__(self, ranked: list[str], evaluate: Evaluate,
                 budget_s: float, clock: Callable[[], float] = time.perf_counter,
                 started: float | None = None) -> None:
        self.ranked = list(ranked)
        self._evaluate = evaluate
        self.budget_s = budget_s
        self.clock = clock
        self.t0 = clock() if started is None else started  # ranking before the search counts too
        self.cache: dict[frozenset[str], Trial] = {}
        self.eval_seconds: list[float] = []
        self.rounds: list[Round] = []
        self._current: Trial | None = None
        self.out_of_time = False

    @property
    def current(self) -> Trial:
        """The trial the search stands on (set by run() before any phase reads it)."""
        assert self._current is not None
        return self._current

    @current.setter
    def current(self, trial: Trial) -> None:
        self._current = trial

    # -- bookkeeping -------------------------------------------------------------------------
    def elapsed(self) -> float:
        return self.clock() - self.t0

    def _time_left(self) -> bool:
        """Another evaluation fits in the budget (judged by the mean evaluation so far)."""
        mean = sum(self.eval_seconds) / len(self.eval_seconds) if self.eval_seconds else 0.0
        if self.elapsed() + mean > self.budget_s:
            self.out_of_time = True
        return not self.out_of_time

    def trial(self, excluded: frozenset[str]) -> Trial:
        if excluded not in self.cache:
            t = self.clock()
            accuracy, passed = self._evaluate(excluded)
            self.eval_seconds.append(self.clock() - t)
            self.cache[excluded] = Trial(excluded, accuracy, passed)
        return self.cache[excluded]

    def _round(self, phase: str, changed: list[str], trial: Trial, kept: bool) -> None:
        self.rounds.append({"round": len(self.rounds), "phase": phase, "changed": changed,
                            "trial_cosine": round(trial.score, 6), "trial_passed": trial.passed, "kept": kept,
                            "excluded": len(self.current.excluded), "cosine": round(self.current.score, 6),
                            "passed": self.current.passed, "seconds": round(self.elapsed(), 2)})

    def step(self, phase: str, excluded: frozenset[str], changed: list[str]) -> bool:
        """Try `excluded`; keep it if the rule allows. False when out of budget (nothing tried)."""
        if excluded == self.current.excluded:
            return True
        if excluded not in self.cache and not self._time_left():
            return False
        trial = self.trial(excluded)
        kept = accepts(trial, self.current, phase, len(self.ranked))
        if kept:
            self.current = trial
        self._round(phase, changed, trial, kept)
        return True

    # -- phases ------------------------------------------------------------------------------
    def run(self, baseline: Trial | None = None) -> SearchResult:
        base = baseline or self.trial(frozenset())
        self.cache.setdefault(base.excluded, base)
        self.current = base
        self._round("baseline", [], base, True)
        if not base.passed and self.ranked:
            groups = self._screen(base)
            if not self.current.passed and not self.out_of_time:
                self._add(groups)
            if not self.out_of_time:
                self._narrow_and_prune()
        stopped = ("tolerance met" if self.current.passed and not self.out_of_time else
                   "budget spent" if self.out_of_time else
                   "no units" if not self.ranked else "nothing left to try")
        return SearchResult(self.current, base, self.rounds, len(self.cache), round(self.elapsed(), 2), stopped)

    def _screen(self, base: Trial) -> list[list[str]]:
        """Each contiguous group of the ranking kept in float alone; groups that helped, best first."""
        n = min(SCREEN_GROUPS, len(self.ranked))
        size = -(-len(self.ranked) // n)
        chunks = [self.ranked[i:i + size] for i in range(0, len(self.ranked), size)]
        if len(chunks) == 1 and len(chunks[0]) == len(self.ranked) and len(self.ranked) > 1:
            chunks = _halves(self.ranked)
        gains = []
        for chunk in chunks:
            if self.current.passed or not self.step("screen", base.excluded | frozenset(chunk), chunk):
                break
            trial = self.cache[base.excluded | frozenset(chunk)]
            gains.append((trial.score - base.score, chunk))
        helped = [c for g, c in sorted(gains, key=lambda gc: -gc[0]) if g > min_gain(base)]
        return helped or [[u] for u in self.ranked[:MAX_SINGLETONS]]

    def _add(self, groups: list[list[str]]) -> None:
        queue = [list(g) for g in groups]
        while queue and not self.current.passed:
            group = [u for u in queue.pop(0) if u not in self.current.excluded]
            if not group:
                continue
            before = self.current
            if not self.step("add", self.current.excluded | frozenset(group), group):
                return
            if self.current is not before:
                continue
            if len(group) > 1:
                queue[0:0] = _halves(group)

    def _narrow_and_prune(self) -> None:
        """Units back to INT8 while the rule allows: halves of the float set first (a whole screened
        group was kept, usually for one or two of its units), then one at a time, least damaging first."""
        order = {u: i for i, u in enumerate(self.ranked)}
        group = sorted((u for u in self.current.excluded if u in order), key=order.__getitem__)
        while len(group) > 1:
            for half, rest in ((group[:len(group) // 2], group[len(group) // 2:]),
                               (group[len(group) // 2:], group[:len(group) // 2])):
                before = self.current
                if not self.step("prune", self.current.excluded - frozenset(half), half):
                    return
                if self.current is not before:
                    group = rest
                    break
            else:
                break  # both halves are needed
        for unit in sorted(self.current.excluded, key=lambda u: -order.get(u, -1)):
            if unit not in order:
                continue  # the user's own exclusions stay
            if not self.step("prune", self.current.excluded - {unit}, [unit]):
                return
