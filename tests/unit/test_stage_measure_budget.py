"""The stage table's before/after latencies are short measurements; the final artifact and its
baseline get the whole [bench] budget (issue 16: stage rows were 43 s of a BERT-base compile)."""
from __future__ import annotations

from pathlib import Path

from compile_testkit import make_matmul
from optcli.artifact import Artifact
from optcli.backends.torch.loader import ModelSource
from optcli.config import CompileConfig
from optcli.onnx_model import io_specs, load_onnx
from optcli.stage_measure import STAGE_MAX_SECONDS, STAGE_WARMUP_RUNS, Measurements
from optcli.stages.base import StageContext


def _model(path: Path, scale: float = 1.0) -> Path:
    return make_matmul(path, width=64, scale=scale)


def test_stage_rows_are_short_and_a_full_measurement_answers_them_too(tmp_path: Path, monkeypatch) -> None:
    import optcli.stage_measure as sm

    budgets: list[dict] = []
    real = sm.time_calls

    def recording(fn, **kw):  # the real timing, with the budget it was given on record
        budgets.append(kw)
        return real(fn, **kw)

    monkeypatch.setattr(sm, "time_calls", recording)
    path = _model(tmp_path / "m.onnx")
    config = CompileConfig(model=str(path), out=tmp_path)
    config.bench.runs, config.bench.min_seconds, config.bench.max_seconds = 400, 0.2, 10.0
    ctx = StageContext(config=config, source=ModelSource(str(path), path, "onnx"), inputs=io_specs(load_onnx(path))[0],
                       target="cpu", out_dir=tmp_path)
    m = Measurements(config)
    art = Artifact(path, "onnx", stage="simplify")
    row = m.latency(ctx, art, "all")
    assert row is not None and budgets[-1]["max_seconds"] == STAGE_MAX_SECONDS
    assert budgets[-1]["warmup_runs"] == STAGE_WARMUP_RUNS < config.bench.warmup_runs
    full = m.latency(ctx, art, "all", full=True)
    assert (full is not row and budgets[-1]["max_seconds"] == 10.0
            and budgets[-1]["warmup_runs"] == config.bench.warmup_runs)
    # ... and may stop before `runs` once its median is known to +-[bench] settle, from 20 calls on
    assert budgets[-1]["settle"] == config.bench.settle == 0.01 and budgets[-1]["settle_min_runs"] == 20
    assert budgets[-1]["settle_min_seconds"] == config.bench.min_seconds
    assert full.runs >= 20
    assert len(budgets) == 2
    assert m.latency(ctx, art, "all") is full  # a later stage row of the same artifact reuses the full one
    assert m.latency(ctx, art, "all", full=True) is full and len(budgets) == 2
    assert m.latency(ctx, art, "disabled") is not full and len(budgets) == 3  # another setting: measured


class _Row:
    """What around_stage reads of a stage: its name and the setting its row is measured with."""

    def __init__(self, optimization: str, builds_deployable: bool = False) -> None:
        self.name, self.measure_optimization = "simplify", optimization
        self.builds_deployable = builds_deployable


def test_a_rows_latency_and_accuracy_share_one_session_at_the_rows_setting(tmp_path: Path, monkeypatch) -> None:
    """A BERT-base session costs a second: the row's "after" latency and its accuracy check open one."""
    from optcli.report import StageReport

    before = _model(tmp_path / "before.onnx")
    after = _model(tmp_path / "after.onnx")
    config = CompileConfig(model=str(before), out=tmp_path)
    config.bench.runs, config.bench.min_seconds, config.bench.max_seconds = 5, 0.0, 0.2
    config.accuracy.batch = 1  # the model takes batch 1
    ctx = StageContext(config=config, source=ModelSource(str(before), before, "onnx"),
                       inputs=io_specs(load_onnx(before))[0], target="cpu", out_dir=tmp_path)
    for optimization in ("disabled", "all"):
        m = Measurements(config)
        opened: list[str] = []
        real = m.artifact_runner

        def counting(ctx, artifact, setting, real=real, opened=opened):
            opened.append(f"{artifact.path.name}@{setting}")
            return real(ctx, artifact, setting)

        monkeypatch.setattr(m, "artifact_runner", counting)
        record = StageReport("simplify")
        m.around_stage(ctx, _Row(optimization), record, Artifact(before, "onnx", stage="export"),
                       Artifact(after, "onnx", stage="simplify"), m.reference(ctx))
        # At "all" the user's ONNX was timed in full on the reference's own session (it is the final's
        # baseline): the row's "before" is that measurement, no session of its own.
        want = ["after.onnx@all"] if optimization == "all" else ["before.onnx@disabled", "after.onnx@disabled"]
        assert opened == want
        assert record.latency_ms["before"]["runs"] >= (5 if optimization == "all" else 1)
        assert record.accuracy["graph_optimization"] == optimization and record.accuracy["max_abs_err"] == 0.0
        assert record.latency_ms["after"]["settings"]["graph_optimization"] == optimization


def test_a_build_stages_row_is_the_final_measurement(tmp_path: Path, monkeypatch) -> None:
    """build-cpu's artifact is what ships: its row is timed in full once, and the final reuses it (and
    its session, from the run's pool) instead of timing the same model twice."""
    import optcli.stage_measure as sm
    from optcli.report import StageReport

    budgets: list[dict] = []
    real = sm.time_calls
    monkeypatch.setattr(sm, "time_calls", lambda fn, **kw: budgets.append(kw) or real(fn, **kw))
    before, after = _model(tmp_path / "before.onnx"), _model(tmp_path / "after.onnx", scale=0.5)
    config = CompileConfig(model=str(before), out=tmp_path)
    config.bench.runs, config.bench.min_seconds, config.bench.max_seconds = 5, 0.0, 0.5
    config.accuracy.batch = 1
    ctx = StageContext(config=config, source=ModelSource(str(before), before, "onnx"),
                       inputs=io_specs(load_onnx(before))[0], target="cpu", out_dir=tmp_path)
    m = Measurements(config)
    reference = m.reference(ctx)  # times the user's ONNX in full: the final's baseline
    built = Artifact(after, "onnx", stage="build")
    record = StageReport("build")
    m.around_stage(ctx, _Row("all", builds_deployable=True), record, Artifact(before, "onnx"), built, reference)
    assert len(budgets) == 2 and budgets[-1]["max_seconds"] == config.bench.max_seconds  # the row: in full
    opened = ctx.runners.opened
    final = m.final(ctx, built)
    assert len(budgets) == 2 and ctx.runners.opened == opened  # nothing timed or opened again
    assert final["latency_ms"] == record.latency_ms["after"]
    ctx.runners.close()
