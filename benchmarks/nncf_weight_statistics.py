"""`nncf.quantize` with and without optcli's weight-statistics fold, alternating in one process, on the same
IR and calibration batches; prints seconds per call and whether the saved IRs are byte-identical.

    python benchmarks/cpu_models.py --out optcli-out/cpu-models --only bert_base   # data
    python benchmarks/compile_time.py --models bert_base --searches fast           # the exported ONNX
    python benchmarks/nncf_weight_statistics.py optcli-out/compile-time/bert_base/pt2-fast-0/01-export/model.onnx \\
        optcli-out/cpu-models/bert_base [--default] [--rounds 2]
"""
from __future__ import annotations

import argparse
import contextlib
import filecmp
import io
import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's optcli
from cpu_backends import _load  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("onnx")
    parser.add_argument("data", help="a folder with calib/*.npz")
    parser.add_argument("--default", action="store_true", help="NNCF's defaults, not model_type=TRANSFORMER")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    import nncf
    import openvino as ov

    from optcli.backends.openvino.ir import _calibration_items
    from optcli.backends.openvino.weight_statistics import folded_weight_statistics
    from optcli.calibration.dataset import SampleSet

    model = ov.convert_model(args.onnx)
    names = [p.get_any_name() for p in model.inputs]
    arrays, _ = _load(Path(args.data) / "calib", names)
    items, _ = _calibration_items(model, names, SampleSet(arrays, None, args.data, "npz"))  # as optcli feeds NNCF
    kwargs = {"subset_size": len(items)}
    if not args.default:
        kwargs["model_type"] = nncf.ModelType.TRANSFORMER
    logging.getLogger("nncf").setLevel(logging.ERROR)
    out = Path(tempfile.mkdtemp(prefix="nncf-fold-"))
    for r in range(args.rounds):
        for fold in (False, True):
            context = folded_weight_statistics() if fold else contextlib.nullcontext({"folded": 0})
            t0 = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), context as c:
                q = nncf.quantize(model, nncf.Dataset(items), **kwargs)
            seconds = time.perf_counter() - t0
            ov.save_model(q, str(out / f"{fold}.xml"), compress_to_fp16=False)
            print(f"round {r + 1} fold={fold}: {seconds:.2f} s ({c['folded']} reductions folded)", flush=True)
    same = filecmp.cmp(out / "False.bin", out / "True.bin", shallow=False)
    print(f"IRs byte-identical: {same} ({out})")


if __name__ == "__main__":
    main()
