"""Check tensorrt_api.TABLE against the real bindings source: every row's name must be bound in its
file at every TensorRT release its version range covers, and a row with `since`/`until` must be
absent from the releases outside it.

    python tests/contract/check_bindings.py /path/to/NVIDIA-TensorRT/.git [REF ...]

Not a test (it needs a TensorRT checkout, which CI does not have); its last output is quoted in
docs/tensorrt.md. Refs default to release/10.0 10.3 10.8 10.9 11.0 11.1 and main's HEAD.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tensorrt_api import TABLE, Row, _version  # noqa: E402

FILES = {"pyCore.cpp": "python/src/infer/pyCore.cpp", "pyGraph.cpp": "python/src/infer/pyGraph.cpp",
         "pyFoundationalTypes.cpp": "python/src/infer/pyFoundationalTypes.cpp",
         "pyPlugin.cpp": "python/src/infer/pyPlugin.cpp", "pyOnnx.cpp": "python/src/parsers/pyOnnx.cpp"}
REFS = {"release/10.0": "10.0", "release/10.3": "10.3", "release/10.8": "10.8", "release/10.9": "10.9",
        "release/11.0": "11.0", "release/11.1": "11.1", "HEAD": "11.1"}


def needle(row: Row) -> str:
    return f'.value("{row.name}"' if row.kind == "member" else f'"{row.name}"'


def main() -> int:
    git_dir = sys.argv[1]
    refs = {r: REFS.get(r, "11.1") for r in sys.argv[2:]} or REFS
    problems = 0
    for ref, version in refs.items():
        texts = {k: subprocess.run(["git", "--git-dir", git_dir, "show", f"{ref}:{v}"], capture_output=True,
                                   text=True).stdout for k, v in FILES.items()}
        checked = 0
        for row in TABLE:
            if row.source not in texts:
                continue
            expected = _version(row.since) <= _version(version) and (row.until is None or
                                                                      _version(version) < _version(row.until))
            present = needle(row) in texts[row.source]
            checked += 1
            if present != expected:
                problems += 1
                print(f"{ref}: {row.owner}.{row.name} {'missing' if expected else 'present but the table says not'}"
                      f" in {row.source}")
        print(f"{ref} (TensorRT {version}): {checked} rows checked")
    print("OK" if not problems else f"{problems} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
