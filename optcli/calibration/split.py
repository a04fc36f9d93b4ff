"""Which samples calibrate and which judge: `--eval DIR`, else the calibration samples not used to
calibrate; without any data (an FP32/FP16 run), fixed random inputs. Every stage that gates on
accuracy takes its data from here, so they split the same way."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from optcli.calibration.dataset import SampleSet, load_samples
from optcli.errors import UsageError
from optcli.tensor_spec import random_inputs

MAX_EVAL_SAMPLES = 512
RANDOM_EVAL_SAMPLES = 32
# Samples read from the calibration data (calibration and held-out rows together) when --calib-samples
# does not say: a reader that never stops was read forever (1.3 GB in 60 s). The report says when this
# cap, not the data, ended the read (docs/calibration.md).
DEFAULT_MAX_SAMPLES = 1024


def read_limit(q: Any) -> int:
    """How many samples to read from --calib: --calib-samples (plus the held-out rows taken after them
    without --eval), else DEFAULT_MAX_SAMPLES."""
    if not q.calib_samples:
        return DEFAULT_MAX_SAMPLES
    return q.calib_samples if q.eval is not None else q.calib_samples + MAX_EVAL_SAMPLES


def cap_note(samples: SampleSet, q: Any) -> dict[str, Any]:
    """What the report says about a capped read ({} when the data ended first)."""
    if samples.capped is None:
        return {}
    by = "--calib-samples" if q.calib_samples else "the default cap"
    return {"capped": {"samples_read": samples.capped, "by": by,
                       "note": f"stopped reading {samples.source} after {samples.capped} samples ({by}); "
                               "--calib-samples N reads more or fewer"}}


def split_calibration(q: Any, specs: list, holdout_needed: bool) -> tuple[SampleSet, SampleSet]:
    """(calibration set, evaluation set) from a QuantizeConfig: --eval DIR, else the calibration
    samples not used to calibrate (the last quarter). At most read_limit(q) samples are read."""
    if q.eval is not None:
        calib = load_samples(Path(q.calib), specs, q.calib_reader, q.calib_options, limit=read_limit(q),
                             minimum=q.calib_samples or 1)
        ev = load_samples(Path(q.eval), specs, None, {}, limit=MAX_EVAL_SAMPLES, minimum=1, what="evaluation")
        return calib, ev
    data = load_samples(Path(q.calib), specs, q.calib_reader, q.calib_options, limit=read_limit(q),
                        minimum=(q.calib_samples or 1))
    n = len(data)
    n_calib = min(q.calib_samples or max(1, (n * 3) // 4), n)
    if n - n_calib < 2:
        if holdout_needed:
            raise UsageError(f"no held-out samples for the accuracy check: {n} samples, {n_calib} used to calibrate",
                             hint="pass --eval DIR, or lower --calib-samples so some samples are left over")
        return data, data
    return data.take(slice(0, n_calib)), data.take(slice(n_calib, min(n, n_calib + MAX_EVAL_SAMPLES)))


def evaluation_set(q: Any, specs: list, inputs: list, int_high: dict[str, int]) -> SampleSet:
    """The held-out set a stage without calibration gates on: --eval (or --calib) data where given,
    else fixed random inputs."""
    if q.calib is not None or q.eval is not None:
        source = q if q.calib is not None else dataclasses.replace(q, calib=q.eval)
        return split_calibration(source, specs, holdout_needed=False)[1]
    arrays = random_inputs(inputs, RANDOM_EVAL_SAMPLES, seed=3, int_high=int_high)
    return SampleSet(arrays, None, "random inputs", "random")
