"""compare_outputs / check_tolerance on crafted arrays whose answers are known."""
from __future__ import annotations

import numpy as np
import pytest

from optcli.accuracy import check_tolerance, compare_outputs


def test_identical_outputs() -> None:
    ref = [np.arange(12, dtype=np.float32).reshape(3, 4)]
    s = compare_outputs(ref, [ref[0].copy()], ["y"])
    assert s["max_abs_err"] == 0.0
    assert s["cosine_min"] == pytest.approx(1.0)
    assert s["outputs"]["y"]["finite"] is True
    assert s["top1_agreement"] == 1.0
    assert check_tolerance(s, cosine=0.9999, max_abs=0.0, top1=1.0) is None


def test_known_error_and_cosine() -> None:
    ref = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    got = np.array([[1.0, 0.0], [1.0, 0.0]], dtype=np.float32)  # row 2 orthogonal: cosine 0, top-1 flips
    s = compare_outputs([ref], [got], ["logits"])
    e = s["outputs"]["logits"]
    assert e["max_abs_err"] == pytest.approx(1.0)
    assert e["mean_abs_err"] == pytest.approx(0.5)
    assert e["cosine_min"] == pytest.approx(0.0)
    assert e["cosine_mean"] == pytest.approx(0.5)
    assert e["top1_agreement"] == pytest.approx(0.5)
    # the cosine tolerance applies to each output's mean cosine over samples (0.5 here), not the worst one
    assert "mean cosine 0.5000 < tolerance 0.99" in check_tolerance(s, cosine=0.99, max_abs=None, top1=None)
    assert check_tolerance(s, cosine=0.4, max_abs=None, top1=None) is None
    assert "max abs error 1 > tolerance 0.1" in check_tolerance(s, cosine=None, max_abs=0.1, top1=None)
    assert "top-1 agreement 0.5000 < tolerance 0.9" in check_tolerance(s, cosine=None, max_abs=None, top1=0.9)
    assert check_tolerance(s, cosine=None, max_abs=None, top1=None) is None


def test_scaled_output_has_cosine_one_but_an_error() -> None:
    ref = np.random.default_rng(0).standard_normal((2, 3, 5)).astype(np.float32)
    s = compare_outputs([ref], [ref * 2], ["h"])
    assert s["cosine_min"] == pytest.approx(1.0, abs=1e-6)
    assert s["max_abs_err"] == pytest.approx(float(np.abs(ref).max()), rel=1e-6)
    assert "top1_agreement" not in s  # 3-D: not class scores


def test_worst_output_wins_and_names_it() -> None:
    a = np.ones((2, 4), dtype=np.float32)
    b = np.ones((2, 4), dtype=np.float32)
    s = compare_outputs([a, b], [a, b + 0.25], ["good", "bad"])
    assert s["max_abs_err"] == pytest.approx(0.25)
    assert s["outputs"]["good"]["max_abs_err"] == 0.0
    assert "'bad'" in check_tolerance(s, cosine=None, max_abs=0.1, top1=None)


def test_nan_is_never_within_tolerance() -> None:
    ref = np.ones((2, 3), dtype=np.float32)
    got = ref.copy()
    got[1, 2] = np.nan
    s = compare_outputs([ref], [got], ["y"])
    assert s["outputs"]["y"]["finite"] is False
    assert s["cosine_min"] == 0.0
    assert "NaN or Inf" in check_tolerance(s, cosine=None, max_abs=None, top1=None)


def test_zero_rows() -> None:
    z = np.zeros((2, 3), dtype=np.float32)
    assert compare_outputs([z], [z], ["y"])["cosine_min"] == pytest.approx(1.0)
    nz = z.copy()
    nz[0, 0] = 1
    assert compare_outputs([z], [nz], ["y"])["cosine_min"] == pytest.approx(0.0)


def test_scalar_and_integer_outputs() -> None:
    s = compare_outputs([np.float32(3.0), np.array([1, 2, 3])], [np.float32(3.0), np.array([1, 2, 4])], ["s", "i"])
    assert s["outputs"]["s"]["max_abs_err"] == 0.0
    assert s["outputs"]["i"]["max_abs_err"] == 1.0


def test_top1_accuracy_with_labels() -> None:
    ref = np.array([[2.0, 1.0], [0.0, 3.0], [1.0, 0.0]])
    got = np.array([[2.0, 1.0], [3.0, 0.0], [1.0, 0.0]])
    s = compare_outputs([ref], [got], ["y"], labels=np.array([0, 1, 1]))
    assert s["top1_accuracy_reference"] == pytest.approx(2 / 3)
    assert s["top1_accuracy"] == pytest.approx(1 / 3)


def test_mismatches_raise() -> None:
    with pytest.raises(ValueError, match="outputs"):
        compare_outputs([np.ones(2)], [], [])
    with pytest.raises(ValueError, match="shape"):
        compare_outputs([np.ones((2, 3))], [np.ones((3, 2))], ["y"])


def test_cosine_of_a_numerically_zero_output_does_not_count() -> None:
    """A transformers MobileViT export was rejected at cosine 0.996 with a max abs error of 3e-42: an
    output at subnormal scale, where rounding noise is all there is. Such an output is judged by its
    absolute error; an output that should be zero but is not still fails."""
    import numpy as np

    from optcli.accuracy import check_tolerance, compare_outputs

    rng = np.random.default_rng(0)
    big = rng.standard_normal((4, 10)).astype(np.float32)
    tiny = (rng.random((4, 10)) * 1e-41).astype(np.float32)          # subnormal float32 values
    noisy = (tiny * (1 + 0.3 * rng.standard_normal((4, 10)))).astype(np.float32)
    summary = compare_outputs([big, tiny], [big, noisy], ["logits", "tiny"])
    assert summary["outputs"]["tiny"]["negligible"] and summary["outputs"]["tiny"]["cosine_min"] < 0.999
    assert summary["cosine_min"] > 0.999999
    assert check_tolerance(summary, 0.9999, None, None) is None
    wrong = compare_outputs([big, tiny], [big, np.ones_like(tiny)], ["logits", "tiny"])
    assert wrong["cosine_min"] < 0.9 and "tiny" in check_tolerance(wrong, 0.99, None, None)
    small_but_normal = compare_outputs([big * 1e-20], [-big * 1e-20], ["y"])  # float32 keeps full precision
    assert check_tolerance(small_but_normal, 0.99, None, None) is not None


# --- the export check: equal within float32 resolution at the output's own scale (issue 30, item 21) ------
def _judge(ref, got):
    import numpy as np

    from optcli.accuracy import compare_outputs, float32_mismatch
    from optcli.stages.export import VERIFY_COSINE, VERIFY_MAX_ABS_REL

    return float32_mismatch(compare_outputs([np.asarray(ref, np.float32)], [np.asarray(got, np.float32)], ["y"]),
                            VERIFY_COSINE, VERIFY_MAX_ABS_REL)


def test_outputs_equal_at_float32_resolution_pass_the_export_check() -> None:
    """The class of MobileViT's refused export (all logits subnormal, max abs err 3.16e-42, cosine 1.0):
    all zeros, all denormal, all huge, each with rounding-sized differences, passes; a real difference at
    the same scale does not."""
    import numpy as np

    rng = np.random.default_rng(0)
    base = rng.standard_normal((2, 10))
    tiny = np.finfo(np.float32).tiny
    cases = {
        "all zeros": (np.zeros((2, 10)), np.zeros((2, 10))),
        "zeros against subnormal noise": (np.zeros((2, 10)), base * 1e-42),
        "all denormal (MobileViT)": (base * 2e-41, base * 2e-41 + rng.standard_normal((2, 10)) * 3e-42),
        "just under the smallest normal": (base / np.abs(base).max() * tiny * 0.9,
                                           base / np.abs(base).max() * tiny * 1.4),
        "all huge": (base * 1e38, base * 1e38 * (1 + 1e-7 * rng.standard_normal((2, 10)))),
        "ordinary": (base, base + 1e-6),
    }
    for what, (ref, got) in cases.items():
        assert _judge(ref, got) is None, what
    wrong = {
        "zeros against ones": (np.zeros((2, 10)), np.ones((2, 10))),
        "denormal against normal": (base * 2e-41, base * 1e-30),
        "huge, 1% off": (base * 1e38, base * 1.01e38),
        "ordinary, sign flipped row": (base, np.concatenate([base[:1], -base[1:]])),
        "NaN": (base, np.full((2, 10), np.nan)),
    }
    for what, (ref, got) in wrong.items():
        assert _judge(ref, got) is not None, what


def test_each_output_is_judged_at_its_own_scale() -> None:
    """Was: one scale for all outputs (the largest), so a small output's error hid under a large one's."""
    import numpy as np

    from optcli.accuracy import compare_outputs, float32_mismatch

    rng = np.random.default_rng(1)
    big, small = rng.standard_normal((2, 8)) * 1e3, rng.standard_normal((2, 8)) * 1e-3
    off = small + 5e-4 * rng.standard_normal((2, 8))  # 50% of the small output's own scale
    summary = compare_outputs([big, small], [big, off], ["big", "small"])
    assert "output 'small'" in float32_mismatch(summary, 0.9, 1e-3)
