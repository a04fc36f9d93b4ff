"""The exporter's error as one line, with the op and the model line it names (texts as torch 2.13 words them)."""
from __future__ import annotations

from optcli.backends.torch.export_errors import last_line, source_of

# The innermost message of T5's dynamo failure with a symbolic batch (abridged: two frames, not five).
VIEW_ERROR = '''Cannot view a tensor with shape torch.Size([s11, 16, 2, 16]) and strides (512, 16, 256, 1) as a tensor \
with shape (s11, 16, 32)!

While executing %view_4 : [num_users=1] = call_function[target=torch.ops.aten.view.default](\
args = (%transpose_3, [%sym_size_int_11, 16, -1]), kwargs = {})
Original traceback:
File "/venv/lib/python3.11/site-packages/transformers/models/t5/modeling_t5.py", line 854, in forward
    encoder_outputs = self.encoder(
  File "/venv/lib/python3.11/site-packages/transformers/models/t5/modeling_t5.py", line 366, in forward
    attn_output = attn_output.reshape(*input_shape, -1).contiguous()
Use tlparse to see full graph. (https://github.com/pytorch/tlparse?tab=readme-ov-file#tlparse-parse-structured-pt2-logs)'''


class ConversionError(Exception):
    pass


def _wrapped() -> ConversionError:
    try:
        try:
            raise ValueError(VIEW_ERROR)
        except ValueError as inner:
            raise ConversionError("\x1b[96mFailed to decompose the FX graph\x1b[0m\n## Exception summary") from inner
    except ConversionError as outer:
        return outer


def test_innermost_line_and_its_source() -> None:
    exc = _wrapped()
    assert last_line(exc).startswith("ValueError: Cannot view a tensor with shape torch.Size([s11, 16, 2, 16])")
    assert source_of(exc) == (" (at aten.view.default, modeling_t5.py:366: "
                              "attn_output = attn_output.reshape(*input_shape, -1).contiguous())")


def test_no_source_where_the_error_names_none() -> None:
    assert source_of(RuntimeError("DispatchError: No ONNX function found for aten.linalg_eig")) == ""
    assert last_line(RuntimeError("")) == "RuntimeError"
