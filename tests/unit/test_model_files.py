"""Model files read and written once per version: save_onnx serializes once (external data decided from
the tensors' sizes), graph_view parses a graph once, sha256_file hashes a file once."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optcli import onnx_model
from optcli.onnx_model import inline_tensor_bytes, load_onnx, save_onnx


def _model(weight_in_constant: bool = False) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.arange(64 * 64, dtype=np.float32).reshape(64, 64), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    inits = [w]
    if weight_in_constant:
        nodes.insert(0, helper.make_node("Constant", [], ["w"], name="c", value=w))
        inits = []
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("in_constant", [False, True])
def test_the_estimate_counts_initializers_and_constants(in_constant: bool) -> None:
    assert inline_tensor_bytes(_model(in_constant)) == 64 * 64 * 4


def test_the_estimate_counts_tensors_inside_subgraphs() -> None:
    # An If branch's Constant is stored in the model as much as a top-level one (protobuf's 2 GiB counts it).
    w = numpy_helper.from_array(np.ones((32, 32), np.float32), "w")
    branch = helper.make_graph([helper.make_node("Constant", [], ["w"], value=w)], "b", [],
                               [helper.make_tensor_value_info("w", TensorProto.FLOAT, [32, 32])])
    m = _model()
    m.graph.node.append(helper.make_node("If", ["cond"], ["z"], then_branch=branch, else_branch=branch))
    assert inline_tensor_bytes(m) == 64 * 64 * 4 + 2 * 32 * 32 * 4


def test_external_tensors_are_not_counted() -> None:
    m = _model()
    m.graph.initializer[0].data_location = TensorProto.EXTERNAL
    m.graph.initializer[0].ClearField("raw_data")
    assert inline_tensor_bytes(m) == 0


def test_small_model_round_trips_in_one_file(tmp_path: Path) -> None:
    m = _model()
    assert save_onnx(m, tmp_path / "m.onnx") == []
    again = load_onnx(tmp_path / "m.onnx")
    assert again.SerializeToString() == m.SerializeToString()


def _rich_model() -> onnx.ModelProto:
    """Every kind of field a model carries: metadata, functions, a subgraph with its own initializer,
    a Constant, value_info, sparse and string initializers, a big tensor (a multi-byte length)."""
    m = _model(weight_in_constant=True)
    m.graph.initializer.extend([numpy_helper.from_array(np.ones((300, 300), np.float32), "big"),
                                helper.make_tensor("s", TensorProto.STRING, [2], [b"a", b"bc"]),
                                numpy_helper.from_array(np.zeros(0, np.float32), "empty")])
    m.graph.sparse_initializer.append(helper.make_sparse_tensor(
        numpy_helper.from_array(np.ones(2, np.float32), "sp"), numpy_helper.from_array(np.array([0, 3]), "i"), [4]))
    m.graph.value_info.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [64, 64]))
    inner = helper.make_graph([helper.make_node("Identity", ["k"], ["o"])], "b", [],
                              [helper.make_tensor_value_info("o", TensorProto.FLOAT, [3])],
                              [numpy_helper.from_array(np.arange(3, dtype=np.float32), "k")])
    m.graph.node.append(helper.make_node("If", ["cond"], ["z"], then_branch=inner, else_branch=inner))
    m.graph.doc_string, m.doc_string, m.producer_name, m.model_version = "g doc", "m doc", "optcli-test", 7
    helper.set_model_props(m, {"author": "me"})
    m.functions.append(helper.make_function("local", "f", ["a"], ["b"], [helper.make_node("Identity", ["a"], ["b"])],
                                            [helper.make_opsetid("", 17)]))
    return m


@pytest.mark.parametrize("make", [_model, _rich_model, lambda: helper.make_model(helper.make_graph(
    [helper.make_node("Identity", ["x"], ["y"])], "no-initializers",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])]))])
def test_serialized_parts_parse_back_to_the_same_model(make, tmp_path: Path) -> None:
    """save_onnx writes the initializers as separate pieces (fields out of protobuf's usual order): the
    file parses to the model, byte for byte once re-serialized, and onnxruntime reads it."""
    m = make()
    assert save_onnx(m, tmp_path / "m.onnx") == []
    assert load_onnx(tmp_path / "m.onnx").SerializeToString() == m.SerializeToString()
    if make is _model:
        import onnxruntime as ort

        x = np.ones((1, 64), np.float32)
        y = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        np.testing.assert_allclose(y, x @ np.arange(64 * 64, dtype=np.float32).reshape(64, 64), rtol=1e-6)


@pytest.mark.parametrize("in_constant", [False, True])
def test_weights_over_the_threshold_go_to_external_data(in_constant: bool, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(onnx_model, "EXTERNAL_DATA_THRESHOLD", 10_000)
    files = save_onnx(_model(in_constant), tmp_path / "m.onnx")
    assert files == ["m.onnx.data"] and (tmp_path / "m.onnx.data").stat().st_size >= 64 * 64 * 4
    assert (tmp_path / "m.onnx").stat().st_size < 10_000
    import onnxruntime as ort  # the external weights are found and read, Constant ones included

    x = np.ones((1, 64), np.float32)
    y = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(y, x @ np.arange(64 * 64, dtype=np.float32).reshape(64, 64), rtol=1e-6)


def test_bytes_over_the_threshold_go_external_when_the_estimate_misses(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Tensors the estimate cannot size (strings) still count: the serialized bytes are checked."""
    monkeypatch.setattr(onnx_model, "EXTERNAL_DATA_THRESHOLD", 20_000)
    m = _model()
    m.graph.initializer.append(helper.make_tensor("names", TensorProto.STRING, [200], [b"x" * 200] * 200))
    assert inline_tensor_bytes(m) < 20_000
    assert save_onnx(m, tmp_path / "m.onnx") == ["m.onnx.data"]
    assert load_onnx(tmp_path / "m.onnx").graph.initializer[0].dims == [64, 64]


def test_graph_view_drops_big_tensor_bytes_keeps_small_ones_and_shapes(tmp_path: Path) -> None:
    from optcli.onnx_model import graph_view

    m = _model()  # w: 16 KB
    big = numpy_helper.from_array(np.zeros((256, 256), np.float32), "big")  # 256 KB
    typed = helper.make_tensor("typed", TensorProto.FLOAT, [128, 256], np.ones(128 * 256).tolist())  # float_data
    m.graph.initializer.extend([big, typed])
    save_onnx(m, tmp_path / "m.onnx")
    view = graph_view(tmp_path / "m.onnx")
    by_name = {t.name: t for t in view.graph.initializer}
    assert list(by_name["big"].dims) == [256, 256] and not by_name["big"].raw_data
    assert list(by_name["typed"].dims) == [128, 256] and not by_name["typed"].float_data
    assert numpy_helper.to_array(by_name["w"]).shape == (64, 64)  # small constants keep their values
    assert [n.name for n in view.graph.node] == ["mm"]


def test_graph_view_is_a_copy_and_follows_the_file(tmp_path: Path) -> None:
    from optcli.onnx_model import graph_view

    path = tmp_path / "m.onnx"
    save_onnx(_model(), path)
    first = graph_view(path)
    first.graph.node[0].name = "changed by a caller"
    assert graph_view(path).graph.node[0].name == "mm"
    other = _model()
    other.graph.node[0].name = "rewritten"
    other.graph.node.append(helper.make_node("Relu", ["y"], ["z"], name="relu"))
    other.graph.output[0].name = "z"
    save_onnx(other, path)  # a new version of the file: a new view
    assert [n.name for n in graph_view(path).graph.node] == ["rewritten", "relu"]


def test_a_file_hash_is_remembered_per_version_of_the_file(tmp_path: Path) -> None:
    import time

    from optcli.artifact import sha256_file

    path = tmp_path / "m.bin"
    path.write_bytes(b"a" * 1000)
    first = sha256_file(path)
    assert sha256_file(path) == first
    time.sleep(0.05)  # past the file system's timestamp tick: a later write is a new version
    path.write_bytes(b"b" * 1000)  # same size, same inode, new bytes
    assert sha256_file(path) != first


def test_name_nodes_links_a_named_graph_and_a_later_save_does_not_reach_it(tmp_path: Path) -> None:
    from optcli.quantize.int8 import name_nodes

    src, dst = tmp_path / "src.onnx", tmp_path / "dst.onnx"
    save_onnx(_model(), src)
    before = src.read_bytes()
    assert name_nodes(src, dst) == ["mm"]
    assert dst.stat().st_ino == src.stat().st_ino  # linked, not re-serialized
    other = _model()
    other.graph.node[0].name = "renamed"
    save_onnx(other, dst)
    assert src.read_bytes() == before and load_onnx(dst).graph.node[0].name == "renamed"


@pytest.mark.parametrize("names", [["", ""], ["same", "same"]])
def test_name_nodes_rewrites_a_graph_with_missing_or_repeated_names(names: list[str], tmp_path: Path) -> None:
    from optcli.quantize.int8 import name_nodes

    m = _model()
    m.graph.node.append(helper.make_node("Relu", ["y"], ["z"]))
    m.graph.output[0].name = "z"
    for node, name in zip(m.graph.node, names):
        node.name = name
    save_onnx(m, tmp_path / "src.onnx")
    got = name_nodes(tmp_path / "src.onnx", tmp_path / "dst.onnx")
    assert len(set(got)) == 2 and all(got)
    assert [n.name for n in load_onnx(tmp_path / "dst.onnx").graph.node] == got
    assert (tmp_path / "dst.onnx").stat().st_ino != (tmp_path / "src.onnx").stat().st_ino


def test_a_cached_graph_view_does_not_hold_the_weights_in_memory(tmp_path: Path) -> None:
    """upb keeps a parsed message's arena, weights included, alive after ClearField: a view kept from the
    parse itself held a BERT-base's 440 MB per cached graph."""
    import gc

    from optcli.onnx_model import graph_view

    def rss_mb() -> float:
        return int(next(line for line in open("/proc/self/status") if line.startswith("VmRSS")).split()[1]) / 1024

    m = _model()
    m.graph.initializer.append(numpy_helper.from_array(np.ones((200, 1000, 1000), np.uint8), "big"))  # 200 MB
    save_onnx(m, tmp_path / "big.onnx")
    del m
    gc.collect()
    before = rss_mb()
    view = graph_view(tmp_path / "big.onnx")
    gc.collect()
    assert rss_mb() - before < 60, "the view keeps the weights' bytes"
    assert list(next(t for t in view.graph.initializer if t.name == "big").dims) == [200, 1000, 1000]


def test_a_folder_renamed_into_place_keeps_its_files_hashes_and_views(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A stage writes in a temporary folder renamed into place, and the next stage reads the same file
    at its new path: neither its hash nor its graph is read again, and a changed file still is."""
    from optcli.artifact import sha256_file
    from optcli.atomic_write import atomic_dir

    parses: list[Path] = []
    real = onnx_model.load_onnx
    monkeypatch.setattr(onnx_model, "load_onnx", lambda p, **kw: parses.append(p) or real(p, **kw))
    monkeypatch.setattr(onnx_model, "_GRAPH_ONLY_MAX_BYTES", 0)  # as for a big graph: hashing parses nothing
    final = tmp_path / "02-stage"
    with atomic_dir(final) as tmp:
        save_onnx(_model(), tmp / "model.onnx")
        digest = sha256_file(tmp / "model.onnx")
        onnx_model.graph_view(tmp / "model.onnx")
    assert not parses  # save_onnx remembered the view
    reads: list[str] = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda f, *a, **kw: reads.append(str(f)) or real_open(f, *a, **kw))
    assert sha256_file(final / "model.onnx") == digest and not reads
    monkeypatch.setattr("builtins.open", real_open)
    onnx_model.graph_view(final / "model.onnx")
    assert not parses
    (final / "model.onnx").unlink()
    onnx.save(_model(weight_in_constant=True), final / "model.onnx")  # a new version, written by someone else
    assert sha256_file(final / "model.onnx") != digest
    onnx_model.graph_view(final / "model.onnx")
    assert len(parses) == 1


def test_weightless_copy_keeps_structure_and_small_tensors_and_leaves_the_model_alone() -> None:
    m = _rich_model()
    before = m.SerializeToString()
    view = onnx_model.weightless_copy(m, keep_bytes=1024)
    assert m.SerializeToString() == before
    big = {t.name: t for t in view.graph.initializer}["big"]
    assert list(big.dims) == [300, 300] and big.data_type == TensorProto.FLOAT and not big.raw_data
    small = {t.name: t for t in view.graph.initializer}["s"]
    assert list(small.string_data) == [b"a", b"bc"]
    assert [n.name for n in view.graph.node] == [n.name for n in m.graph.node]
    assert view.graph.sparse_initializer[0] == m.graph.sparse_initializer[0] and view.functions == m.functions
    # what the unpad rewrite uses it for: shape inference sees the same shapes as on the whole model
    assert onnx.shape_inference.infer_shapes(view).graph.value_info == \
        onnx.shape_inference.infer_shapes(m).graph.value_info


def test_a_saved_graphs_view_is_the_one_parsing_it_would_give(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """save_onnx remembers the file's graph_view from the model in memory; it must be exactly what a
    parse of the file gives (big tensors, Constant values and subgraph tensors without data)."""
    big_const = numpy_helper.from_array(np.ones((200, 200), np.float32), "bc")
    m = _rich_model()
    m.graph.node.insert(0, helper.make_node("Constant", [], ["bc"], name="big_constant", value=big_const))
    path = tmp_path / "m.onnx"
    save_onnx(m, path)
    seeded = onnx_model.graph_view(path)
    onnx_model._views.clear()
    parsed = onnx_model.graph_view(path)
    assert seeded.SerializeToString() == parsed.SerializeToString()
    big = {t.name: t for t in parsed.graph.initializer}["big"]
    assert not big.raw_data and list(big.dims) == [300, 300]
    assert not parsed.graph.node[0].attribute[0].t.raw_data  # the big Constant's bytes are gone too


def test_a_folders_identity_never_reads_through_a_link_out(tmp_path: Path) -> None:
    """The property test found it (issue 30): a Hugging Face folder's sha256 (report.json model.sha256) read
    every file under it, a link to a file outside the folder too. Its own files count; a link out is
    neither read nor part of its identity."""
    from fs_watch import FolderWatch
    from optcli.artifact import sha256_file

    folder, outside = tmp_path / "model", tmp_path / "elsewhere"
    folder.mkdir()
    outside.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "sub").mkdir()
    (folder / "sub" / "inner.bin").write_bytes(b"inside")
    (folder / "inner-link.json").symlink_to(folder / "config.json")  # a link that stays inside counts
    (outside / "secret.bin").write_bytes(b"outside")
    (folder / "link-out.bin").symlink_to(outside / "secret.bin")
    with FolderWatch(outside) as watch:
        first = sha256_file(folder)
        touched = watch.events()
    assert touched == []
    (outside / "secret.bin").write_bytes(b"changed outside")
    assert sha256_file(folder) == first
    (folder / "sub" / "inner.bin").write_bytes(b"changed inside")
    assert sha256_file(folder) != first
