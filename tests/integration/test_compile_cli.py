"""`optcli compile` end to end on the CPU: through click's CliRunner, main(argv), and a real subprocess,
on .pt2, TorchScript, file.py:factory and .onnx inputs. report.json is checked against the issue's schema."""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from compile_testkit import cli_env, core_stages, core_statuses, read_report, run_main, run_optcli

STAGES = ["export", "simplify", "fuse"]
STAGE_KEYS = {"name", "status", "reason", "seconds", "artifact", "graph", "latency_ms", "accuracy", "details"}
LATENCY_KEYS = {"p50", "p90", "p99", "mean", "batch", "runtime", "settings"}


def onnx_inputs(path: Path) -> list[tuple[str, list[Any], int]]:
    """(name, dims, elem type) of each graph input; a dim is an int or its symbolic name."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        dims = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in vi.type.tensor_type.shape.dim]
        out.append((vi.name, dims, vi.type.tensor_type.elem_type))
    return out


def run_onnx(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def image_feeds(batch: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(batch).standard_normal((batch, 3, 16, 16)).astype(np.float32)}


def check_latency(lat: dict[str, Any], runtime: str, optimization: str | None) -> None:
    assert LATENCY_KEYS <= set(lat), lat
    assert lat["batch"] == 1
    assert lat["runtime"] == runtime
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"]
    assert lat["mean"] > 0 and lat["runs"] >= 3
    if optimization is not None:  # the report says which ORT setting was used
        assert lat["settings"]["graph_optimization"] == optimization


def check_report_schema(report: dict[str, Any], model: Path, fmt: str) -> None:
    """The fields the issue's report.json example names, with their types."""
    assert report["schema_version"] == 2
    assert report["target_reason"] == "asked for cpu"
    assert isinstance(report["optcli_version"], str) and report["optcli_version"]
    assert report["model"]["format"] == fmt
    assert report["model"]["sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()
    assert Path(report["model"]["path"]).resolve() == model.resolve()
    assert report["target"] == "cpu"
    env = report["environment"]
    for key in ("python", "torch", "onnxruntime", "cpu", "gpu"):
        assert key in env
    assert env["python"] == ".".join(map(str, sys.version_info[:3]))
    assert env["gpu"] is None or isinstance(env["gpu"], str)
    assert report["status"] == "ok" and report["error"] is None
    names = [s["name"] for s in report["stages"]]
    assert names[:4] == ["export", "simplify", "fuse", "unpad"]
    assert report["stages"][3]["status"] == "skipped"  # unpad: a CNN, or an encoder of 8 tokens (one bucket)
    # Stages of later issues: nothing to do for a CPU fp32 run, except build-cpu where OpenVINO is
    # installed (then it measures onnxruntime against OpenVINO FP32 and keeps one of them).
    built = [s for s in report["stages"][4:] if s["status"] != "skipped"]
    assert [s["name"] for s in built] in ([], ["build"]), built
    for s in report["stages"][4:]:
        assert s["status"] == "ok" if s in built else s["reason"], s
    for s in report["stages"]:
        assert STAGE_KEYS <= set(s), s.keys()
        assert s["status"] in ("ok", "skipped", "cached", "failed", "interrupted", "not-run")
        assert set(s["graph"]) >= {"nodes_before", "nodes_after", "ops_after"}
        assert set(s["latency_ms"]) == {"before", "after"}
        if s["status"] == "ok":
            assert s["reason"] is None
            assert isinstance(s["seconds"], float) and s["seconds"] >= 0
            assert isinstance(s["graph"]["nodes_after"], int) and s["graph"]["nodes_after"] > 0
            assert sum(s["graph"]["ops_after"].values()) == s["graph"]["nodes_after"]
            acc = s["accuracy"]
            assert acc["reference"] in ("torch-fp32", "onnx-fp32", "fp32-onnx")
            assert acc["max_abs_err"] < 1e-4
            assert acc["cosine_min"] > 0.9999
    final = report["final"]
    assert final["precision"] == "fp32"
    if built:  # the measured choice: onnxruntime's ONNX or an OpenVINO FP32 IR
        chosen = built[0]["details"]["chosen"]
        assert chosen in ("onnxruntime-fp32", "openvino-fp32")
        assert final["backend"] == chosen.split("-")[0]
        name = "model.onnx" if final["backend"] == "onnxruntime" else "model.xml"
        assert final["artifact"] == f"05-build/{name}"
    else:
        assert final["artifact"] == "03-fuse/model.onnx" and final["backend"] == "onnxruntime"


# -- one measured run of the CNN .pt2 through click's CliRunner, shared by the schema tests ----------

@pytest.fixture(scope="module")
def cnn_run(cnn_pt2: Path, fast_bench_toml: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from optcli.cli.main import cli

    out = tmp_path_factory.mktemp("cnn_run") / "out"
    result = CliRunner().invoke(cli, ["compile", str(cnn_pt2), "--out", str(out), "--config", str(fast_bench_toml),
                                      "--target", "cpu"])
    assert result.exit_code == 0, (result.output, result.exception)
    return {"out": out, "stdout": result.stdout, "stderr": result.stderr, "report": read_report(out)}


def test_pt2_report_schema(cnn_run: dict[str, Any], cnn_pt2: Path) -> None:
    report = cnn_run["report"]
    check_report_schema(report, cnn_pt2, "pt2")
    export, simplify, fuse = core_stages(report)
    assert core_statuses(report) == ["ok", "ok", "ok"]
    assert export["artifact"] == "01-export/model.onnx"
    assert simplify["artifact"] == "02-simplify/model.onnx"
    assert fuse["artifact"] == "03-fuse/model.onnx"
    assert export["graph"]["nodes_before"] is None  # PyTorch has no ONNX graph to count
    assert simplify["graph"]["nodes_before"] == export["graph"]["nodes_after"]
    assert fuse["graph"]["nodes_before"] == simplify["graph"]["nodes_after"]
    assert "BatchNormalization" not in fuse["graph"]["ops_after"]  # folded into the conv
    assert all(s["accuracy"]["reference"] == "torch-fp32" for s in core_stages(report))
    # export checked ONNX against PyTorch at batch 1 and 2 on its own
    assert set(export["details"]["verify"]) == {"batch1", "batch2"}
    assert export["details"]["dynamic_batch"] is True
    assert export["details"]["opset"] >= 17


def test_pt2_latency_fields(cnn_run: dict[str, Any]) -> None:
    export, simplify, fuse = core_stages(cnn_run["report"])
    # export: before is PyTorch eager, after is the ONNX in ORT with graph optimizations disabled
    check_latency(export["latency_ms"]["before"], "torch-cpu", None)
    assert export["latency_ms"]["before"]["settings"]["mode"] == "eager"
    check_latency(export["latency_ms"]["after"], "onnxruntime-cpu", "disabled")
    for s in (simplify, fuse):  # ONNX stages: both sides with optimizations off, so the stage's effect shows
        check_latency(s["latency_ms"]["before"], "onnxruntime-cpu", "disabled")
        check_latency(s["latency_ms"]["after"], "onnxruntime-cpu", "disabled")
    # a stage's "before" is the previous stage's "after" (the same artifact, measured once)
    assert simplify["latency_ms"]["before"] == export["latency_ms"]["after"]
    assert fuse["latency_ms"]["before"] == simplify["latency_ms"]["after"]
    final = cnn_run["report"]["final"]
    check_latency(final["latency_ms"], "onnxruntime-cpu", "all")  # as deployed
    check_latency(final["reference_latency_ms"], "torch-cpu", None)


def test_pt2_artifacts_and_markdown(cnn_run: dict[str, Any]) -> None:
    out = cnn_run["out"]
    for rel in ("01-export/model.onnx", "02-simplify/model.onnx", "03-fuse/model.onnx", "report.json", "report.md"):
        assert (out / rel).is_file(), rel
    assert not list(out.rglob("*.partial"))
    md = (out / "report.md").read_text()
    for stage in STAGES:
        assert f"| {stage} | ok |" in md
    assert "disabled" in md  # says which ORT setting the latencies used
    assert "## Final artifact" in md
    # the terminal got a progress line per stage (stderr) and the table (stdout)
    for stage in STAGES:
        assert stage in cnn_run["stdout"]
    assert "report.json" in cnn_run["stdout"]


def test_fuse_says_which_fusions(cnn_run: dict[str, Any]) -> None:
    fuse = cnn_run["report"]["stages"][2]
    assert fuse["details"]["level"] == "extended"
    added = fuse["details"]["fusions"]["added"]
    assert added.get("com.microsoft.FusedConv", 0) >= 1  # Conv + Relu
    assert fuse["details"]["fusions"]["removed"]["Relu"] >= 1
    assert "FusedConv" in (cnn_run["out"] / "report.md").read_text()


@pytest.mark.parametrize("stage_dir", ["01-export", "02-simplify", "03-fuse"])
def test_artifacts_have_a_symbolic_batch_and_run_at_1_and_8(cnn_run: dict[str, Any], stage_dir: str,
                                                            tiny_models: Any) -> None:
    path = cnn_run["out"] / stage_dir / "model.onnx"
    [(name, dims, _)] = onnx_inputs(path)
    assert name == "x"
    assert isinstance(dims[0], str) and dims[0], f"dim 0 is {dims[0]!r}, not symbolic"
    assert dims[1:] == [3, 16, 16]
    torch = pytest.importorskip("torch")
    model = tiny_models.make_cnn()
    for batch in (1, 8):
        feeds = image_feeds(batch)
        [got] = run_onnx(path, feeds)
        with torch.inference_mode():
            ref = model(torch.from_numpy(feeds["x"])).numpy()
        assert got.shape == (batch, 4)
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


# -- caching ---------------------------------------------------------------------------------------

def test_rerun_is_cached_force_rebuilds_and_config_change_reruns(cnn_pt2: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    base = ["compile", str(cnn_pt2), "--out", str(out), "--no-bench", "--target", "cpu"]
    code, _, err = run_main(*base)
    assert code == 0, err
    first = read_report(out)
    inode = {d: (out / d).stat().st_ino for d in ("01-export", "02-simplify", "03-fuse")}

    code, _, err = run_main(*base)
    assert code == 0, err
    second = read_report(out)
    assert core_statuses(second) == ["cached"] * 3
    for a, b in zip(core_stages(first), core_stages(second)):
        assert b["artifact"] == a["artifact"] and b["seconds"] == a["seconds"] and b["graph"] == a["graph"]
        assert b["reason"] is None
    assert second["final"]["sha256"] == first["final"]["sha256"]
    assert {d: (out / d).stat().st_ino for d in inode} == inode  # nothing was rewritten
    assert "cached" in err

    code, _, err = run_main(*base, "--force")
    assert code == 0, err
    forced = read_report(out)
    assert core_statuses(forced) == ["ok"] * 3
    assert all((out / d).stat().st_ino != inode[d] for d in inode)  # each stage folder was rebuilt

    # a changed fuse option reruns fuse only: export and simplify inputs and configs are unchanged
    code, _, err = run_main(*base, "--fuse-level", "basic")
    assert code == 0, err
    changed = read_report(out)
    assert core_statuses(changed) == ["cached", "cached", "ok"]
    assert changed["stages"][2]["details"]["level"] == "basic"
    assert not any(op.startswith("com.microsoft") for op in changed["stages"][2]["graph"]["ops_after"])


def test_a_tampered_artifact_is_rebuilt(cnn_pt2: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    base = ["compile", str(cnn_pt2), "--out", str(out), "--no-bench", "--no-fuse", "--target", "cpu"]
    assert run_main(*base)[0] == 0
    (out / "02-simplify" / "model.onnx").write_bytes(b"garbage")
    code, _, err = run_main(*base)
    assert code == 0, err
    report = read_report(out)
    assert core_statuses(report) == ["cached", "ok"]
    assert onnx_inputs(out / "02-simplify" / "model.onnx")[0][0] == "x"


# -- --json, subprocesses, other input formats ---------------------------------------------------------

def test_json_subprocess_prints_only_json(cnn_pt2: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_optcli("compile", str(cnn_pt2), "--out", str(out), "--json", "--no-bench", "--target", "cpu")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)  # the whole of stdout is one JSON document
    assert report == read_report(out)
    check_report_schema(report, cnn_pt2, "pt2")
    assert all(s["latency_ms"] == {"before": None, "after": None} for s in report["stages"])
    assert "Traceback" not in proc.stderr


def test_torchscript_with_input_console_script(cnn_torchscript: Path, tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "optcli"
    if not script.exists():
        pytest.skip(f"no console script beside {sys.executable} (optcli not pip-installed in this environment)")
    out = tmp_path / "out"
    import subprocess

    proc = subprocess.run([str(script), "compile", str(cnn_torchscript), "--input", "x:1x3x16x16", "--out", str(out),
                           "--no-bench", "--target", "cpu"], capture_output=True, text=True, env=cli_env(),
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = read_report(out)
    check_report_schema(report, cnn_torchscript, "torchscript")
    assert report["stages"][0]["details"]["exporter"] == "torchscript"  # dynamo refuses ScriptModules
    # --input x:1x3x16x16 named the example batch; dim 0 still comes out dynamic
    for d in ("01-export", "02-simplify", "03-fuse"):
        dims = onnx_inputs(out / d / "model.onnx")[0][1]
        assert isinstance(dims[0], str), (d, dims)
    [y] = run_onnx(out / "03-fuse" / "model.onnx", image_feeds(8))
    assert y.shape == (8, 4)
    assert "export" in proc.stdout and "Traceback" not in proc.stderr


def test_torchscript_encoder_int64_inputs(encoder_torchscript: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, _, err = run_main("compile", str(encoder_torchscript), "--input", "input_ids:1x8:int64",
                            "--input", "attention_mask:1x8:int64", "--out", str(out), "--no-bench", "--target", "cpu")
    assert code == 0, err
    report = read_report(out)
    check_report_schema(report, encoder_torchscript, "torchscript")
    inputs = onnx_inputs(out / "03-fuse" / "model.onnx")
    assert [(n, d[1], t) for n, d, t in inputs] == [("input_ids", 8, 7), ("attention_mask", 8, 7)]  # 7 = INT64


def test_encoder_pt2_transformer_fusions(encoder_pt2: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, _, err = run_main("compile", str(encoder_pt2), "--out", str(out), "--no-bench", "--target", "cpu")
    assert code == 0, err
    report = read_report(out)
    check_report_schema(report, encoder_pt2, "pt2")
    assert [i["name"] for i in report["model"]["inputs"]] == ["input_ids", "attention_mask"]
    assert all(i["dtype"] == "int64" for i in report["model"]["inputs"])
    fuse = report["stages"][2]
    # the transformer optimizer ran (the graph is an encoder) and says what it fused
    tf = fuse["details"]["transformer_fusions"]
    assert tf and tf.get("SkipLayerNormalization", 0) >= 1, tf
    assert fuse["details"]["fusions"]["added"]
    ids = np.random.default_rng(0).integers(0, 50, (8, 8)).astype(np.int64)
    [h] = run_onnx(out / "03-fuse" / "model.onnx", {"input_ids": ids, "attention_mask": np.ones_like(ids)})
    assert h.shape == (8, 8, 16)


def test_python_factory_with_example_inputs(factory_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    spec = f"{factory_file}:make_cnn_with_example"
    code, stdout, err = run_main("compile", spec, "--out", str(out), "--no-bench", "--target", "cpu")
    assert code == 0, err
    report = read_report(out)
    check_report_schema(report, factory_file, "python")
    assert report["model"]["spec"] == spec
    assert report["model"]["inputs"] == [{"name": "x", "shape": ["batch", 3, 16, 16], "dtype": "float32"}]


def test_python_factory_with_input_subprocess(factory_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_optcli("compile", f"{factory_file}:make_encoder", "--input", "input_ids:1x8:int64",
                      "--input", "attention_mask:1x8:int64", "--out", str(out), "--no-bench", "--no-fuse",
                      "--target", "cpu")
    assert proc.returncode == 0, proc.stderr
    report = read_report(out)
    assert [s["name"] for s in core_stages(report)] == ["export", "simplify"]  # --no-fuse drops the stage
    # The final artifact comes from simplify, or from build-cpu (numbered 04: after the skipped unpad) where OpenVINO
    # competes.
    assert report["final"]["artifact"] in ("02-simplify/model.onnx", "04-build/model.onnx",
                                           "04-build/model.xml")


def test_default_out_folder(matmul_onnx: Path, tmp_path: Path) -> None:
    shutil.copy(matmul_onnx, tmp_path / "mlp.onnx")
    proc = run_optcli("compile", "mlp.onnx", "--no-bench", "--target", "cpu", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "optcli-out" / "mlp" / "report.json").is_file()


def test_onnx_input_skips_export(conv_onnx: Path, fast_bench_toml: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, _, err = run_main("compile", str(conv_onnx), "--out", str(out), "--config", str(fast_bench_toml),
                            "--target", "cpu")
    assert code == 0, err
    report = read_report(out)
    check_report_schema(report, conv_onnx, "onnx")
    export, simplify, fuse = core_stages(report)
    assert export["status"] == "skipped" and export["reason"] == "input is already ONNX"
    assert export["artifact"] is None and export["seconds"] is None
    assert not (out / "01-export").exists()
    assert simplify["status"] == fuse["status"] == "ok"
    assert simplify["accuracy"]["reference"] == "onnx-fp32"
    check_latency(simplify["latency_ms"]["before"], "onnxruntime-cpu", "disabled")
    # the ONNX baseline is the user's model with ORT's own optimizations on
    check_latency(report["final"]["reference_latency_ms"], "onnxruntime-cpu", "all")


def test_static_batch(cnn_pt2: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, _, err = run_main("compile", str(cnn_pt2), "--static-batch", "--out", str(out), "--no-bench",
                            "--target", "cpu")
    assert code == 0, err
    report = read_report(out)
    assert report["stages"][0]["details"]["dynamic_batch"] is False
    for d in ("01-export", "02-simplify", "03-fuse"):
        [(_, dims, _)] = onnx_inputs(out / d / "model.onnx")
        assert dims == [1, 3, 16, 16], (d, dims)
    [y] = run_onnx(out / "03-fuse" / "model.onnx", image_feeds(1))
    assert y.shape == (1, 4)
    with pytest.raises(Exception):  # noqa: B017 (onnxruntime raises its own error types)
        run_onnx(out / "03-fuse" / "model.onnx", image_feeds(2))


def test_static_batch_takes_the_pinned_size(cnn_torchscript: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, _, err = run_main("compile", str(cnn_torchscript), "--input", "x:4x3x16x16", "--static-batch",
                            "--out", str(out), "--no-bench", "--no-simplify", "--no-fuse", "--target", "cpu")
    assert code == 0, err
    assert onnx_inputs(out / "01-export" / "model.onnx")[0][1] == [4, 3, 16, 16]
    assert read_report(out)["stages"][0]["accuracy"]["batch"] == 4


def test_onnx_with_a_fixed_batch(onnx_dir: Path, tmp_path: Path) -> None:
    from compile_testkit import make_matmul_add_relu

    model = make_matmul_add_relu(tmp_path / "fixed.onnx", batch=1)
    out = tmp_path / "out"
    code, _, err = run_main("compile", str(model), "--out", str(out), "--no-bench", "--target", "cpu")
    assert code == 0, err
    report = read_report(out)
    assert core_statuses(report) == ["skipped", "ok", "ok"]
    assert report["stages"][1]["accuracy"]["batch"] == 1  # the only batch the model takes


def test_help_lists_every_flag() -> None:
    code, out, _ = run_main("compile", "--help")
    assert code == 0
    for flag in ("--input", "--out", "--target", "--config", "--force", "--json", "--opset", "--static-batch",
                 "--allow-pickle", "--exporter", "--no-simplify", "--no-fuse", "--fuse-level",
                 "--transformer-fusion", "--no-bench", "--bench-runs", "--threads"):
        assert flag in out, flag


def test_version_subprocess() -> None:
    from optcli import __version__

    proc = run_optcli("--version")
    assert proc.returncode == 0
    assert __version__ in proc.stdout


def test_flags_override_the_config_file_and_defaults_do_not(matmul_onnx: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "optcli.toml"
    cfg.write_text('[fuse]\nlevel = "basic"\n\n[export]\nopset = 17\n')
    out = tmp_path / "out"
    # no --fuse-level and no --opset typed: the file's values stand, not the flags' defaults
    assert run_main("compile", str(matmul_onnx), "--config", str(cfg), "--out", str(out), "--no-bench",
                    "--target", "cpu")[0] == 0
    report = read_report(out)
    assert report["config"]["fuse"]["level"] == "basic" and report["config"]["export"]["opset"] == 17
    assert report["stages"][2]["details"]["level"] == "basic"
    # a typed flag wins over the file
    assert run_main("compile", str(matmul_onnx), "--config", str(cfg), "--out", str(out), "--no-bench",
                    "--target", "cpu", "--fuse-level", "extended")[0] == 0
    assert read_report(out)["stages"][2]["details"]["level"] == "extended"


def test_optcli_toml_is_found_in_the_working_folder(matmul_onnx: Path, tmp_path: Path) -> None:
    (tmp_path / "optcli.toml").write_text('[compile]\nout = "from-config"\n\n[fuse]\nenabled = false\n')
    proc = run_optcli("compile", str(matmul_onnx), "--no-bench", "--target", "cpu", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = read_report(tmp_path / "from-config")
    assert [s["name"] for s in core_stages(report)] == ["export", "simplify"]


def test_threads_and_bench_runs_flags(matmul_onnx: Path, fast_bench_toml: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, _, err = run_main("compile", str(matmul_onnx), "--out", str(out), "--config", str(fast_bench_toml),
                            "--threads", "1", "--bench-runs", "12", "--no-simplify", "--target", "cpu")
    assert code == 0, err
    report = read_report(out)
    row = next(s for s in report["stages"] if s["name"] == "fuse")["latency_ms"]["after"]
    assert row["settings"]["intra_op_threads"] == 1
    # The final artifact and its baseline are full measurements: the flag beats the config file's runs = 5.
    # (A stage row may stop earlier, once its median is known to +-5%.)
    for lat in (report["final"]["latency_ms"], report["final"]["reference_latency_ms"]):
        assert lat["runs"] >= 12 and lat["settings"]["intra_op_threads"] == 1
    assert report["config"]["bench"]["runs"] == 12 and report["config"]["bench"]["threads"] == 1


def test_cached_rerun_keeps_the_measurements(cnn_run: dict[str, Any], cnn_pt2: Path, fast_bench_toml: Path) -> None:
    out = cnn_run["out"]
    code, _, err = run_main("compile", str(cnn_pt2), "--out", str(out), "--config", str(fast_bench_toml),
                            "--target", "cpu")
    assert code == 0, err
    again = read_report(out)
    first = cnn_run["report"]
    assert core_statuses(again) == ["cached"] * 3
    for a, b in zip(core_stages(first), core_stages(again)):
        assert b["latency_ms"] == a["latency_ms"] and b["accuracy"] == a["accuracy"]
    check_latency(again["final"]["latency_ms"], "onnxruntime-cpu", "all")
    assert again["final"]["sha256"] == first["final"]["sha256"]
