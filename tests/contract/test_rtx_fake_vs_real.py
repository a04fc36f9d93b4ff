"""The fake TensorRT (fake_tensorrt.py) and NVIDIA's real ONNX parser (TensorRT-RTX's: the same
onnx-tensorrt code as TensorRT's), side by side on the same graphs: wherever the real one refuses, the
fake must refuse too, so the contract tests can never again pass a graph NVIDIA's code refuses
(issue 29, part 1). The graphs: a corpus of small graphs on both sides of the parser's lines
(parser_corpus.py), and every ONNX graph optcli wrote in this session's TensorRT-RTX compiles."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
import pytest

from fake_tensorrt import make_tensorrt
from optcli.backends.tensorrt.parser_check import parse_issues
from parser_corpus import CORPUS


def verdicts(real: Any, path: Path) -> tuple[list[dict], list[dict]]:
    """(real parser's errors, fake parser's errors) for one graph: one parse each."""
    return parse_issues(real, path, rounds=1), parse_issues(make_tensorrt(), path, rounds=1)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_the_fake_refuses_wherever_the_real_parser_refuses(rtx, tmp_path, name):
    path = tmp_path / f"{name}.onnx"
    onnx.save(CORPUS[name](), str(path))
    real, fake = verdicts(rtx, path)
    if real:
        assert fake, f"the real parser refuses {name} ({real[0]['message'][:200]}) but the fake takes it"
    else:
        # Not required, but a fake stricter than NVIDIA's parser would fail good graphs in the contract tests.
        assert not fake, f"the fake refuses {name} ({fake[0]['message']}), which the real parser takes"


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_the_documented_matrix_agrees_with_the_real_parser(rtx, tmp_path, name):
    """The matrix is the fallback where no parser is installed: on the corpus it now says what NVIDIA's
    parser says (it refused 1D pooling, computed Unsqueeze axes and INT64 CumSum, and passed Resize
    antialias and EfficientNet's pooling window). optcli's own data-dependent rule is not the parser's."""
    from optcli.backends.tensorrt.preflight import check_file

    path = tmp_path / f"{name}.onnx"
    onnx.save(CORPUS[name](), str(path))
    real = parse_issues(rtx, path, rounds=1)
    matrix = [f for f in check_file(path, "tensorrt-rtx", str(rtx.__version__)) if f.rule != "data-dependent"]
    assert bool(matrix) == bool(real), (real[:1], [f.describe() for f in matrix])


def optcli_graphs(out: Path) -> list[Path]:
    """Every ONNX graph a compile wrote into its stage folders."""
    return sorted(p for p in out.glob("[0-9][0-9]-*/*.onnx"))


def test_both_parsers_take_every_graph_optcli_wrote_for_tensorrt(rtx, rtx_encoder_int8):
    code, err, out = rtx_encoder_int8
    assert code == 0, err
    graphs = optcli_graphs(out)
    assert {p.parent.name.split("-", 1)[1] for p in graphs} >= {"simplify", "fuse", "quantize-int8"}
    for path in graphs:
        real, fake = verdicts(rtx, path)
        assert (real, fake) == ([], []), path
