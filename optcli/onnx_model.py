"""Reading and writing ONNX files: clear errors for bad files, I/O specs, op histograms, safe saves."""
from __future__ import annotations

from collections import Counter
from pathlib import Path, PurePosixPath
from typing import Any, TypedDict

from optcli.errors import UsageError
from optcli.file_version import register
from optcli.tensor_spec import Dim, TensorSpec

# ONNX TensorProto element types -> numpy dtype names.
_ELEM = {1: "float32", 2: "uint8", 3: "int8", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
         10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16"}
# Above this, the protobuf 2 GiB limit is near: weights go to an external data file.
EXTERNAL_DATA_THRESHOLD = 1_800_000_000
# A graph file above this keeps its weights inside; parsing it just to look for external data would
# cost as much memory as the model.
_GRAPH_ONLY_MAX_BYTES = 64 << 20


def load_onnx(path: Path, load_weights: bool = True) -> Any:
    """onnx.load with a one-line UsageError for empty, truncated or non-ONNX files."""
    import onnx

    if path.is_dir():  # Triton's layout for an ONNX with external weights: model.onnx/ holds model.onnx
        inner = path / path.name
        raise UsageError(f"{path} is a folder, not an ONNX file",
                         hint=f"give the graph inside it: {inner}" if inner.is_file() else "give the .onnx file")
    if path.stat().st_size == 0:
        raise UsageError(f"{path} is empty", hint="re-export the model; the file has no bytes")
    try:
        model = onnx.load(str(path), load_external_data=load_weights)
    except Exception as exc:  # protobuf raises DecodeError, RuntimeError or others for garbage
        raise UsageError(f"{path} is not a valid ONNX model ({type(exc).__name__}): corrupt or truncated?",
                         hint="re-export it, or check the download/copy finished") from None
    if not model.graph.node and not model.graph.output:
        raise UsageError(f"{path} is not a valid ONNX model: it has no graph",
                         hint="re-export it, or check the download/copy finished")
    return model


# graph_view keeps tensors up to this size (shape constants, scalars); bigger ones lose their bytes.
_VIEW_MAX_TENSOR_BYTES = 64 << 10
_VIEW_CACHE_SIZE = 16
_TENSOR_DATA_FIELDS = ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data")
_views: dict[tuple[str, int, int, int], Any] = register({})


def graph_view(path: Path) -> Any:
    """The graph at `path` for reading its structure (nodes, names, I/O, metadata, tensor shapes and
    small constants): a copy of a weightless proto parsed once per file version in this process (a
    BERT-base parse is 0.5-0.8 s and a compile reads each graph several times). Big tensors have no
    bytes: never save it or run it; load_onnx is for that."""
    import onnx

    from optcli.file_version import file_version

    key = file_version(path)

    view = _views.get(key)
    if view is None:
        parsed = load_onnx(path, load_weights=False)
        for t in _all_tensors(parsed.graph):
            if tensor_bytes(t) > _VIEW_MAX_TENSOR_BYTES:  # from the shape: reading raw_data would copy it
                for data in _TENSOR_DATA_FIELDS:
                    t.ClearField(data)
        # A fresh message: upb keeps a parsed message's whole arena (the weights' bytes too) alive
        # after ClearField, so the cached view would hold the model's size in memory.
        view = onnx.ModelProto()
        view.CopyFrom(parsed)
        del parsed
        if len(_views) >= _VIEW_CACHE_SIZE:
            _views.pop(next(iter(_views)))
        _views[key] = view
    copy = onnx.ModelProto()
    copy.CopyFrom(view)
    return copy


def _all_tensors(graph: Any) -> Any:
    yield from graph.initializer
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                yield a.t
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from _all_tensors(g)


def _dims(value_info: Any) -> tuple[Dim, ...]:
    dims: list[Dim] = []
    for i, d in enumerate(value_info.type.tensor_type.shape.dim):
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        else:
            dims.append(d.dim_param or f"dim{i}")
    return tuple(dims)


def _spec(value_info: Any) -> TensorSpec:
    elem = value_info.type.tensor_type.elem_type
    return TensorSpec(value_info.name, _dims(value_info), _ELEM.get(elem, f"onnx-type-{elem}"))


def io_specs(model: Any) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """Graph inputs (initializers excluded) and outputs as TensorSpecs."""
    inits = {i.name for i in model.graph.initializer}
    inputs = [_spec(v) for v in model.graph.input if v.name not in inits]
    outputs = [_spec(v) for v in model.graph.output]
    return inputs, outputs


def op_histogram(model: Any) -> dict[str, int]:
    """Node count per op type (non-default domains prefixed, e.g. com.microsoft.FusedConv)."""
    counts: Counter[str] = Counter()
    for node in model.graph.node:
        key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
        counts[key] += 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


class GraphSummary(TypedDict):
    nodes: int
    ops: dict[str, int]     # op_histogram


def graph_summary(path: Path) -> GraphSummary:
    model = graph_view(path)
    hist = op_histogram(model)
    return {"nodes": sum(hist.values()), "ops": hist}


def _outer_inputs(graph: Any) -> set[str]:
    """Names a subgraph reads from the scope around it (If/Loop/Scan bodies)."""
    defined = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    used: set[str] = set()
    for node in graph.node:
        used.update(i for i in node.input if i)
        for a in node.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                used |= _outer_inputs(g)
        defined.update(node.output)
    return used - defined


def sort_topologically(graph: Any) -> bool:
    """Reorder `graph.node` so every node comes after the producers of its inputs (the ONNX checker
    demands it; converters such as onnxruntime's float16 append input casts at the end). Stable: a
    sorted graph is left as it is. Returns True when it reordered."""
    import heapq

    nodes = list(graph.node)
    producer = {out: i for i, n in enumerate(nodes) for out in n.output if out}
    needs: list[set[int]] = []
    for n in nodes:
        names = {i for i in n.input if i}
        for a in n.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                names |= _outer_inputs(g)
        needs.append({producer[x] for x in names if x in producer})
    if all(all(p < i for p in deps) for i, deps in enumerate(needs)):
        return False
    users: dict[int, list[int]] = {}
    for i, deps in enumerate(needs):
        for p in deps:
            users.setdefault(p, []).append(i)
    waiting = [len(deps - {i}) for i, deps in enumerate(needs)]
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users.get(i, []):
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(nodes):
        return False  # a cycle: leave it for the checker to name
    del graph.node[:]
    graph.node.extend(nodes[i] for i in order)
    return True


def save_onnx(model: Any, path: Path) -> list[str]:
    """Save `model` to `path` (inside a folder being written atomically), its nodes in topological
    order; returns external data files."""
    import onnx

    sort_topologically(model.graph)
    # A new file, never a write through an existing one: `path` may be a hard link to another stage's
    # graph (name_nodes links graphs it need not change).
    path.unlink(missing_ok=True)

    # Serialized once: upb's ByteSize() costs a whole serialization (1 s on BERT-base, per save), so the
    # size is estimated from the tensors' shapes first and checked on the bytes.
    parts = None
    if not near_protobuf_limit(inline_tensor_bytes(model)):
        try:
            parts = serialized_parts(model)
        except ValueError:  # over protobuf's 2 GiB after all
            parts = None
        if parts is not None and near_protobuf_limit(sum(len(p) for p in parts)):
            parts = None
    if parts is None:
        location = path.name + ".data"
        # convert_attribute: Constant nodes' tensors count toward the limit as much as initializers.
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=location, size_threshold=1024, convert_attribute=True)
        return [location] if (path.parent / location).exists() else []
    with open(path, "wb") as f:
        f.writelines(parts)
    _remember_view(path, model)
    return []


def _remember_view(path: Path, model: Any) -> None:
    """The graph_view of a file just written, from the model in memory: the next stage and the stage
    row read its structure without parsing it again (0.25-0.9 s for BERT-base)."""
    from optcli.file_version import file_version

    if len(_views) >= _VIEW_CACHE_SIZE:
        _views.pop(next(iter(_views)))
    _views[file_version(path)] = weightless_copy(model, _VIEW_MAX_TENSOR_BYTES, constants=True)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _is_repeated(fd: Any) -> bool:
    """Whether a protobuf field is repeated: `is_repeated` (protobuf 5.28+); protobuf 7 removed `label`."""
    flag = getattr(fd, "is_repeated", None)
    return bool(flag) if flag is not None else fd.label == fd.LABEL_REPEATED


def _copy_fields(src: Any, dst: Any, leave: str | tuple[str, ...]) -> None:
    """dst = src without the field(s) `leave` (a shallow walk: the fields themselves are copied whole)."""
    leave = (leave,) if isinstance(leave, str) else leave
    for fd, value in src.ListFields():
        if fd.name in leave:
            continue
        if _is_repeated(fd):
            getattr(dst, fd.name).extend(value)
        elif fd.message_type is not None:
            getattr(dst, fd.name).CopyFrom(value)
        else:
            setattr(dst, fd.name, value)


def _heads(model: Any) -> tuple[Any, Any]:
    """(the model without its graph, the graph without its initializers): copies that leave the weights."""
    import onnx

    head, graph = onnx.ModelProto(), onnx.GraphProto()
    _copy_fields(model, head, "graph")
    _copy_fields(model.graph, graph, "initializer")
    return head, graph


def weightless_copy(model: Any, keep_bytes: int, constants: bool = False) -> Any:
    """A copy of the model whose initializers over `keep_bytes` keep every field but their data (for
    reading structure and shapes: never save it or run it), made without copying the weights; with
    `constants`, big tensors inside nodes (Constant values, subgraphs) lose their data too, as in a
    graph_view."""
    import onnx

    copy, graph = _heads(model)
    for t in model.graph.initializer:
        if tensor_bytes(t) > keep_bytes:
            _copy_fields(t, graph.initializer.add(), _TENSOR_DATA_FIELDS)
        else:
            graph.initializer.append(t)
    copy.graph.CopyFrom(graph)
    if constants:
        big = [t for t in _all_tensors(copy.graph) if tensor_bytes(t) > keep_bytes]
        for t in big:
            for data in _TENSOR_DATA_FIELDS:
                t.ClearField(data)
        if big:  # a fresh message: upb keeps the cleared bytes' arena alive with the old one
            fresh = onnx.ModelProto()
            fresh.CopyFrom(copy)
            copy = fresh
    return copy


def serialized_parts(model: Any) -> list[bytes]:
    """The model's protobuf bytes as pieces whose concatenation parses to the same model: the model and
    graph without their initializers, then each initializer as its own graph field (protobuf takes
    fields in any order). upb serializes one big message several times slower than its pieces (BERT-base:
    1.0-1.7 s against 0.45 s, most of it growing one 440 MB buffer), and the pieces need no join."""
    head, graph_head = _heads(model)
    graph = [graph_head.SerializeToString()]
    for t in model.graph.initializer:
        b = t.SerializeToString()
        graph += [b"\x2a" + _varint(len(b)), b]  # GraphProto.initializer: field 5, length-delimited
    size = sum(len(p) for p in graph)
    return [head.SerializeToString(), b"\x3a" + _varint(size), *graph]  # ModelProto.graph: field 7


def tensor_bytes(t: Any) -> int:
    """Bytes a tensor stores inside the model, from its shape and type (0 for external data and
    strings, which the shape does not size)."""
    from onnx import TensorProto, helper

    if t.data_location == TensorProto.EXTERNAL or t.data_type in (TensorProto.STRING, TensorProto.UNDEFINED):
        return 0
    n = 1
    for d in t.dims:
        n *= int(d)
    try:
        return n * helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    except (KeyError, TypeError, ValueError):
        return len(t.raw_data)


def inline_tensor_bytes(model: Any) -> int:
    """Bytes of the tensors stored inside the model (initializers and Constant values, subgraphs' too,
    from their shapes; external ones are not counted): a cheap lower bound of its serialized size."""
    return sum(tensor_bytes(t) for t in _all_tensors(model.graph))


def has_symbolic_batch(model: Any) -> bool:
    """True when dim 0 of every graph input is symbolic (a dim_param, not a fixed value)."""
    inputs, _ = io_specs(model)
    return bool(inputs) and all(s.shape and not isinstance(s.shape[0], int) for s in inputs)


def looks_like_encoder(ops: dict[str, int]) -> bool:
    """Transformer encoder: attention (MatMul + Softmax) and layer norms (fused or decomposed)."""
    has_norm = (any(k.endswith("LayerNormalization") for k in ops)
                or ("ReduceMean" in ops and ("Pow" in ops or "Mul" in ops)))
    return "Softmax" in ops and "MatMul" in ops and has_norm or "com.microsoft.Attention" in ops


def int_bounds_onnx(path: Path) -> dict[str, int]:
    """For int graph inputs used as Gather indices into an initializer: that table's size."""
    model = graph_view(path)
    g = model.graph
    inits = {i.name: list(i.dims) for i in g.initializer}
    int_inputs = {v.name for v in g.input if v.type.tensor_type.elem_type in (6, 7)}  # int32, int64
    bounds: dict[str, int] = {}
    for node in g.node:
        if node.op_type == "Gather" and len(node.input) == 2 and node.input[1] in int_inputs \
                and node.input[0] in inits:
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            size = inits[node.input[0]][axis] if inits[node.input[0]] else 0
            if size > 0:
                bounds[node.input[1]] = min(bounds.get(node.input[1], size), size)
    return bounds


def _external_tensors(model: Any) -> Any:
    """Every tensor of `model` (initializers and Constant-style attributes, subgraphs included) whose data
    sits in an external file."""
    import onnx

    graphs = [model.graph]
    while graphs:
        graph = graphs.pop()
        tensors = list(graph.initializer) + [a.t for n in graph.node for a in n.attribute
                                             if a.type == onnx.AttributeProto.TENSOR]
        yield from (t for t in tensors if t.data_location == onnx.TensorProto.EXTERNAL)
        for node in graph.node:
            for a in node.attribute:
                graphs.extend([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs))


def _raw_locations(model: Any) -> list[str]:
    """The external data locations as the graph spells them, in first-reference order."""
    locations: list[str] = []
    for tensor in _external_tensors(model):
        loc = next((e.value for e in tensor.external_data if e.key == "location"), "")
        if loc not in locations:
            locations.append(loc)
    return locations


def external_data_files(path: Path) -> list[str]:
    """Relative locations of the external weight files the ONNX graph at `path` references, in first-
    reference order; each must stay inside the model's folder and exist (a hostile graph could point at
    any file). A graph file over 64 MB holds its weights inside: [] without parsing it."""
    if path.stat().st_size > _GRAPH_ONLY_MAX_BYTES:
        return []
    model = load_onnx(path, load_weights=False)
    return list(dict.fromkeys(_contained_location(path.parent, loc) for loc in _raw_locations(model)))


def _contained_location(folder: Path, loc: str) -> str:
    rel = PurePosixPath(loc.replace("\\", "/"))
    if not loc or rel.is_absolute() or ".." in rel.parts:
        raise UsageError(f"external data location {loc!r} points outside the model's folder",
                         hint="re-save the model with its weights beside it")
    if not (folder / rel).is_file():
        raise UsageError(f"external data file {folder / rel} is missing", hint="copy it beside the model")
    return str(rel)


def near_protobuf_limit(nbytes: int) -> bool:
    """Whether a model of `nbytes` must keep its weights in an external data file."""
    return nbytes > EXTERNAL_DATA_THRESHOLD


def is_large(path: Path) -> bool:
    """True when the ONNX model at `path` (graph plus external weights) is near protobuf's 2 GiB limit:
    every tool that rewrites it must then write its weights to an external data file."""
    return near_protobuf_limit(path.stat().st_size + sum((path.parent / f).stat().st_size
                                                         for f in external_data_files(path)))


def copy_external_data(model: Any, src: Path, dst: Path) -> None:
    """Point the external tensors of `model` (loaded from `src` without weights) at copies beside `dst`
    named after it (`dst.data`, `dst.data1`, ...), so a tool writing its own `model.onnx.data` beside
    `dst` never meets them. Copies, not hard links: onnx.load refuses hard-linked external data (a
    "hardlink attack" check since onnx 1.20), and a link would let one stage's write change another's."""
    import shutil

    renamed: dict[str, str] = {}  # as the graph spells it -> the copy's name
    for loc in _raw_locations(model):
        rel = _contained_location(src.parent, loc)
        renamed[loc] = f"{dst.name}.data{len(renamed) or ''}"
        shutil.copyfile(src.parent / rel, dst.parent / renamed[loc])
    for tensor in _external_tensors(model):
        for entry in tensor.external_data:
            if entry.key == "location" and entry.value in renamed:
                entry.value = renamed[entry.value]


def remove_onnx(path: Path) -> None:
    """Delete an ONNX graph file and the external data files it references."""
    for extra in external_data_files(path) if path.is_file() else []:
        (path.parent / extra).unlink(missing_ok=True)
    path.unlink(missing_ok=True)
