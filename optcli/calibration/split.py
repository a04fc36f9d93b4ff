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


def split_calibration(q: Any, specs: list, holdout_needed: bool) -> tuple[SampleSet, SampleSet]:
    """(calibration set, evaluation set) from a QuantizeConfig: --eval DIR, else the calibration
    samples not used to calibrate (the last quarter)."""
    if q.eval is not None:
        calib = load_samples(Path(q.calib), specs, q.calib_reader, q.calib_options, limit=q.calib_samples,
                             minimum=q.calib_samples or 1)
        ev = load_samples(Path(q.eval), specs, None, {}, limit=MAX_EVAL_SAMPLES, minimum=1, what="evaluation")
        return calib, ev
    data = load_samples(Path(q.calib), specs, q.calib_reader, q.calib_options, minimum=(q.calib_samples or 1))
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
