"""A Hugging Face model folder as MODEL (`save_pretrained` output: config.json + safetensors weights),
like `optimum-cli export onnx --model DIR` without the hub: nothing is downloaded.

The class comes from the config's `architectures` (or `--task`), the example inputs from the kind of
model (token ids and a mask for text, pixel values for vision), with a dynamic batch. What was chosen
is recorded in report.json (`model.loaded_as`).

Trust: config.json is parsed as data. A folder that needs its own code (`auto_map`, i.e.
trust_remote_code) is refused, and weights load from safetensors only (a `.bin` is a pickle). Every file
transformers will open there (config.json, generation_config.json, model.safetensors, the shard index and
each shard it names) must resolve inside the folder, links included: an index naming
`../escaped.safetensors` was followed out of it.
"""
from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, TypedDict

from optcli.errors import UsageError
from optcli.optional_imports import require
from optcli.safe_paths import shown

if TYPE_CHECKING:
    from torch import Tensor

CONFIG = "config.json"
# The other files from_pretrained(use_safetensors=True) opens in a local folder (no variant, no subfolder).
GENERATION_CONFIG = "generation_config.json"
WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
# Deeper JSON than any real config: json's own recursion limit ended such a file in a RecursionError.
MAX_JSON_DEPTH = 64
DEFAULT_SEQUENCE = 128
# --task -> the transformers Auto class that builds it
TASKS = {"feature-extraction": "AutoModel", "text-classification": "AutoModelForSequenceClassification",
         "token-classification": "AutoModelForTokenClassification", "fill-mask": "AutoModelForMaskedLM",
         "question-answering": "AutoModelForQuestionAnswering", "text-generation": "AutoModelForCausalLM",
         "image-classification": "AutoModelForImageClassification"}
# architecture name suffix -> task, for saying what was chosen
_SUFFIXES = {"ForSequenceClassification": "text-classification", "ForTokenClassification": "token-classification",
             "ForMaskedLM": "fill-mask", "ForQuestionAnswering": "question-answering", "ForCausalLM": "text-generation",
             "LMHeadModel": "text-generation", "ForImageClassification": "image-classification"}


def is_model_folder(path: Path) -> bool:
    return path.is_dir() and (path / CONFIG).is_file()


def _read_json(path: Path) -> Any:
    """A JSON file of the folder as data: unreadable, invalid or nested deeper than MAX_JSON_DEPTH is exit 2."""
    hint = "re-save the folder with save_pretrained"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).splitlines()[0][:200]
        raise UsageError(f"{path} is not readable JSON: {why}", hint=hint) from None
    stack = [(data, 1)]
    while stack:  # iterative: the check itself must not recurse
        value, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise UsageError(f"{path} is nested more than {MAX_JSON_DEPTH} levels deep: not a model config", hint=hint)
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    return data


def _inside(folder: Path, name: object, named_in: str) -> Path:
    """folder/name, refused (exit 2) unless `name` is a plain relative file name that resolves inside the
    folder, links included."""
    hint = "a model folder's files must all be inside it; copy the weights in and re-save the index"
    text = name if isinstance(name, str) else None
    if not text or "\x00" in text or PurePosixPath(text.replace("\\", "/")).is_absolute() or Path(text).is_absolute() \
            or ".." in PurePosixPath(text.replace("\\", "/")).parts:
        raise UsageError(f"{named_in} names {shown(repr(name))[:120]}, which is not a file inside {shown(folder)}",
                         hint=hint)
    root = folder.resolve()
    path = (root / text).resolve()
    if root not in path.parents:
        raise UsageError(f"{named_in} names {shown(text)[:120]}, which leads outside {shown(folder)} (a link?)",
                         hint=hint)
    return path


def check_files_inside(folder: Path) -> None:
    """Every file transformers will open in `folder` resolves inside it: the fixed names, and each shard
    the safetensors index names (its weight_map: parameter -> file)."""
    for name in (CONFIG, GENERATION_CONFIG, WEIGHTS, WEIGHTS_INDEX):
        if (folder / name).exists() or (folder / name).is_symlink():
            _inside(folder, name, f"{folder} ({name})")
    index = folder / WEIGHTS_INDEX
    if not index.exists():
        return
    data = _read_json(index)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise UsageError(f"{index} has no weight_map table (parameter name -> shard file)",
                         hint="re-save the folder with save_pretrained")
    seen: set[str] = set()
    for shard in weight_map.values():
        if not (isinstance(shard, str) and shard in seen):
            _inside(folder, shard, str(index))
            seen.add(shard)


def read_config(folder: Path) -> dict[str, object]:
    """config.json as parsed, refused where it asks to run the folder's own code (auto_map)."""
    data = _read_json(folder / CONFIG)
    if not isinstance(data, dict):
        raise UsageError(f"{folder / CONFIG} is not a model config", hint="re-save it with save_pretrained")
    if data.get("auto_map"):
        raise UsageError(f"{folder} needs its own Python code (auto_map in config.json: trust_remote_code)",
                         hint="optcli never runs a model folder's code; build the model in file.py:factory "
                              "and pass that")
    return data


def _model_class(transformers: Any, data: Mapping[str, object], task: str) -> tuple[Any, str]:
    if task != "auto":
        if task not in TASKS:
            raise UsageError(f"unknown task {task!r}", hint=f"use one of: {', '.join(TASKS)}")
        return getattr(transformers, TASKS[task]), task
    archs = data.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    cls = getattr(transformers, arch, None) if arch else None
    if cls is None or arch is None:
        return transformers.AutoModel, "feature-extraction"
    task = next((t for suffix, t in _SUFFIXES.items() if arch.endswith(suffix)), "feature-extraction")
    return cls, task


def _sequence_length(config: Any) -> int:
    """128 tokens, or half the model's position limit where that is less: RoBERTa-style models start
    their positions after the padding index, so the full limit overflows the table."""
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    return min(DEFAULT_SEQUENCE, max(1, int(limit) // 2)) if isinstance(limit, int) and limit > 0 else DEFAULT_SEQUENCE


def example_inputs(torch: Any, model: Any, sequence: int | None = None) -> dict[str, Tensor]:
    """Inputs of the right names and dtypes at batch 2, for what forward() takes: pixel values at the
    config's image size; token ids inside the vocabulary, `sequence` tokens long (default 128 or the
    model's position limit), a mask and token types where the model has them; decoder token ids for
    encoder-decoders; one second of 16 kHz audio for speech encoders."""
    config = model.config
    params = inspect.signature(model.forward).parameters
    inputs: dict[str, Tensor] = {}
    if "input_ids" in params:
        seq = sequence or _sequence_length(getattr(config, "text_config", None) or config)
        vocab = int(getattr(getattr(config, "text_config", None) or config, "vocab_size", 100) or 100)
        inputs["input_ids"] = torch.randint(0, vocab, (2, seq))
        if "attention_mask" in params:
            inputs["attention_mask"] = torch.ones(2, seq, dtype=torch.long)
        if "token_type_ids" in params and (getattr(config, "type_vocab_size", 0) or 0) > 1:
            inputs["token_type_ids"] = torch.zeros(2, seq, dtype=torch.long)
        if "decoder_input_ids" in params and getattr(config, "is_encoder_decoder", False):
            inputs["decoder_input_ids"] = torch.randint(0, vocab, (2, max(1, seq // 2)))
    if "pixel_values" in params:
        vision = getattr(config, "vision_config", None) or config
        size = getattr(vision, "image_size", 224)
        h, w = (size, size) if isinstance(size, int) else tuple(size)[:2]
        inputs["pixel_values"] = torch.randn(2, getattr(vision, "num_channels", 3), h, w)
    if "input_values" in params and not inputs:
        inputs["input_values"] = torch.randn(2, 16000)
    if not inputs:
        raise UsageError(f"optcli cannot make example inputs for {type(model).__name__} "
                         f"(forward takes: {', '.join(list(params)[:6])})",
                         hint="build it in file.py:factory returning (model, example_inputs)")
    return inputs


class LoadedAs(TypedDict):
    """What optcli chose for a model folder, recorded in report.json (`model.loaded_as`)."""
    architecture: str
    task: str
    inputs: dict[str, str]     # name -> "2x128:int64"


def load_model_folder(folder: Path, task: str, sequence: int | None = None
                      ) -> tuple[Any, dict[str, Tensor], LoadedAs]:
    """(model in eval mode, example inputs by name, what was chosen) for a save_pretrained folder;
    `sequence` is the token count a --input pin asked for."""
    torch = require("torch", "loading PyTorch models")
    transformers = require("transformers", "Hugging Face model folders")
    check_files_inside(folder)  # config.json itself may be a link out of the folder
    data = read_config(folder)
    if (folder / GENERATION_CONFIG).is_file():  # transformers parses it too: checked here, as config.json is
        _read_json(folder / GENERATION_CONFIG)
    if not any(folder.glob("*.safetensors")):
        raise UsageError(f"{folder} has no .safetensors weights",
                         hint="save it with save_pretrained(..., safe_serialization=True); optcli does not "
                              "unpickle .bin weights")
    cls, chosen_task = _model_class(transformers, data, task)
    try:
        model = cls.from_pretrained(str(folder), local_files_only=True, use_safetensors=True,
                                    trust_remote_code=False)
    except Exception as exc:  # transformers raises many kinds for a folder it cannot build
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"{folder}: transformers could not build {cls.__name__}: {first}",
                         hint="check the folder is save_pretrained output, or pass --task") from None
    model.eval()
    inputs = example_inputs(torch, model, sequence)
    described = LoadedAs(architecture=type(model).__name__, task=chosen_task,
                         inputs={n: f"{'x'.join(map(str, t.shape))}:{str(t.dtype).replace('torch.', '')}"
                                 for n, t in inputs.items()})
    return model, inputs, described
