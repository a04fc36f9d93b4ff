"""Model families as a new user hands them over (`file.py:factory` returning the module and its example
inputs), built from reduced transformers configs with random weights: the bug classes the first
contact with 27 families found (issue 15)."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from compile_testkit import read_report, run_main

pytestmark = pytest.mark.slow

FAMILIES = textwrap.dedent('''
    import torch
    import transformers as tf

    def _gpt2():
        torch.manual_seed(0)
        cfg = tf.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=32,
                            bos_token_id=0, eos_token_id=0)
        return tf.GPT2Model(cfg).eval(), torch.randint(0, 100, (2, 8))

    def gpt2_dict():
        # attention_mask is GPT-2's THIRD parameter (the second is past_key_values): a dict goes by keyword
        model, ids = _gpt2()
        return model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    def gpt2_tuple():
        model, ids = _gpt2()
        return model, (ids,)

    def mobilevit():
        torch.manual_seed(0)
        cfg = tf.MobileViTConfig(image_size=32, hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
                                 num_attention_heads=2)
        return tf.MobileViTModel(cfg).eval(), {"pixel_values": torch.randn(2, 3, 32, 32)}

    def mobilevit_classifier():
        # Its randomly initialised logits are all subnormal (~2e-41): the export check refused an exact
        # export at max abs err 3.16e-42, cosine 1.000000 (issue 30, item 21).
        torch.manual_seed(0)
        model = tf.MobileViTForImageClassification(tf.MobileViTConfig(image_size=64)).eval()
        return model, {"pixel_values": torch.randn(2, 3, 64, 64)}
''')


@pytest.fixture(scope="module")
def families(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    path = tmp_path_factory.mktemp("families") / "families.py"
    path.write_text(FAMILIES)
    return path


@pytest.mark.parametrize("factory", ["gpt2_dict", "gpt2_tuple", "mobilevit", "mobilevit_classifier"])
def test_family_compiles_and_matches_pytorch(families: Path, tmp_path: Path, factory: str) -> None:
    code, _, err = run_main("compile", f"{families}:{factory}", "--out", str(tmp_path / "o"), "--no-bench",
                            "--target", "cpu", "--backend", "onnxruntime")
    assert code == 0, err  # gpt2_dict was: exit 2 "'Tensor' object has no attribute 'get_seq_length'"
    report = read_report(tmp_path / "o")
    export = next(s for s in report["stages"] if s["name"] == "export")
    assert export["status"] == "ok" and export["details"]["exporter"] == "dynamo", export
    assert report["final"] and report["stages"][-1]["status"] in ("ok", "skipped")
    for stage in report["stages"]:
        if stage["accuracy"]:
            assert stage["accuracy"]["cosine_min"] >= 0.9999, stage


def test_pt2_returning_transformers_outputs_loads_in_a_fresh_process(torch_mod, tmp_path: Path) -> None:
    """A .pt2 whose program returns a transformers ModelOutput: torch.export.load needs that type's pytree
    registration, which importing transformers.modeling_outputs makes (was: exit 2 "Deserializing
    transformers.modeling_outputs.BaseModelOutput in pytree is not registered")."""
    tf = pytest.importorskip("transformers")
    from compile_testkit import run_optcli

    torch = torch_mod
    torch.manual_seed(0)
    model = tf.DistilBertModel(tf.DistilBertConfig(vocab_size=100, dim=32, n_layers=1, n_heads=2, hidden_dim=64,
                                                   max_position_embeddings=64)).eval()
    ids = torch.randint(0, 100, (2, 8))
    batch = torch.export.Dim("batch", min=1, max=64)
    ep = torch.export.export(model, (), kwargs={"input_ids": ids, "attention_mask": torch.ones_like(ids)},
                             dynamic_shapes={"input_ids": {0: batch}, "attention_mask": {0: batch}}, strict=False)
    torch.export.save(ep, str(tmp_path / "distilbert.pt2"))
    p = run_optcli("compile", str(tmp_path / "distilbert.pt2"), "--out", str(tmp_path / "o"), "--no-bench",
                   "--target", "cpu", "--backend", "onnxruntime")
    assert p.returncode == 0, p.stderr


def test_pt2_exported_with_a_constant_keyword(torch_mod, tmp_path: Path) -> None:
    """A decoder exported as users do, with use_cache=False among its keyword inputs: the bool is a
    constant of the program, not an input (was: internal error "'bool' object has no attribute 'shape'")."""
    tf = pytest.importorskip("transformers")
    torch = torch_mod
    torch.manual_seed(0)
    model = tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=32,
                                             bos_token_id=0, eos_token_id=0)).eval()
    ids = torch.randint(0, 100, (2, 8))
    batch = torch.export.Dim("batch", min=1, max=64)
    ep = torch.export.export(model, (), kwargs={"input_ids": ids, "use_cache": False},
                             dynamic_shapes={"input_ids": {0: batch}, "use_cache": None}, strict=False)
    torch.export.save(ep, str(tmp_path / "gpt2.pt2"))
    code, _, err = run_main("compile", str(tmp_path / "gpt2.pt2"), "--out", str(tmp_path / "o"), "--no-bench",
                            "--target", "cpu", "--backend", "onnxruntime")
    assert code == 0, err
    assert [i["name"] for i in read_report(tmp_path / "o")["model"]["inputs"]] == ["input_ids"]
