"""The first GPU run (issue 29, part 5) on this CPU machine: tests/gpu/test_tensorrt_first_run.py
against the doubles (gpu_doubles.py), so the first GPU run cannot fail on a mistake that needs no
GPU (its BERT CUDA-graph test runs through the double's graph model, where a replay on a context
whose shapes changed since gives NaN: it guards F1 there too); and benchmarks/gpu_first_run.py end
to end, where every GPU test skips with its reason."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from compile_testkit import REPO, cli_env

pytest.importorskip("torch")


@pytest.mark.slow
def test_the_first_run_gpu_tests_pass_on_the_doubles(tmp_path):
    results = tmp_path / "results.jsonl"
    env = {**cli_env(), "OPTCLI_GPU_RESULTS": str(results),
           "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "contract"), cli_env().get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "gpu_doubles", "-rA", "-p", "no:cacheprovider",
                           "tests/gpu/test_tensorrt_first_run.py"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=900)
    outcome = {name: status for status, name in re.findall(r"^(PASSED|FAILED|ERROR) \S*?::(\w+)", proc.stdout, re.M)}
    assert outcome.get("test_bert_dynamic_sequence_cuda_graphs_match_onnxruntime_at_every_shape_change") == "PASSED", \
        proc.stdout[-3000:]
    # Until the builder side's F6 lands, --int8 on TensorRT keeps an FP32 base and the test says so;
    # any other failure is a mistake in the test.
    int8 = outcome.get("test_int8_with_an_fp16_base_against_fp16")
    assert int8 == "PASSED" or (int8 == "FAILED" and "keeps an FP32 base" in proc.stdout), proc.stdout[-3000:]
    assert re.search(r"SKIPPED .*no NVIDIA GPU here", proc.stdout), proc.stdout[-3000:]
    assert '"kind": "bert_cuda_graphs"' in results.read_text()


@pytest.mark.slow
def test_the_one_command_writes_the_page_with_every_reason(tmp_path):
    from optcli.environment import gpu_name

    if gpu_name() is not None:
        pytest.skip("a GPU is here: run benchmarks/gpu_first_run.py itself")
    refused = subprocess.run([sys.executable, "benchmarks/gpu_first_run.py", "--out", str(tmp_path / "no.md")],
                             cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=600)
    assert refused.returncode == 4 and refused.stderr.startswith("error: no NVIDIA GPU here")
    assert "Traceback" not in refused.stderr and not (tmp_path / "no.md").exists()
    page = tmp_path / "gpu.md"
    proc = subprocess.run([sys.executable, "benchmarks/gpu_first_run.py", "--allow-no-gpu", "--out", str(page)],
                          cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = page.read_text()
    for test in ("test_bert_dynamic_sequence_cuda_graphs_match_onnxruntime_at_every_shape_change",
                 "test_int8_with_an_fp16_base_against_fp16"):
        assert re.search(rf"\| test_tensorrt_first_run::{test} \| skipped \| needs an NVIDIA GPU with TensorRT: ", text)
    assert "| test_tensorrt_first_run::test_tensorrt_rtx_engine_on_an_rtx_gpu | skipped | " in text
    assert "Not run: no NVIDIA GPU" in text


def test_the_gpu_tests_bert_builds_with_the_real_tensorrt_rtx_builder(tmp_path):
    """The GPU tests' BERT (dynamic batch and sequence, attention mask) parses and builds for their
    profile with NVIDIA's own builder, which runs here without a GPU."""
    trt = pytest.importorskip("tensorrt_rtx_bindings")
    sys.path.insert(0, str(REPO / "tests" / "gpu"))
    from test_tensorrt_first_run import PROFILE
    from tiny_bert import INPUTS, save_tiny_bert

    model = save_tiny_bert(tmp_path / "bert.onnx")
    logger = trt.Logger(trt.Logger.ERROR)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    assert parser.parse_from_file(str(model)), [parser.get_error(i).desc() for i in range(parser.num_errors)]
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    for name in INPUTS:
        profile.set_shape(name, *PROFILE)
    config.add_optimization_profile(profile)
    assert builder.build_serialized_network(network, config) is not None
    assert [tuple(network.get_input(i).shape) for i in range(network.num_inputs)] == [(-1, -1), (-1, -1)]
