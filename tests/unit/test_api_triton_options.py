"""optcli.export_triton takes a TritonOptions; its fields as keywords (the CLI's text forms included) build the
same one, and giving both is refused rather than one silently winning."""
from __future__ import annotations

from pathlib import Path

import pytest

import optcli
from optcli.api import triton_options
from optcli.deploy import TritonOptions
from optcli.errors import UsageError
from triton_fixtures import conv_onnx


def test_options_and_the_same_keywords_write_the_same_config(tmp_path: Path) -> None:
    source = conv_onnx(tmp_path / "conv.onnx")
    typed = optcli.export_triton(source, tmp_path / "a", TritonOptions(max_batch_size=16, dynamic_batching=True,
                                                                       preferred_batch_sizes=[4, 8], instances=2))
    keywords = optcli.export_triton(source, tmp_path / "b", max_batch_size=16, dynamic_batching="preferred=4,8",
                                    instances=2)
    assert typed.config_text == keywords.config_text and "preferred_batch_size: [ 4, 8 ]" in typed.config_text


def test_keywords_parse_the_cli_text_forms() -> None:
    opts = triton_options(dynamic_batching="off", inputs=["x:1x3x8x8"])
    assert opts.dynamic_batching is False and opts.inputs[0].name == "x" and list(opts.inputs[0].shape) == [1, 3, 8, 8]


@pytest.mark.parametrize("call", [
    lambda src, repo: optcli.export_triton(src, repo, TritonOptions(), instances=2),
    lambda src, repo: optcli.export_triton(src, repo, max_batch=8),
])
def test_both_forms_at_once_or_an_unknown_keyword_is_a_usage_error(tmp_path: Path, call: object) -> None:
    with pytest.raises(UsageError):
        call(conv_onnx(tmp_path / "conv.onnx"), tmp_path / "models")  # type: ignore[operator]
