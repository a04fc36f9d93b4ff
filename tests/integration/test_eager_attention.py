"""T5 and Swin (transformers, SDPA attention) export with a dynamic batch: the dynamo exporter fails on
their SDPA attention with a symbolic batch, and export retries with eager attention."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from compile_testkit import load_module

pytestmark = pytest.mark.slow
FACTORIES = '''
import torch
import transformers as tf


def t5():
    torch.manual_seed(0)
    model = tf.T5Model(tf.T5Config(vocab_size=100, d_model=32, d_kv=16, d_ff=64, num_layers=1, num_heads=2,
                                   decoder_start_token_id=0))
    ids = torch.randint(3, 100, (2, 12))
    return model.eval(), {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                          "decoder_input_ids": torch.randint(3, 100, (2, 6))}


def swin():
    torch.manual_seed(0)
    model = tf.SwinModel(tf.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
                                       window_size=4))
    return model.eval(), {"pixel_values": torch.randn(2, 3, 32, 32)}
'''


@pytest.mark.parametrize("family", ["t5", "swin"])
def test_dynamic_batch_through_eager_attention(family: str, tmp_path: Path, torch_mod: Any) -> None:
    pytest.importorskip("transformers")
    import onnxruntime as ort

    from optcli import api

    factory = tmp_path / "families.py"
    factory.write_text(FACTORIES)
    report = api.compile(f"{factory}:{family}", out=tmp_path / "o", target="cpu", bench=False, simplify=False,
                         fuse=False, cpu={"backend": "onnxruntime"})
    export = report.stage("export")
    assert export is not None and export.details["dynamic_batch"] is True
    assert export.details["attention"].startswith("eager (the SDPA export failed")
    module = load_module("families_check", factory)
    model, example = getattr(module, family)()
    rng = np.random.default_rng(2)
    feeds = {k: (rng.integers(3, 100, (3, *v.shape[1:])) if not v.is_floating_point()
                 else rng.standard_normal((3, *v.shape[1:]))).astype(v.numpy().dtype) for k, v in example.items()}
    feeds = {k: np.ones_like(v) if k == "attention_mask" else v for k, v in feeds.items()}
    session = ort.InferenceSession(str(tmp_path / "o" / report.final["artifact"]), providers=["CPUExecutionProvider"])
    got = session.run(None, feeds)[0]
    with torch_mod.inference_mode():
        ref = model(**{k: torch_mod.from_numpy(v) for k, v in feeds.items()})[0].numpy()
    assert got.shape == ref.shape and got.shape[0] == 3
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=1e-3)


def test_eager_attention_switches_back_even_on_error() -> None:
    tf = pytest.importorskip("transformers")
    from optcli.backends.torch.attention import eager_attention, sdpa_model

    model = tf.T5Model(tf.T5Config(vocab_size=10, d_model=8, d_kv=4, d_ff=8, num_layers=1, num_heads=2))
    assert sdpa_model(None, model) is model and sdpa_model(object()) is None
    with pytest.raises(RuntimeError), eager_attention(model):
        assert model.config._attn_implementation == model.encoder.config._attn_implementation == "eager"
        raise RuntimeError("export failed")
    assert model.config._attn_implementation == "sdpa" and sdpa_model(model) is model
