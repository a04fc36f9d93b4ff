"""Drift in the packages under optcli (issue 28): protobuf 7 removed `FieldDescriptor.label`, which
broke every ONNX export; a broken dependency must fail the run with its name, never a silent fallback.

The class, not the instance: no optcli module may use protobuf API that protobuf 7 removed, and an
AttributeError or ImportError from inside an installed package is reported as the environment's.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from optcli.backends.torch.export_errors import environment_fault

PACKAGE = Path(__file__).resolve().parents[2] / "optcli"
# Removed in protobuf 7 (34.0): FieldDescriptor.label, read to compare with its LABEL_* constants (optcli's
# own `.label`s are backend names, so the constants are what gives a use away); text_format's
# float_format/double_format; onnx.helper.strip_doc_string reads .label.
REMOVED_ATTRIBUTES = {"LABEL_REPEATED": "FieldDescriptor.LABEL_REPEATED",
                      "LABEL_OPTIONAL": "FieldDescriptor.LABEL_OPTIONAL",
                      "LABEL_REQUIRED": "FieldDescriptor.LABEL_REQUIRED",
                      "strip_doc_string": "onnx.helper.strip_doc_string",
                      "float_format": "text_format float_format", "double_format": "text_format double_format"}


def _uses(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in REMOVED_ATTRIBUTES:
            found.append((node.lineno, REMOVED_ATTRIBUTES[node.attr]))
    return found


def test_no_module_reads_protobuf_api_that_protobuf_7_removed() -> None:
    # onnx_model._is_repeated's fallback for protobuf < 5.28, behind `is_repeated` (next test)
    allowed = {("onnx_model.py", "FieldDescriptor.LABEL_REPEATED")}
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, what in _uses(ast.parse(path.read_text(), str(path))):
            if (path.name, what) not in allowed:
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {what}")
    assert not offenders, offenders


def test_the_label_fallback_runs_only_where_is_repeated_is_missing() -> None:
    """onnx_model's one use of `.label` is behind `is_repeated` (present in every protobuf the lock and
    protobuf 7 ship): the installed protobuf takes the new path."""
    import onnx

    from optcli.onnx_model import _is_repeated

    fields = onnx.ModelProto.DESCRIPTOR.fields_by_name
    assert hasattr(fields["opset_import"], "is_repeated")
    assert _is_repeated(fields["opset_import"]) and not _is_repeated(fields["ir_version"])


def test_copying_a_model_reads_no_label(monkeypatch: pytest.MonkeyPatch) -> None:
    """weightless_copy / serialized_parts walk every field: under protobuf 7 a `.label` read raises.
    The descriptor class refuses `label` here as protobuf 7 does (its C type cannot be patched, so
    the walk is given descriptors that raise on it)."""
    import onnx
    from onnx import TensorProto, helper

    from optcli import onnx_model

    class Protobuf7Field:
        def __init__(self, fd: object) -> None:
            self._fd = fd

        def __getattr__(self, name: str) -> object:
            if name in ("label", "LABEL_REPEATED"):
                raise AttributeError(f"'FieldDescriptor' object has no attribute '{name}'")
            return getattr(self._fd, name)

    class Message:
        def __init__(self, msg: object) -> None:
            self._msg = msg

        def ListFields(self) -> list:  # noqa: N802 (protobuf's name)
            return [(Protobuf7Field(fd), v) for fd, v in self._msg.ListFields()]

    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    head = onnx.ModelProto()
    onnx_model._copy_fields(Message(model), head, "graph")
    assert [o.version for o in head.opset_import] == [17] and not head.HasField("graph")


def _raised(fn: object) -> BaseException:
    try:
        fn()  # type: ignore[operator]
    except BaseException as exc:  # noqa: BLE001
        return exc
    raise AssertionError("did not raise")


def test_a_removed_protobuf_attribute_names_protobuf_and_its_version() -> None:
    import google.protobuf
    import onnx

    fd = onnx.ModelProto.DESCRIPTOR.fields_by_name["opset_import"]
    fault = environment_fault(_raised(lambda: fd.label_that_was_removed))
    assert fault is not None and fault.startswith(f"protobuf {google.protobuf.__version__}: AttributeError:")


def test_a_missing_module_attribute_or_import_is_the_environment() -> None:
    import numpy as np

    assert environment_fault(_raised(lambda: np.removed_in_numpy_3)).startswith(f"numpy {np.__version__}: ")

    def bad_import() -> None:
        from onnx import name_no_onnx_has  # noqa: F401

    assert environment_fault(_raised(bad_import)).startswith("onnx ")


def test_the_models_own_errors_and_the_exporters_refusals_are_not_the_environment() -> None:
    torch = pytest.importorskip("torch")

    class UserModel:
        pass

    assert environment_fault(_raised(lambda: UserModel().weight)) is None  # the user's code
    # torch's exporters raise AttributeErrors of their own on models they cannot take
    assert environment_fault(_raised(lambda: torch.nn.Linear(2, 2).no_such_submodule)) is None
    assert environment_fault(_raised(lambda: (_ for _ in ()).throw(NotImplementedError("unsupported")))) is None
    # ... but a torch module without an attribute is torch's API moving under optcli
    assert environment_fault(_raised(lambda: torch.onnx.no_such_function)).startswith("torch ")


def test_the_cause_chain_is_searched() -> None:
    import numpy as np

    def wrapped() -> None:
        try:
            np.removed_in_numpy_3  # noqa: B018
        except AttributeError as inner:
            raise RuntimeError("Failed to export the model with torch.export") from inner

    assert environment_fault(_raised(wrapped)).startswith("numpy ")
