"""The plan of a run, as data: which stages run, which are skipped and why, which candidates the CPU build
considers, and the INT8 last resort (optcli/plan/run_plan.py); the stage names (optcli/plan/stage_names.py)."""
from optcli.plan.planner import plan_run
from optcli.plan.run_plan import LastResort, ModelFeatures, RunPlan
from optcli.plan.stage_names import StageName

__all__ = ["LastResort", "ModelFeatures", "RunPlan", "StageName", "plan_run"]
