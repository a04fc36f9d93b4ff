"""The search over candidate builds: predict, build the likely winner first, build another only while it
could still win, and measure by sequential elimination; or, thorough, build and measure every one.

It knows nothing of backends: the caller hands it callables.
    build(name) -> handle, or None when the candidate could not be built (the caller records why)
    passes(handle) -> whether the built candidate meets the accuracy tolerance
    measure(handle) -> one block of latency samples (ms); blocks of all live candidates alternate
Every phase is timed per candidate (build, check, measure seconds), and a deadline (the compile's
--time-budget) stops the search at the best so far, saying so.

fast: free candidates first, then the rest in the order of their predicted latency (optcli/search/priors.py;
a candidate the evidence had less accurate counts one tie band slower, since a tie goes to the more accurate one).
One is built when no leader exists yet (nothing within tolerance so far), when it is free (already
built: measuring it confirms or refutes the prediction), or when, at the optimistic end of its
prediction, it beats the leader by more than the tie band (or, where the evidence has it more
accurate than the leader, ties it: a tie goes to the more accurate; unless the leader's own measured
accuracy used at most ACCURACY_HEADROOM of the tolerance's budget: what is measured in this run
outweighs the evidence from other models, and nothing the tolerance asks for is left to gain). Passing
candidates are measured in alternating blocks; after `min_rounds` rounds one clearly behind the leader
stops being measured, and measuring stops when the rest are settled (elimination.py), or at `max_seconds`.
thorough: every candidate built in the given order; all that ran (passing or not) measured in
alternating blocks until `min_rounds` and `min_seconds` passed and the two fastest passing ones are
separated, or at `max_seconds`: today's exhaustive behaviour.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

from optcli.search.elimination import TIE_BAND, Standing, clearly_behind, leader, settled, standing
from optcli.search.priors import UNKNOWN, Prediction, PredictionJSON

MODES = ("fast", "thorough")
# A leader measured within this fraction of the accuracy budget (e.g. cosine 0.9975 against 0.99) leaves
# nothing for a more accurate candidate to win on accuracy: it must then beat the leader on speed. On
# BERT-base, onnxruntime's INT8 measured 0.99957 (4% of the budget) while the evidence from MiniLM had
# NNCF's transformer setting the more accurate, and its build cost 158 s for a slower artifact.
ACCURACY_HEADROOM = 0.25


class EntryFacts(TypedDict):
    """What the search learned of one candidate, as the report writes it (each candidate's `search`)."""

    prediction: PredictionJSON
    free: NotRequired[bool]
    reason: NotRequired[str]
    seconds: NotRequired[dict[str, float]]  # always written, after free and reason: build, check, measure seconds
    calls: NotRequired[int]
    eliminated: NotRequired[bool]
    accuracy_budget_used: NotRequired[float]


class EntryJSON(EntryFacts):
    """A search entry as the report writes it: its name and status, then its facts."""

    name: str
    status: str


class SearchJSON(TypedDict):
    """A search's result as the report writes it (the build stage's `search`, without `candidates`)."""

    mode: str
    rounds: int
    measure_seconds: float
    built: int
    order: list[str]
    candidates: NotRequired[list[EntryJSON]]
    degraded: NotRequired[str]
    notes: NotRequired[list[str]]


@dataclass
class Entry:
    """One candidate's way through the search."""

    name: str
    prediction: Prediction
    free: bool = False
    status: str = "planned"         # planned | passed | rejected (missed the tolerance) | failed | not built
    reason: str | None = None       # why not built, or why measuring it stopped early
    handle: Any = None
    build_seconds: float | None = None
    check_seconds: float | None = None
    measure_seconds: float = 0.0
    samples: list[float] = field(default_factory=list)
    eliminated: bool = False
    budget_used: float | None = None  # the fraction of the accuracy budget its measured accuracy used

    def effective_ratio(self, tie_band: float) -> float:
        return effective_ratio(self.prediction, tie_band)

    def facts(self) -> EntryFacts:
        """What the search learned of it, without its name and status (a candidate's `search`)."""
        seconds: dict[str, float | None] = {"build": self.build_seconds, "check": self.check_seconds,
                                            "measure": round(self.measure_seconds, 3) if self.samples else None}
        out: EntryFacts = {"prediction": self.prediction.to_json()}
        if self.free:
            out["free"] = True
        if self.reason:
            out["reason"] = self.reason
        out["seconds"] = {k: v for k, v in seconds.items() if v is not None}
        if self.samples:
            out["calls"] = len(self.samples)
        if self.eliminated:
            out["eliminated"] = True
        if self.budget_used is not None:
            out["accuracy_budget_used"] = round(self.budget_used, 4)
        return out

    def to_json(self) -> EntryJSON:
        return {"name": self.name, "status": self.status, **self.facts()}


@dataclass
class SearchResult:
    mode: str
    entries: list[Entry]
    rounds: int = 0
    measure_seconds: float = 0.0
    degraded: str | None = None     # what the time budget cut short
    notes: list[str] = field(default_factory=list)

    def entry(self, name: str) -> Entry:
        return next(e for e in self.entries if e.name == name)

    def measured(self) -> list[Entry]:
        return [e for e in self.entries if e.samples]

    def to_json(self) -> SearchJSON:
        out: SearchJSON = {"mode": self.mode, "rounds": self.rounds, "measure_seconds": round(self.measure_seconds, 3),
                           "built": sum(e.status in ("passed", "rejected") for e in self.entries),
                           "order": [e.name for e in self.entries], "candidates": [e.to_json() for e in self.entries]}
        if self.degraded:
            out["degraded"] = self.degraded
        if self.notes:
            out["notes"] = self.notes
        return out


@dataclass
class Search:
    """A search configuration; `run` does one search. `deadline` is a `clock()` time (None: none)."""

    mode: str = "fast"
    min_rounds: int = 3
    min_seconds: float = 0.0        # thorough only: fast stops as soon as the leader is settled
    max_seconds: float = 30.0
    tie_band: float = TIE_BAND
    deadline: float | None = None
    clock: Callable[[], float] = time.perf_counter

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"search mode {self.mode!r} is not one of {MODES}")

    def run(self, names: list[str], build: Callable[[str], Any], passes: Callable[[Any], bool],
            measure: Callable[[Any], list[float]], predictions: dict[str, Prediction] | None = None,
            free: set[str] | frozenset[str] = frozenset(),
            budget_used: Callable[[Any], float | None] | None = None) -> SearchResult:
        """`budget_used(handle)`: the fraction of the accuracy tolerance a passing candidate's measured
        accuracy used (0 exact, 1 at the limit), or None where it cannot say."""
        self._budget_used = budget_used
        preds = predictions or {}
        entries = [Entry(n, preds.get(n, UNKNOWN), n in free) for n in names]
        if self.mode == "fast":
            # Free ones first: measuring them tests the prediction before anything costly is built.
            entries.sort(key=lambda e: (not e.free, e.effective_ratio(self.tie_band), names.index(e.name)))
        result = SearchResult(self.mode, entries)
        self._measure_start: float | None = None
        pool: list[Entry] = []        # built, within tolerance, still measured
        for e in entries:
            why_not = self._why_not_build(e, pool, result)
            if why_not:
                e.status, e.reason = "not built", why_not
                continue
            self._build(e, build, passes)
            if e.status == "passed":
                pool.append(e)
                if self.mode == "fast" and len(pool) > 1:
                    self._race(pool, [], measure, result)
                    pool = [p for p in pool if not p.eliminated]
        if self.mode == "thorough":
            ran = [e for e in entries if e.status in ("passed", "rejected")]
            self._race(ran, [e for e in ran if e.status == "passed"], measure, result)
        elif pool and not any(e.samples for e in pool):
            # A lone candidate: nothing to compare it with; one round gives the report its latency (the
            # pipeline measures the final artifact again as deployed).
            self._race(pool, [], measure, result, min_rounds=1)
        return result

    # -- deciding ----------------------------------------------------------------------------
    def _over_time(self) -> bool:
        return self.deadline is not None and self.clock() >= self.deadline

    def _why_not_build(self, e: Entry, pool: list[Entry], result: SearchResult) -> str | None:
        if pool and self._over_time():
            result.degraded = "the time budget ran out: kept the best candidate built so far"
            return "the time budget ran out before it was built"
        if self.mode == "thorough" or not pool or e.free:
            return None
        lead = self._leader(pool)
        return cannot_win(e.prediction, lead.name, lead.prediction, self.tie_band, lead.budget_used)

    def _leader(self, pool: list[Entry]) -> Entry:
        measured = [e for e in pool if e.samples]
        if len(measured) == len(pool) and measured:
            best = leader([standing(e.name, e.samples) for e in measured])
            return next(e for e in pool if e.name == best.name)
        return min(pool, key=lambda e: e.effective_ratio(self.tie_band))

    def _build(self, e: Entry, build: Callable[[str], Any], passes: Callable[[Any], bool]) -> None:
        t0 = self.clock()
        e.handle = build(e.name)
        e.build_seconds = round(self.clock() - t0, 3)
        if e.handle is None:
            e.status = "failed"
            return
        t0 = self.clock()
        ok = passes(e.handle)
        e.check_seconds = round(self.clock() - t0, 3)
        e.status = "passed" if ok else "rejected"
        if ok and self._budget_used is not None:
            e.budget_used = self._budget_used(e.handle)

    # -- measuring ---------------------------------------------------------------------------
    def _race(self, live: list[Entry], contenders: list[Entry], measure: Callable[[Any], list[float]],
              result: SearchResult, min_rounds: int | None = None) -> None:
        """Alternating blocks over `live` until the stop rule of the mode (elimination in fast)."""
        live = [e for e in live if not e.eliminated]
        if not live:
            return
        if self._measure_start is None:
            self._measure_start = self.clock()
        rounds = 0
        start = self.clock()
        while True:
            for e in live:
                t0 = self.clock()
                e.samples.extend(measure(e.handle))
                e.measure_seconds += self.clock() - t0
            rounds += 1
            result.rounds += 1
            if self._race_done(live, contenders, rounds, start, result, min_rounds or self.min_rounds):
                break
        result.measure_seconds += self.clock() - start

    def _race_done(self, live: list[Entry], contenders: list[Entry], rounds: int, start: float,
                   result: SearchResult, min_rounds: int) -> bool:
        spent = self.clock() - self._measure_start if self._measure_start is not None else 0.0
        if self._over_time():
            if len(live) > 1:
                result.degraded = result.degraded \
                    or "the time budget ran out while measuring: chose on the samples so far"
            return True
        if self.mode == "fast" and len(live) == 1 and rounds >= min_rounds:
            return True
        if rounds >= 2 and spent >= self.max_seconds:
            result.notes.append(f"measuring stopped at max_seconds ({self.max_seconds:g} s) "
                                "before the leader was clear")
            return True
        if rounds < min_rounds:
            return False
        if self.mode == "thorough":
            return self.clock() - start >= self.min_seconds and _separated(contenders)
        standings = {e.name: standing(e.name, e.samples) for e in live}
        best = leader(list(standings.values()))
        for e in list(live):
            if e.name != best.name and clearly_behind(standings[e.name], best, self.tie_band):
                e.eliminated = True
                e.reason = (f"measuring stopped after {len(e.samples)} calls: p50 {standings[e.name].p50:.4g} ms, "
                            f"clearly behind {best.name} ({best.p50:.4g} ms)")
                live.remove(e)
        return settled([standings[e.name] for e in live], self.tie_band)


def effective_ratio(pred: Prediction, tie_band: float = TIE_BAND) -> float:
    """A prediction's ratio for ordering: one the evidence had less accurate counts a tie band slower."""
    return pred.ratio * (1 + tie_band) if pred.less_accurate else pred.ratio


def cannot_win(pred: Prediction, lead_name: str, lead: Prediction, tie_band: float = TIE_BAND,
               lead_budget_used: float | None = None) -> str | None:
    """Why a candidate predicted `pred` cannot win against the leader `lead_name` (predicted `lead`), or
    None where, at the optimistic end of its prediction, it could: it beats the leader by more than the
    tie band, or the evidence has it more accurate than the leader and it ties (unless the leader's own
    measured accuracy used at most ACCURACY_HEADROOM of the budget: `lead_budget_used`)."""
    optimistic = pred.ratio * (1 - pred.spread)
    if (lead.less_accurate and not pred.less_accurate
            and not (lead_budget_used is not None and lead_budget_used <= ACCURACY_HEADROOM)):
        # The evidence has it more accurate than the leader: a tie would go to it.
        if optimistic < lead.ratio * (1 + tie_band):
            return None
        return (f"predicted {pred.ratio:.2f}x (+-{pred.spread:.0%}) the winner's latency, "
                f"{lead_name} {lead.ratio:.2f}x: it cannot even tie {lead_name}")
    if optimistic < lead.ratio * (1 - tie_band):
        return None
    why_no_tie = "a tie would not go to it"
    if lead.less_accurate and not pred.less_accurate:
        why_no_tie = (f"{lead_name} measured within {lead_budget_used:.0%} of the accuracy budget, so a tie "
                      "would gain nothing the tolerance asks for")
    return (f"predicted {pred.ratio:.2f}x (+-{pred.spread:.0%}) the winner's latency, "
            f"{lead_name} {lead.ratio:.2f}x: it cannot beat {lead_name} by more than "
            f"the tie band ({tie_band:.0%}), and {why_no_tie}")


def _separated(contenders: list[Entry]) -> bool:
    """The two fastest contenders' intervals do not overlap (nothing to separate with fewer than two)."""
    if len(contenders) < 2:
        return True
    ranked: list[Standing] = sorted((standing(e.name, e.samples) for e in contenders), key=lambda s: s.p50)
    return ranked[0].high < ranked[1].low
