"""Text models compile with a dynamic sequence axis: the FP32 and INT8 artifacts of a Hugging Face
folder (a decoder-only GPT-2 and an encoder BERT) run at lengths other than the example's and match
PyTorch; a `--input` pin of the length keeps it static."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from compile_testkit import read_report, run_main

pytestmark = pytest.mark.slow
VOCAB = 100


@pytest.fixture(scope="module")
def folders(torch_mod: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tf = pytest.importorskip("transformers")
    root = tmp_path_factory.mktemp("seq")
    torch_mod.manual_seed(0)
    small = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}
    models = {
        "gpt2": tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=32,
                                                 bos_token_id=0, eos_token_id=0)),
        "bert": tf.BertModel(tf.BertConfig(vocab_size=VOCAB, max_position_embeddings=64, **small)),
    }
    for name, model in models.items():
        model.save_pretrained(str(root / name))
    return {name: root / name for name in models}


def _calib(folder: Path, names: list[str], length: int) -> Path:
    rng = np.random.default_rng(0)
    folder.mkdir()
    for i in range(4):
        ids = rng.integers(0, VOCAB, (4, length)).astype(np.int64)
        arrays = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        np.savez(folder / f"{i}.npz", **{n: arrays[n] for n in names})
    return folder


def _torch_outputs(torch_mod: Any, folder: Path, feeds: dict[str, np.ndarray]) -> np.ndarray:
    import transformers

    model = transformers.AutoModel.from_pretrained(str(folder)) if "bert" in folder.name else \
        transformers.GPT2LMHeadModel.from_pretrained(str(folder))
    with torch_mod.inference_mode():
        out = model.eval()(**{k: torch_mod.from_numpy(v) for k, v in feeds.items()}, use_cache=False) \
            if "gpt2" in folder.name else model.eval()(**{k: torch_mod.from_numpy(v) for k, v in feeds.items()})
    return (out.logits if "gpt2" in folder.name else out.last_hidden_state).numpy()


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("precision", ["fp32", "int8"])
@pytest.mark.parametrize("name, lengths", [("gpt2", (5, 29)), ("bert", (5, 50))])
def test_artifact_runs_at_other_lengths(folders: dict[str, Path], torch_mod: Any, tmp_path: Path, name: str,
                                        lengths: tuple[int, int], precision: str) -> None:
    import onnxruntime as ort

    out = tmp_path / "o"
    args = ["compile", str(folders[name]), "--out", str(out), "--no-bench", "--target", "cpu",
            "--backend", "onnxruntime"]
    if precision == "int8":
        names = ["input_ids", "attention_mask"] + (["token_type_ids"] if name == "bert" else [])
        example = 16 if name == "gpt2" else 32  # the folder's example length: half the position limit
        args += ["--int8", "--calib", str(_calib(tmp_path / "calib", names, example))]
    code, stdout, err = run_main(*args)
    assert code == 0, err
    assert "batch and sequence dynamic" in " ".join(stdout.split())  # rich wraps lines
    report = read_report(out)
    export = next(s for s in report["stages"] if s["name"] == "export")
    assert export["details"]["dynamic_sequence"]["min"] == 2
    assert export["details"]["dynamic_sequence"]["max"] == (32 if name == "gpt2" else 64)
    assert len(export["details"]["verify"]) == 2  # two lengths checked against PyTorch by the stage itself
    assert report["final"]["precision"] == precision
    sess = ort.InferenceSession(str(out / report["final"]["artifact"]), providers=["CPUExecutionProvider"])
    graph_inputs = {i.name: i.shape for i in sess.get_inputs()}
    assert graph_inputs["input_ids"][1] == "sequence"
    rng = np.random.default_rng(1)
    for length in lengths:
        ids = rng.integers(0, VOCAB, (3, length)).astype(np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        feeds = {k: v for k, v in feeds.items() if k in graph_inputs}
        got = sess.run(None, feeds)[0]
        ref = _torch_outputs(torch_mod, folders[name], feeds)
        assert got.shape == ref.shape
        assert _cosine(got, ref) > (0.9999 if precision == "fp32" else 0.98), (length, _cosine(got, ref))
    # Past the position table the artifact refuses by name, not deep inside onnxruntime (the export records
    # the limit in the graph's metadata; every runner checks it).
    import optcli
    from optcli.errors import UsageError

    limit = 32 if name == "gpt2" else 64
    loaded = optcli.load(out / report["final"]["artifact"])
    try:
        ids = rng.integers(0, VOCAB, (1, limit + 1)).astype(np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        with pytest.raises(UsageError, match=f"input 'input_ids' is {limit + 1} long .*takes at most {limit}"):
            loaded.predict({k: v for k, v in feeds.items() if k in graph_inputs})
        ids = ids[:, :limit]
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        assert loaded.predict({k: v for k, v in feeds.items() if k in graph_inputs})  # the limit itself runs
    finally:
        loaded.close()


def test_a_pinned_length_stays_static(folders: dict[str, Path], tmp_path: Path) -> None:
    import onnx

    out = tmp_path / "o"
    code, stdout, err = run_main("compile", str(folders["gpt2"]), "--input", "input_ids:1x12", "--out", str(out),
                                 "--no-bench", "--target", "cpu", "--backend", "onnxruntime")
    assert code == 0, err
    report = read_report(out)
    export = next(s for s in report["stages"] if s["name"] == "export")
    assert export["details"]["dynamic_sequence"] is None and "batch dynamic;" in " ".join(stdout.split())
    model = onnx.load(str(out / report["final"]["artifact"]))
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    assert dims["input_ids"][1] == 12 and dims["attention_mask"][1] == 12
