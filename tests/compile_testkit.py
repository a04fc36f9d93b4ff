"""Helpers for optcli's tests: tiny model sources, ONNX graph builders, running the CLI in-process and in a
subprocess, and a module blocker that hides packages. Plain functions; the fixtures are in conftest.py.

Imported by name (`from compile_testkit import ...`): tests/ is on sys.path through its conftest.py, and
the name is unique where `conftest` is not (a subfolder has its own conftest.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


# Source of the tiny models: used by the fixtures below AND written into file.py:factory files,
# so the factory path builds exactly the same architectures.
MODELS_SOURCE = textwrap.dedent('''
    import math

    import torch
    from torch import nn


    class TinyCNN(nn.Module):
        """conv + BatchNorm + ReLU, pooled, then a linear classifier: (N, 3, 16, 16) -> (N, 4)."""

        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.bn = nn.BatchNorm2d(8)
            self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
            self.fc = nn.Linear(8, 4)

        def forward(self, x):
            x = torch.relu(self.bn(self.conv(x)))
            x = torch.relu(self.conv2(x) + x)
            x = x.mean(dim=(2, 3))
            return self.fc(x)


    class TinyEncoder(nn.Module):
        """Embedding + one single-head attention block + LayerNorm + GELU MLP: ids/mask (N, T) -> (N, T, H)."""

        def __init__(self, vocab=50, hidden=16, seq=8):
            super().__init__()
            self.emb = nn.Embedding(vocab, hidden)
            self.pos = nn.Parameter(torch.randn(1, seq, hidden) * 0.02)
            self.q = nn.Linear(hidden, hidden)
            self.k = nn.Linear(hidden, hidden)
            self.v = nn.Linear(hidden, hidden)
            self.o = nn.Linear(hidden, hidden)
            self.ln1 = nn.LayerNorm(hidden)
            self.ff1 = nn.Linear(hidden, hidden * 2)
            self.ff2 = nn.Linear(hidden * 2, hidden)
            self.ln2 = nn.LayerNorm(hidden)
            self.scale = 1.0 / math.sqrt(hidden)

        def forward(self, input_ids, attention_mask):
            h = self.emb(input_ids) + self.pos
            bias = (1.0 - attention_mask[:, None, :].to(h.dtype)) * -10000.0
            scores = torch.matmul(self.q(h), self.k(h).transpose(1, 2)) * self.scale + bias
            ctx = torch.matmul(torch.softmax(scores, dim=-1), self.v(h))
            h = self.ln1(h + self.o(ctx))
            h = self.ln2(h + self.ff2(torch.nn.functional.gelu(self.ff1(h))))
            return h


    def make_cnn():
        torch.manual_seed(0)
        model = TinyCNN().eval()
        with torch.no_grad():  # non-trivial BN statistics, so folding BN is really tested
            model.bn.running_mean.uniform_(-0.5, 0.5)
            model.bn.running_var.uniform_(0.5, 2.0)
        return model


    def make_cnn_with_example():
        return make_cnn(), (torch.randn(2, 3, 16, 16),)


    def make_encoder():
        torch.manual_seed(0)
        return TinyEncoder().eval()


    def make_encoder_with_example():
        ids = torch.randint(0, 50, (2, 8), dtype=torch.int64)
        mask = torch.ones(2, 8, dtype=torch.int64)
        return make_encoder(), {"input_ids": ids, "attention_mask": mask}


    def not_a_model():
        return 42
''')


def export_pt2(torch: Any, model: Any, args: tuple, kwargs: dict | None, names: list[str], path: Path) -> Path:
    batch = torch.export.Dim("batch", min=1, max=1024)
    dyn = {n: {0: batch} for n in names}
    ep = torch.export.export(model, args, kwargs=kwargs, dynamic_shapes=dyn)
    torch.export.save(ep, str(path))
    return path


def make_matmul(path: Path, width: int = 64, scale: float = 1.0) -> Path:
    """Y = X @ W, X and Y (1, width), W filled with `scale`: every output is width * scale for X of ones."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.full((width, width), scale, np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def make_ids_times_mask(path: Path) -> Path:
    """input_ids, attention_mask [batch, sequence] -> h = ids x mask: an encoder's signature (a dynamic
    sequence axis and a mask), so requests of different lengths can share a gathered batch."""
    import onnx
    from onnx import TensorProto, helper

    seq = ["batch", "sequence"]
    graph = helper.make_graph([helper.make_node("Mul", ["input_ids", "attention_mask"], ["h"])], "ids_times_mask",
                              [helper.make_tensor_value_info("input_ids", TensorProto.INT64, seq),
                               helper.make_tensor_value_info("attention_mask", TensorProto.INT64, seq)],
                              [helper.make_tensor_value_info("h", TensorProto.INT64, seq)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # onnxruntime refuses the IR version onnx writes by default
    onnx.save(model, str(path))
    return path


def make_conv_calib(folder: Path, rows: int = 16) -> Path:
    """Calibration samples for make_conv_bn_relu_add's inputs X (rows, 3, 8, 8) and Z (rows, 4, 8, 8)."""
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    np.savez(folder / "a.npz", X=rng.standard_normal((rows, 3, 8, 8)).astype(np.float32),
             Z=rng.standard_normal((rows, 4, 8, 8)).astype(np.float32))
    return folder


def make_mlp(path: Path) -> Path:
    """Y = (Relu(X @ W1 + B1)) @ W2 + B2: X (N, 32) -> Y (N, 16), random weights (two weights for NNCF)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
             for name, shape in [("w1", (32, 64)), ("b1", (64,)), ("w2", (64, 16)), ("b2", (16,))]]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["o"]),
             helper.make_node("Add", ["o", "b2"], ["y"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def make_matmul_add_relu(path: Path, batch: str | int = "N", opset: int = 17) -> Path:
    """Y = Relu(X @ W + B): X (batch, 4) float32 -> Y (batch, 3)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "B")
    nodes = [helper.make_node("MatMul", ["X", "W"], ["XW"]),
             helper.make_node("Add", ["XW", "B"], ["XWB"]),
             helper.make_node("Relu", ["XWB"], ["Y"])]
    graph = helper.make_graph(nodes, "matmul_add_relu",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, [batch, 4])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [batch, 3])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def make_conv_bn_relu_add(path: Path, opset: int = 17) -> Path:
    """Relu(BN(Conv(X))) + Z: X (N, 3, 8, 8), a residual input Z (N, 4, 8, 8).

    ORT's BASIC level folds the BatchNormalization into the Conv (plain ONNX ops); EXTENDED also fuses
    Conv + Relu into com.microsoft.FusedConv."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "B"),
             numpy_helper.from_array(rng.uniform(0.5, 2, 4).astype(np.float32), "scale"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "bias"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "mean"),
             numpy_helper.from_array(rng.uniform(0.5, 2, 4).astype(np.float32), "var")]
    nodes = [helper.make_node("Conv", ["X", "W", "B"], ["C"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["C", "scale", "bias", "mean", "var"], ["N"]),
             helper.make_node("Relu", ["N"], ["R"]),
             helper.make_node("Add", ["R", "Z"], ["Y"])]
    graph = helper.make_graph(nodes, "conv_bn_relu_add",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 3, 8, 8]),
                               helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["N", 4, 8, 8])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 4, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def masked_self_attention() -> list[Any]:
    """One single-head self-attention of `x` (batch x S x H) masked by the graph input `attention_mask`,
    into `ctx`. Reads the initializers wq (H x H), one (1.0), big (-1e4) and ax1 ([1])."""
    from onnx import TensorProto, helper

    return [helper.make_node("MatMul", ["x", "wq"], ["q"]),
            helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
            helper.make_node("MatMul", ["q", "xt"], ["scores"]),
            helper.make_node("Cast", ["attention_mask"], ["mf"], to=TensorProto.FLOAT),
            helper.make_node("Unsqueeze", ["mf", "ax1"], ["m3"]),
            helper.make_node("Sub", ["one", "m3"], ["inv"]),
            helper.make_node("Mul", ["inv", "big"], ["bias"]),
            helper.make_node("Add", ["scores", "bias"], ["biased"]),
            helper.make_node("Softmax", ["biased"], ["probs"], axis=-1),
            helper.make_node("MatMul", ["probs", "x"], ["ctx"])]


def make_masked_encoder(path: Path, vocab: int = 50, hidden: int = 8, seq: int = 16) -> Path:
    """An encoder as onnx.helper builds it: embeddings, one self-attention masked by `attention_mask`,
    LayerNormalization (what looks_like_encoder calls an encoder). vocab=70000, hidden=64 gives 17.9 MB
    of weights: a `large` model for the CPU priors."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from optcli.onnx_model import save_onnx

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((vocab, hidden)).astype(np.float32), "emb"),
             numpy_helper.from_array((rng.standard_normal((hidden, hidden)) * 0.3).astype(np.float32), "wq"),
             numpy_helper.from_array(np.ones(hidden, np.float32), "gamma"),
             numpy_helper.from_array(np.zeros(hidden, np.float32), "beta"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(-1e4, np.float32), "big"),
             numpy_helper.from_array(np.array([1], np.int64), "ax1")]
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["x"]), *masked_self_attention(),
             helper.make_node("LayerNormalization", ["ctx", "gamma", "beta"], ["hidden"], axis=-1)]
    graph = helper.make_graph(
        nodes, "masked_encoder",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", seq]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", seq])],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", seq, hidden])], inits)
    save_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def make_eager_attention(path: Path, batch: int = 2, seq: int = 8, hidden: int = 16, heads: int = 2) -> Path:
    """One hand-written multi-head self-attention block at static shapes (Q/K/V MatMul+Add, Reshape,
    Transpose, scaled QK, Softmax, context, output MatMul+Add): onnxsim 0.8's fuse_attention pass turns it
    into one com.microsoft Attention node."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    head = hidden // heads
    inits = [numpy_helper.from_array((rng.standard_normal((hidden, hidden)) * 0.3).astype(np.float32), n)
             for n in ("Wq", "Wk", "Wv", "Wo")]
    inits += [numpy_helper.from_array(np.zeros(hidden, np.float32), n) for n in ("Bq", "Bk", "Bv", "Bo")]
    inits += [numpy_helper.from_array(np.array([batch, seq, heads, head], np.int64), "heads_shape"),
              numpy_helper.from_array(np.array([batch, seq, hidden], np.int64), "out_shape"),
              numpy_helper.from_array(np.array(np.sqrt(head), np.float32), "scale")]
    nodes = []
    for n, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
        nodes += [helper.make_node("MatMul", ["x", f"W{n}"], [f"{n}_mm"]),
                  helper.make_node("Add", [f"{n}_mm", f"B{n}"], [f"{n}_b"]),
                  helper.make_node("Reshape", [f"{n}_b", "heads_shape"], [f"{n}_r"]),
                  helper.make_node("Transpose", [f"{n}_r"], [n], perm=perm)]
    nodes += [helper.make_node("MatMul", ["q", "k"], ["scores"]),
              helper.make_node("Div", ["scores", "scale"], ["scaled"]),
              helper.make_node("Softmax", ["scaled"], ["probs"], axis=-1),
              helper.make_node("MatMul", ["probs", "v"], ["ctx"]),
              helper.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["ctx_t", "out_shape"], ["ctx_r"]),
              helper.make_node("MatMul", ["ctx_r", "Wo"], ["out"]), helper.make_node("Add", ["out", "Bo"], ["y"])]
    graph = helper.make_graph(nodes, "eager_attention",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, hidden])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, hidden])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def make_foldable(path: Path) -> Path:
    """X (batch, 2, 2) -> flatten by a Shape/Gather/Concat/Reshape chain that depends on the dynamic batch,
    then @ (W1 + W2) (constant: folded), an Identity (removed), Relu; plus a dead Neg node (removed)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "W1"),
             numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "W2"),
             numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
             numpy_helper.from_array(np.array([0], dtype=np.int64), "axes0"),
             numpy_helper.from_array(np.array([4], dtype=np.int64), "four")]
    nodes = [helper.make_node("Shape", ["X"], ["xs"]),
             helper.make_node("Gather", ["xs", "zero"], ["b"], axis=0),
             helper.make_node("Unsqueeze", ["b", "axes0"], ["b1"]),
             helper.make_node("Concat", ["b1", "four"], ["flat_shape"], axis=0),
             helper.make_node("Reshape", ["X", "flat_shape"], ["XF"]),
             helper.make_node("Add", ["W1", "W2"], ["W"]),
             helper.make_node("MatMul", ["XF", "W"], ["XW"]),
             helper.make_node("Identity", ["XW"], ["XW2"]),
             helper.make_node("Relu", ["XW2"], ["Y"]),
             helper.make_node("Neg", ["X"], ["unused"])]
    graph = helper.make_graph(nodes, "foldable",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 2, 2])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def ort_default_int8(model: Path, path: Path, shape: tuple[int, ...], samples: int = 8, seed: int = 1) -> Path:
    """onnxruntime's own quantize_static with its defaults (symmetric s8 Q/DQ, biases as INT32
    DequantizeLinear inputs): the graph TensorRT's parser refuses by node."""
    import numpy as np
    from onnxruntime import quantization as q

    rng = np.random.default_rng(seed)
    items = iter([{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(samples)])

    class Reader(q.CalibrationDataReader):
        def get_next(self) -> dict[str, Any] | None:
            return next(items, None)

    q.quantize_static(str(model), str(path), Reader(), quant_format=q.QuantFormat.QDQ, per_channel=True,
                      activation_type=q.QuantType.QInt8, weight_type=q.QuantType.QInt8,
                      extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
    return path


def sharded_copy(source: Path, folder: Path) -> dict[str, Any]:
    """A Hugging Face folder: `source`'s config.json, its weights split in two shards with a safetensors index,
    as save_pretrained(max_shard_size=...) writes them; returns the index."""
    from safetensors.numpy import load_file, save_file

    folder.mkdir()
    (folder / "config.json").write_text((source / "config.json").read_text())
    tensors = load_file(str(source / "model.safetensors"))
    names = sorted(tensors)
    half = len(names) // 2
    weight_map = {}
    for i, part in enumerate((names[:half], names[half:]), 1):
        shard = f"model-0000{i}-of-00002.safetensors"
        save_file({n: tensors[n] for n in part}, str(folder / shard), metadata={"format": "pt"})
        weight_map.update({n: shard for n in part})
    index = {"metadata": {"total_size": sum(t.nbytes for t in tensors.values())}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return index


def load_module(name: str, path: Path) -> Any:
    """A Python file that is not a package module (a benchmark's model factory), imported under `name`."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def cli_env(**extra: str) -> dict[str, str]:
    """Environment for a subprocess: the repo on PYTHONPATH, 2 threads, no colours."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update({"OMP_NUM_THREADS": "2", "NO_COLOR": "1", "TERM": "dumb", "COLUMNS": "200"})
    env.update(extra)
    return env


def run_optcli(*args: str, cwd: Path | None = None, timeout: float = 300, env: dict[str, str] | None = None,
               ) -> subprocess.CompletedProcess:
    """`python -m optcli ARGS` in a real subprocess."""
    return subprocess.run([sys.executable, "-m", "optcli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, env=env or cli_env())


def read_report(out: Path) -> dict[str, Any]:
    return json.loads((out / "report.json").read_text())


# Module blocker for subprocesses: pretend these packages are not installed.
BLOCKER = textwrap.dedent('''
    import importlib.abc, sys
    BLOCKED = {blocked!r}
    class _Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {{name!r}} (blocked by the test)", name=name)
            return None
    sys.meta_path.insert(0, _Blocker())
''')


def blocker_source(*modules: str) -> str:
    return BLOCKER.format(blocked=set(modules))


def run_main(*argv: str) -> tuple[int, str, str]:
    """optcli.cli.main.main(argv) in this process: (exit code, stdout, stderr), through the same
    error handling as the console script."""
    import contextlib
    import io

    from optcli.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    code: Any = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(argv))
        except SystemExit as exc:
            code = exc.code
    return int(code or 0), out.getvalue(), err.getvalue()


# Latency settings that keep a measured run to a fraction of a second (the defaults take >= 0.5 s each).
FAST_BENCH_TOML = """
[bench]
warmup_runs = 1
warmup_seconds = 0.0
runs = 5
min_seconds = 0.0
max_seconds = 0.5
"""


# The stages of issue 3. Later issues add stages (quantize-*, build_tensorrt) that a CPU fp32 run skips
# or leaves out; tests of the first three look only at these.
CORE_STAGES = ("export", "simplify", "fuse")


def core_stages(report: dict[str, Any], names: tuple[str, ...] = CORE_STAGES) -> list[dict[str, Any]]:
    """The report's records of `names`, in pipeline order (absent ones are left out)."""
    return [s for s in report["stages"] if s["name"] in names]


def core_statuses(report: dict[str, Any]) -> list[str]:
    return [s["status"] for s in core_stages(report)]


def one_error_line(code: int, stderr: str, expected: int, *fragments: str) -> str:
    """The CLI's bad-input contract: exit `expected`, no traceback, exactly one `error:` line followed by a
    `hint:` line, the error line holding every fragment. Returns the error line."""
    assert code == expected, stderr
    assert "Traceback" not in stderr, stderr
    assert expected != 2 or "internal error" not in stderr, stderr  # bad input is never optcli's own fault
    lines = stderr.splitlines()
    errors = [i for i, ln in enumerate(lines) if ln.startswith("error: ")]
    assert len(errors) == 1 and lines[errors[0] + 1].startswith("hint: "), stderr
    for fragment in fragments:
        assert fragment in lines[errors[0]], (fragment, lines[errors[0]])
    return lines[errors[0]]


def call_together(fn: Any, items: list) -> list:
    """Call fn(item) from one thread per item, all released at once; results in item order."""
    gate = threading.Barrier(len(items))
    out: list = [None] * len(items)

    def worker(i: int) -> None:
        gate.wait()
        out[i] = fn(items[i])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(items))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return out
