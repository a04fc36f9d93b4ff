"""A compile prints optcli's lines only: the libraries it drives log to the terminal only with --debug
(issue 30, item 18). A real subprocess, so everything written to stderr is seen, fd 2 included."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from compile_testkit import run_optcli

pytestmark = pytest.mark.slow
LIBRARY_LINE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d|WARNING:root:|Failed to load|Loading weights|torchao|_pytree")


def test_hf_folder_int8_compile_prints_no_library_log(torch_mod, tmp_path: Path) -> None:
    tf = pytest.importorskip("transformers")
    torch_mod.manual_seed(0)
    small = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}
    tf.BertModel(tf.BertConfig(vocab_size=100, max_position_embeddings=64, **small)).save_pretrained(
        str(tmp_path / "bert"))
    calib = tmp_path / "calib"
    calib.mkdir()
    rng = np.random.default_rng(0)
    for i in range(2):
        mask = np.ones((8, 32), np.int64)
        mask[:, 20:] = 0
        np.savez(calib / f"{i}.npz", input_ids=rng.integers(0, 100, (8, 32)), attention_mask=mask,
                 token_type_ids=np.zeros((8, 32), np.int64))
    done = run_optcli("compile", str(tmp_path / "bert"), "--int8", "--calib", str(calib), "--out", str(tmp_path / "o"),
                      "--no-bench", "--target", "cpu", "--int8-flavour", "qdq-u8s8", timeout=900)
    assert done.returncode == 0, done.stderr
    noise = [ln for ln in done.stderr.splitlines() if LIBRARY_LINE.search(ln)]
    assert not noise, noise  # was: W1127 ... torch/utils/_pytree.py:630] x2, torchao's "Failed to load", a progress bar
