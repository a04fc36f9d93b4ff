"""The fast search keeps a model over 2 GB within 3x its size: backends whose CPU builds hold more
copies of the weights are not built there (issue 15: OpenVINO + NNCF peaked at 3.9x a 2.15 GB MLP)."""
from __future__ import annotations

from optcli.backends import registry
from optcli.backends.recipe import Candidate
from optcli.cpu.search_run import HEAVY_BUILD_BYTES, skip_heavy_builds


def _cands() -> list[Candidate]:
    return [Candidate("onnxruntime-int8-qdq-u8s8", "onnxruntime", "int8", "input"),
            Candidate("openvino-int8-nncf", "openvino", "int8", "nncf"),
            Candidate("openvino-int8-qdq-s8s8", "openvino", "int8", "requantize_s8s8")]


def test_openvino_is_the_backend_whose_builds_are_heavy() -> None:
    assert registry.get("openvino").heavy_builds and not registry.get("onnxruntime").heavy_builds


def test_a_large_model_skips_heavy_builds_in_the_fast_search_only() -> None:
    cands = _cands()
    skip_heavy_builds(cands, "fast", HEAVY_BUILD_BYTES + 1)
    assert [c.skip is None for c in cands] == [True, False, False]
    assert "--search thorough builds it" in cands[1].skip and "2.1 GB" in cands[1].skip
    for search, size in (("thorough", HEAVY_BUILD_BYTES * 2), ("fast", HEAVY_BUILD_BYTES - 1)):
        cands = _cands()
        skip_heavy_builds(cands, search, size)
        assert all(c.skip is None for c in cands), (search, size)


def test_heavy_builds_stay_when_nothing_else_runs_the_model() -> None:
    cands = _cands()
    cands[0].skip = "--backend openvino"
    skip_heavy_builds(cands, "fast", HEAVY_BUILD_BYTES * 2)
    assert [c.skip for c in cands[1:]] == [None, None]
