"""The unpad corpus: text encoders as people export them, for the unpad rewrite to apply to (issue 31).

Families from reduced transformers configs (random weights, no hub), each wrapped the way a user
exports it (inputs `input_ids` and `attention_mask`, plus `token_type_ids` where said), through three
exporters (the dynamo exporter called plainly: every shape fixed, batch 1 x LENGTH; the TorchScript
exporter at a fixed length, dynamic batch; the TorchScript exporter with a dynamic batch and sequence)
at an opset. `check(case, folder)` exports one case and runs optcli on it the way `optcli compile
model.onnx` does (simplify, fuse, unpad; no quantization, no benchmark), and runs the rewrite on the
exporter's graph as build-cpu does for OpenVINO's candidates; each must apply and be proven (the
stage's own proof: outputs equal the padded model's on valid positions under onnxruntime), or the
case reports the reason.

Used by benchmarks/unpad_corpus.py (the table) and tests/integration/test_unpad_corpus.py.
"""
from __future__ import annotations

import contextlib
import io
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LENGTH = 48            # the fixed length: no hidden, head, feed-forward or vocabulary size of the corpus is 48
VOCAB = 100
SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
EXPORTERS = ("dynamo", "torchscript-fixed", "torchscript-dynamic")
OPSETS = (14, 17)


def _configs(tf: Any) -> dict[str, Any]:
    """family -> () -> (transformers model, extra input names, pooled: mean-pool + L2 normalise)."""
    pos = {"max_position_embeddings": 160}  # room for optcli's default length (128) on a dynamic axis
    return {
        "bert": lambda: (tf.BertModel(tf.BertConfig(vocab_size=VOCAB, **pos, **SMALL)), [], False),
        "bert+token_type_ids": lambda: (tf.BertModel(tf.BertConfig(vocab_size=VOCAB, **pos, **SMALL)),
                                        ["token_type_ids"], False),
        "roberta": lambda: (tf.RobertaModel(tf.RobertaConfig(vocab_size=VOCAB, **pos, **SMALL)), [], False),
        "distilbert": lambda: (tf.DistilBertModel(tf.DistilBertConfig(
            vocab_size=VOCAB, dim=32, n_layers=2, n_heads=2, hidden_dim=64, **pos)), [], False),
        "albert": lambda: (tf.AlbertModel(tf.AlbertConfig(vocab_size=VOCAB, embedding_size=16, **pos, **SMALL)),
                           [], False),
        "electra": lambda: (tf.ElectraModel(tf.ElectraConfig(vocab_size=VOCAB, embedding_size=16, **pos, **SMALL)),
                            [], False),
        "deberta-v2": lambda: (tf.DebertaV2Model(tf.DebertaV2Config(
            vocab_size=VOCAB, relative_attention=True, position_buckets=16, max_relative_positions=64,
            pos_att_type=["p2c", "c2p"], **pos, **SMALL)), [], False),
        "mpnet": lambda: (tf.MPNetModel(tf.MPNetConfig(vocab_size=VOCAB, **pos, **SMALL)), [], False),
        "xlm-roberta": lambda: (tf.XLMRobertaModel(tf.XLMRobertaConfig(vocab_size=VOCAB, **pos, **SMALL)), [], False),
        "t5-encoder": lambda: (tf.T5EncoderModel(tf.T5Config(
            vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2,
            relative_attention_num_buckets=8)), [], False),
        "sentence-transformers (bert, mean pool, L2)": lambda: (
            tf.BertModel(tf.BertConfig(vocab_size=VOCAB, **pos, **SMALL)), [], True),
    }


FAMILIES = ("bert", "bert+token_type_ids", "roberta", "distilbert", "albert", "electra", "deberta-v2", "mpnet",
            "xlm-roberta", "t5-encoder", "sentence-transformers (bert, mean pool, L2)")


@dataclass(frozen=True)
class Case:
    family: str
    exporter: str
    opset: int

    @property
    def label(self) -> str:
        return f"{self.family} | {self.exporter} | opset {self.opset}"


def all_cases() -> list[Case]:
    return [Case(f, e, o) for f in FAMILIES for e in EXPORTERS for o in OPSETS]


@dataclass
class Outcome:
    case: Case
    applied: bool
    reason: str | None          # why not (the stage's reason, or the export's error)
    twin_applied: bool          # the rewrite of the exporter's graph (build-cpu's OpenVINO candidates)
    twin_reason: str | None
    seconds: float
    model: Path | None = None       # the export
    artifact: Path | None = None    # the compile's final artifact
    constants_changed: list[str] | None = None  # what the stage re-expressed in L (none on a dynamic axis)


def build(family: str) -> tuple[Any, dict[str, Any]]:
    """(module, example inputs: batch 2 x LENGTH) of a family, wrapped as a user exports it."""
    import torch
    import transformers as tf

    torch.manual_seed(0)
    model, extra, pooled = _configs(tf)[family]()
    model.eval()

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
            kw = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
            hidden = self.m(input_ids=input_ids, attention_mask=attention_mask, **kw).last_hidden_state
            if not pooled:
                return hidden
            m = attention_mask.unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, p=2, dim=1)

    ids = torch.randint(3, VOCAB, (2, LENGTH))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if extra:
        inputs["token_type_ids"] = torch.zeros_like(ids)
    return Encoder().eval(), inputs


def export(case: Case, path: Path) -> None:
    """Export one case to `path` the way its exporter is commonly called."""
    import torch

    module, inputs = build(case.family)
    names = list(inputs)
    pooled = case.family.startswith("sentence-transformers")
    out_axes = {0: "batch"} if pooled else {0: "batch", 1: "sequence"}
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        if case.exporter == "dynamo":  # its plain call: every shape fixed at the example's (batch 1 x LENGTH)
            def dynamo() -> None:
                torch.onnx.export(module, (), str(path), kwargs={k: v[:1] for k, v in inputs.items()},
                                  dynamo=True, opset_version=case.opset, input_names=names, output_names=["output"],
                                  external_data=False)
            try:
                dynamo()
            except Exception:  # T5's SDPA path does not decompose: eager attention, as users (and optcli) retry
                module.m.set_attn_implementation("eager")
                dynamo()
            return
        seq = case.exporter == "torchscript-dynamic"
        axes = {n: ({0: "batch", 1: "sequence"} if seq else {0: "batch"}) for n in names}
        axes["output"] = out_axes if seq else {0: "batch"}
        torch.onnx.export(module, tuple(inputs[n] for n in names), str(path), dynamo=False,
                          opset_version=case.opset, input_names=names, output_names=["output"], dynamic_axes=axes)


def check(case: Case, folder: Path) -> Outcome:
    """Export `case` into `folder` and run optcli's unpad on it (see the module docstring)."""
    import optcli

    start = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    model = folder / "model.onnx"
    try:
        export(case, model)
    except Exception as exc:  # an exporter's own failure: reported, not unpad's
        line = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        return Outcome(case, False, f"export failed: {line}", False, None, time.perf_counter() - start)
    report = optcli.compile(model, out=folder / "out", target="cpu", force=True, check=False,
                            **{"bench.enabled": False, "backend": "onnxruntime"})
    stage = next((s for s in report.stages if s.name == "unpad"), None)
    if stage is None:
        applied, reason = False, f"compile {report.status}: {(report.error or {}).get('message')}"
    else:
        applied = bool(stage.details.get("applied"))
        reason = None if applied else (stage.details.get("skipped") or stage.status)
    twin_reason = _twin(model, folder)
    final = folder / "out" / report.final["artifact"] if report.final else None
    changed = stage.details.get("constants_changed") if stage is not None else None
    return Outcome(case, applied, reason, twin_reason is None, twin_reason, time.perf_counter() - start, model, final,
                   changed)


def _twin(model: Path, folder: Path) -> str | None:
    """The rewrite and its proof on the exporter's graph itself (build-cpu's OpenVINO candidates start
    there): None where it applies, else the reason."""
    from optcli.onnx_model import int_bounds_onnx, io_specs, load_onnx
    from optcli.sequence_axis import fill_lengths, recorded_lengths
    from optcli.unpad.apply import rewrite_and_prove
    from optcli.unpad.verify import GraphRuns

    graph = load_onnx(model)
    inputs = fill_lengths(io_specs(graph)[0], recorded_lengths(graph))
    with GraphRuns() as runs:
        return rewrite_and_prove(model, folder / "twin.onnx", inputs=inputs, int_high=int_bounds_onnx(model),
                                 bucket=16, runs=runs, details={})
