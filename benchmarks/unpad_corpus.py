"""Print the unpad corpus table: family x exporter x opset -> applied, or the reason it is skipped.

    python benchmarks/unpad_corpus.py                  # every case (11 families x 3 exporters x 2 opsets)
    python benchmarks/unpad_corpus.py --family bert --exporter torchscript-fixed --opset 17

Each case is exported and compiled as `optcli compile model.onnx` does (simplify, fuse, unpad), and the
rewrite is also made and proven on the exporter's graph itself (build-cpu's OpenVINO candidates start
there): benchmarks/unpad_corpus_models.py. docs/benchmarks/unpad-corpus.md holds a run's output.
"""
from __future__ import annotations

import argparse
import platform
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from unpad_corpus_models import EXPORTERS, FAMILIES, OPSETS, all_cases, check  # noqa: E402


def isa() -> str:
    """The CPU's model name and the SIMD features that matter to INT8 and FP32 kernels."""
    flags: set[str] = set()
    name = platform.processor() or platform.machine()
    try:
        text = Path("/proc/cpuinfo").read_text()
        name = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")), name)
        flags = set(next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), []))
    except OSError:
        pass
    wanted = ["avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8"]
    return f"{name}; " + ", ".join(f"{f} {'yes' if f in flags else 'no'}" for f in wanted)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", action="append", choices=FAMILIES)
    parser.add_argument("--exporter", action="append", choices=EXPORTERS)
    parser.add_argument("--opset", action="append", type=int, choices=OPSETS)
    args = parser.parse_args()
    cases = [c for c in all_cases() if (not args.family or c.family in args.family)
             and (not args.exporter or c.exporter in args.exporter) and (not args.opset or c.opset in args.opset)]
    print(f"CPU: {isa()}")
    import onnxruntime
    import torch
    import transformers

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, onnxruntime {onnxruntime.__version__}")
    print()
    print("| family | exporter | opset | unpad stage (after simplify, fuse) | rewrite of the exporter's graph | s |")
    print("|---|---|---|---|---|---|")
    applied = twins = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(cases):
            o = check(case, Path(tmp) / str(i))
            applied += o.applied
            twins += o.twin_applied
            stage = "applied" if o.applied else f"skipped: {o.reason}"
            twin = "applied" if o.twin_applied else f"skipped: {o.twin_reason}"
            print(f"| {case.family} | {case.exporter} | {case.opset} | {_cell(stage)} | {_cell(twin)} | "
                  f"{o.seconds:.1f} |", flush=True)
    print()
    print(f"unpad stage applied: {applied} / {len(cases)}; rewrite of the exporter's graph applied: "
          f"{twins} / {len(cases)}")


def _cell(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ")[:220]


if __name__ == "__main__":
    main()
