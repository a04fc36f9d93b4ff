"""A Hugging Face model folder (save_pretrained output) as MODEL, with no flags but the folder: the class
from config.json's architectures, example inputs of the right names and dtypes, nothing downloaded,
nothing of the folder's own code run, weights from safetensors only."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from compile_testkit import read_report, run_main, run_optcli, sharded_copy

pytestmark = pytest.mark.slow
EXIT_USAGE = 2


@pytest.fixture(scope="module")
def folders(torch_mod: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tf = pytest.importorskip("transformers")
    root = tmp_path_factory.mktemp("hf")
    torch_mod.manual_seed(0)
    small = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}
    models = {
        "bert-cls": tf.BertForSequenceClassification(tf.BertConfig(vocab_size=100, max_position_embeddings=64,
                                                                   num_labels=3, **small)),
        "gpt2-lm": tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=32,
                                                    bos_token_id=0, eos_token_id=0)),
        "vit-cls": tf.ViTForImageClassification(tf.ViTConfig(image_size=32, patch_size=8, num_labels=5, **small)),
    }
    for name, model in models.items():
        model.save_pretrained(str(root / name))
    return {name: root / name for name in models}


@pytest.mark.parametrize("name, architecture, task, inputs", [
    ("bert-cls", "BertForSequenceClassification", "text-classification",
     {"input_ids": "2x32:int64", "attention_mask": "2x32:int64", "token_type_ids": "2x32:int64"}),
    ("gpt2-lm", "GPT2LMHeadModel", "text-generation", {"input_ids": "2x16:int64", "attention_mask": "2x16:int64"}),
    ("vit-cls", "ViTForImageClassification", "image-classification", {"pixel_values": "2x3x32x32:float32"}),
])
def test_folder_compiles_with_no_flags(folders: dict[str, Path], tmp_path: Path, name: str, architecture: str,
                                       task: str, inputs: dict[str, str]) -> None:
    out = tmp_path / "o"
    p = run_optcli("compile", str(folders[name]), "--out", str(out), "--no-bench", "--backend", "onnxruntime")
    assert p.returncode == 0, p.stderr
    assert f"model: {architecture} as {task}" in p.stdout
    report = read_report(out)
    assert report["model"]["format"] == "hf-folder"
    assert report["model"]["loaded_as"] == {"architecture": architecture, "task": task, "inputs": inputs}
    export = next(s for s in report["stages"] if s["name"] == "export")
    assert export["status"] == "ok" and export["accuracy"]["cosine_min"] >= 0.9999


def test_task_override_and_sequence_pin(folders: dict[str, Path], tmp_path: Path) -> None:
    code, out, err = run_main("compile", str(folders["bert-cls"]), "--task", "feature-extraction", "--input",
                              "input_ids:1x16", "--out", str(tmp_path / "o"), "--no-bench", "--backend", "onnxruntime")
    assert code == 0, err
    loaded = read_report(tmp_path / "o")["model"]["loaded_as"]
    assert loaded["architecture"] == "BertModel" and loaded["inputs"]["input_ids"] == "2x16:int64"


def test_int8_of_a_folder(folders: dict[str, Path], tmp_path: Path) -> None:
    calib = tmp_path / "calib"
    calib.mkdir()
    rng = np.random.default_rng(0)
    for i in range(4):
        np.savez(calib / f"{i}.npz", pixel_values=rng.standard_normal((8, 3, 32, 32)).astype(np.float32))
    code, _, err = run_main("compile", str(folders["vit-cls"]), "--int8", "--calib", str(calib), "--out",
                            str(tmp_path / "o"), "--no-bench", "--target", "cpu")
    assert code == 0, err
    report = read_report(tmp_path / "o")
    quant = next(s for s in report["stages"] if s["name"] == "quantize-int8")
    assert quant["status"] == "ok" and report["final"]["precision"] == "int8"


def test_folder_needing_its_own_code_is_refused(folders: dict[str, Path], tmp_path: Path) -> None:
    folder = tmp_path / "remote"
    folder.mkdir()
    config = json.loads((folders["bert-cls"] / "config.json").read_text())
    config["auto_map"] = {"AutoModel": "modeling_evil.EvilModel"}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "modeling_evil.py").write_text("open('pwned', 'w').write('ran')\n")
    (folder / "model.safetensors").write_bytes((folders["bert-cls"] / "model.safetensors").read_bytes())
    p = run_optcli("compile", str(folder), "--out", str(tmp_path / "o"), "--no-bench", cwd=tmp_path)
    assert p.returncode == EXIT_USAGE and "needs its own Python code" in p.stderr, p.stderr
    assert not (tmp_path / "pwned").exists()


def test_folder_with_pickled_weights_only_is_refused(folders: dict[str, Path], tmp_path: Path) -> None:
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "config.json").write_text((folders["bert-cls"] / "config.json").read_text())
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04pickle")
    p = run_optcli("compile", str(folder), "--out", str(tmp_path / "o"), "--no-bench")
    assert p.returncode == EXIT_USAGE and "no .safetensors weights" in p.stderr, p.stderr


# -- issue 30, item 7: every file a folder's index or config names resolves inside the folder --------

def test_a_sharded_folder_compiles(folders: dict[str, Path], tmp_path: Path) -> None:
    """The index check refuses only what leads out: a real sharded folder still compiles."""
    sharded_copy(folders["bert-cls"], tmp_path / "sharded")
    code, _, err = run_main("compile", str(tmp_path / "sharded"), "--out", str(tmp_path / "o"), "--no-bench",
                            "--backend", "onnxruntime", "--target", "cpu")
    assert code == 0, err


ESCAPES = ["parent", "absolute", "inner-parent", "shard-link", "weights-link", "config-link", "folder-link"]


@pytest.mark.parametrize("escape", ESCAPES)
def test_a_file_named_outside_the_folder_is_refused(folders: dict[str, Path], tmp_path: Path, escape: str) -> None:
    """A shard index naming ../escaped.safetensors was followed out of the folder (the real weights there
    loaded and the compile succeeded). Every way out is refused, exit 2, and nothing outside is opened."""
    from fs_watch import FolderWatch

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    folder = tmp_path / "model"
    index = sharded_copy(folders["bert-cls"], folder)
    shard = next(iter(sorted(set(index["weight_map"].values()))))
    (outside / "escaped.safetensors").write_bytes((folder / shard).read_bytes())
    (outside / "config.json").write_text((folder / "config.json").read_text())
    named = {"parent": "../elsewhere/escaped.safetensors", "absolute": str(outside / "escaped.safetensors"),
             "inner-parent": "sub/../../elsewhere/escaped.safetensors"}
    (folder / "sub").mkdir()  # the inner-parent name resolves through it
    if escape in named:
        index["weight_map"] = {n: named[escape] if s == shard else s for n, s in index["weight_map"].items()}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))
        (folder / shard).unlink()
    elif escape == "shard-link":
        (folder / shard).unlink()
        (folder / shard).symlink_to(outside / "escaped.safetensors")
    elif escape == "weights-link":  # one file, no index
        (folder / "model.safetensors.index.json").unlink()
        (folder / "model.safetensors").symlink_to(outside / "escaped.safetensors")
    elif escape == "config-link":
        (folder / "config.json").unlink()
        (folder / "config.json").symlink_to(outside / "config.json")
    else:  # a shard named inside a subfolder that is a link out
        (outside / "sub").mkdir()
        (outside / "sub" / "escaped.safetensors").write_bytes((outside / "escaped.safetensors").read_bytes())
        (folder / "sub").rmdir()
        (folder / "sub").symlink_to(outside / "sub")
        index["weight_map"] = {n: "sub/escaped.safetensors" if s == shard else s
                               for n, s in index["weight_map"].items()}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with FolderWatch(outside, *( [outside / "sub"] if escape == "folder-link" else [])) as watch:
        code, out, err = run_main("compile", str(folder), "--out", str(tmp_path / "o"), "--no-bench",
                                  "--backend", "onnxruntime", "--target", "cpu")
        touched = watch.events()
    assert code == EXIT_USAGE, (code, err)
    assert "Traceback" not in err
    lines = err.splitlines()
    errors = [i for i, ln in enumerate(lines) if ln.startswith("error: ")]
    assert len(errors) == 1 and lines[errors[0] + 1].startswith("hint: "), err
    assert "inside" in lines[errors[0]] or "outside" in lines[errors[0]], lines[errors[0]]
    assert touched == [], touched  # refused before anything there was opened


# -- issue 30, item 12: a deeply nested JSON file of the folder is bad input (exit 2), not a crash ----

@pytest.mark.parametrize("which, depth", [("config.json", 100_000), ("config.json", 500),
                                          ("model.safetensors.index.json", 100_000),
                                          ("generation_config.json", 100_000)])
def test_deeply_nested_json_exits_2(folders: dict[str, Path], tmp_path: Path, which: str, depth: int) -> None:
    """config.json nested 100,000 levels deep ended in RecursionError, exit 1 (an 'internal error'). Any JSON
    file of the folder nested past what json (or transformers, copying a config) recurses through is refused."""
    folder = tmp_path / "deep"
    sharded_copy(folders["gpt2-lm"], folder)
    nested = "[" * depth + "]" * depth
    path = folder / which
    if which == "config.json":
        config = json.loads(path.read_text())
        path.write_text(json.dumps(config)[:-1] + f', "extra": {nested}}}')
    elif which == "model.safetensors.index.json":
        index = json.loads(path.read_text())
        path.write_text(json.dumps(index)[:-1] + f', "extra": {nested}}}')
    else:
        path.write_text(f'{{"bos_token_id": 0, "extra": {nested}}}')
    code, _, err = run_main("compile", str(folder), "--out", str(tmp_path / "o"), "--no-bench",
                            "--backend", "onnxruntime", "--target", "cpu")
    assert code == EXIT_USAGE, (code, err)
    assert "Traceback" not in err and "internal error" not in err, err
    line = next(ln for ln in err.splitlines() if ln.startswith("error: "))
    assert which in line and "nested" in line, line
