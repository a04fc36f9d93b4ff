"""The sequence axis of text models: which inputs carry it, its range, and a second length to prove it.

A text model (inputs named input_ids, attention_mask, token_type_ids, position_ids; decoder_input_ids
and decoder_attention_mask for the decoder of an encoder-decoder) is exported with dim 1 of those
inputs symbolic, so one artifact takes any length up to the model's position limit. The lower bound
is 2: torch.export specialises a dim whose example is 0 or 1, and a Dim with min 1 would be refused
for the same reason. The pipeline's specs keep a concrete example length (calibration, measurement
and the accuracy check run at it); only the graph's dim is symbolic.

Static instead: a `--input` pin that fixes dim 1 of one of these inputs (the user asked for that
length), and a target whose descriptor says `dynamic_sequence=False` (TensorRT: its profiles need a
range for every dynamic dim; optcli builds them for the batch only).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from optcli.backends.registry import graph_needs
from optcli.tensor_spec import TensorSpec

# input name -> the sequence it follows (one symbol per group: a mask is as long as its ids)
GROUPS = {"input_ids": "sequence", "attention_mask": "sequence", "token_type_ids": "sequence",
          "position_ids": "sequence", "decoder_input_ids": "decoder_sequence",
          "decoder_attention_mask": "decoder_sequence"}
MIN_LENGTH = 2  # torch.export specialises sizes 0 and 1


@dataclass(frozen=True)
class SequenceAxis:
    """Dim 1 of `inputs` (name -> group) is dynamic in [MIN_LENGTH, limit] (limit None: unbounded)."""

    inputs: dict[str, str]
    limit: int | None

    def dynamic_shapes(self, torch: Any, names: list[str], batch_dynamic: bool) -> dict[str, Any]:
        """torch.export dynamic_shapes by input name: one shared Dim per group at axis 1."""
        dims = {g: torch.export.Dim(g, min=MIN_LENGTH, max=self.limit) if self.limit else
                torch.export.Dim(g, min=MIN_LENGTH) for g in set(self.inputs.values())}
        out: dict[str, Any] = {}
        for name in names:
            axes: dict[int, Any] = {0: torch.export.Dim.DYNAMIC} if batch_dynamic else {}
            if name in self.inputs:
                axes[1] = dims[self.inputs[name]]
            out[name] = axes or None
        return out

    def to_json(self) -> dict[str, Any]:
        return {"inputs": sorted(self.inputs), "min": MIN_LENGTH, "max": self.limit}


def sequence_axis(specs: list[TensorSpec], pinned: list[TensorSpec], module: Any,
                  target: str) -> SequenceAxis | None:
    """The sequence axis to export, or None where it stays static (no text inputs, a pin, the target)."""
    if not graph_needs(target).dynamic_sequence:
        return None
    inputs = {s.name: GROUPS[s.name] for s in specs
              if s.name in GROUPS and len(s.shape) == 2 and isinstance(s.shape[1], int)
              and s.shape[1] > MIN_LENGTH}  # 2 is the example batch: duck sizing would merge the two
    pins = {p.name for p in pinned if p.name in GROUPS and len(p.shape) == 2 and isinstance(p.shape[1], int)}
    if pins & set(inputs):
        return None  # the user asked for that length
    if not inputs:
        return None
    limit = position_limit(module)
    longest = max(int(s.shape[1]) for s in specs if s.name in inputs)
    if limit is not None and limit < longest:
        limit = None  # a config that does not bound the example: no bound is better than a wrong one
    return SequenceAxis(inputs, limit)


def position_limit(module: Any) -> int | None:
    """The config's position limit (max_position_embeddings, n_positions), where the module has one.
    A keyword adapter wraps the user's module as `inner`."""
    config = getattr(module, "config", None) or getattr(getattr(module, "inner", None), "config", None)
    config = getattr(config, "text_config", None) or config
    for key in ("max_position_embeddings", "n_positions"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value >= MIN_LENGTH:
            return value
    return None


def other_length(length: int, limit: int | None) -> int:
    """A second sequence length to prove the axis with: shorter than the example where it can be."""
    if length > MIN_LENGTH + 1:
        return length // 2 + 1
    longer = min(length + 3, limit) if limit else length + 3
    return longer if longer != length else MIN_LENGTH


def with_length(specs: list[TensorSpec], axis: SequenceAxis, lengths: dict[str, int]) -> list[TensorSpec]:
    """The specs with dim 1 of the sequence inputs set to their group's length in `lengths`."""
    return [TensorSpec(s.name, (s.shape[0], lengths[axis.inputs[s.name]], *s.shape[2:]), s.dtype, s.profile)
            if s.name in axis.inputs else s for s in specs]


def example_lengths(specs: list[TensorSpec], axis: SequenceAxis) -> dict[str, int]:
    """Each group's example length (dim 1 of its first input)."""
    out: dict[str, int] = {}
    for s in specs:
        if s.name in axis.inputs:
            out.setdefault(axis.inputs[s.name], int(s.shape[1]))
    return out


# An ONNX given as MODEL has no example to take a length from: optcli's own exports record theirs here
# (graph metadata, read as numbers only); any other graph with a symbolic text dim gets the default.
METADATA_KEY = "optcli.sequence_lengths"
DEFAULT_LENGTH = 128
_MAX_RECORDED = 1 << 20


def record_lengths(model: Any, lengths: dict[str, int]) -> None:
    """Write each group's example length into the ONNX model's metadata."""
    import json

    for prop in list(model.metadata_props):
        if prop.key == METADATA_KEY:
            model.metadata_props.remove(prop)
    entry = model.metadata_props.add()
    entry.key, entry.value = METADATA_KEY, json.dumps(lengths, sort_keys=True)


def recorded_lengths(model: Any) -> dict[str, int]:
    """The lengths record_lengths wrote, keeping only sane integers; {} where none."""
    import json

    text = next((p.value for p in model.metadata_props if p.key == METADATA_KEY), "")
    try:
        data = json.loads(text) if text else {}
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {g: n for g, n in data.items() if g in set(GROUPS.values()) and type(n) is int
            and MIN_LENGTH <= n <= _MAX_RECORDED}


def symbolic_length(name: str, axis: int, symbol: str, recorded: dict[str, int]) -> int | None:
    """The length a symbolic dim stands for: one named after a group (optcli's exports name them so),
    or dim 1 of a text input; the group's recorded length, else DEFAULT_LENGTH. None: not a sequence."""
    group = symbol if symbol in GROUPS.values() else GROUPS.get(name) if axis == 1 else None
    return recorded.get(group, DEFAULT_LENGTH) if group else None


def fill_lengths(specs: list[TensorSpec], recorded: dict[str, int]) -> list[TensorSpec]:
    """Specs of an ONNX's inputs with a symbolic dim 1 of the text inputs made concrete: the recorded
    length of its group, else DEFAULT_LENGTH (a --input pin, merged before, takes precedence)."""
    out = []
    for s in specs:
        if s.name in GROUPS and len(s.shape) == 2 and not isinstance(s.shape[1], int):
            length: int | str = symbolic_length(s.name, 1, str(s.shape[1]), recorded) or str(s.shape[1])
            s = TensorSpec(s.name, (s.shape[0], length), s.dtype, s.profile)
        out.append(s)
    return out
