#!/bin/bash
# Compile time of two checkouts, interleaved: `optcli compile ONNX --int8 --force --search fast` with the
# old and the new code in turn (old first in odd rounds, new first in even ones), per model and round, on
# the same exported ONNX and data. Prints wall seconds, stage seconds, the chosen backend and its p50.
#
#   git worktree add /tmp/optcli-old <commit>
#   benchmarks/compile_ab.sh /tmp/optcli-old . [rounds] [models]
#   FROM=pt2 benchmarks/compile_ab.sh ...   # from the eval model's .pt2 instead (what users run)
#   PRECISION=fp32 benchmarks/compile_ab.sh ...   # an FP32 compile (no --int8, no calibration data)
#
# Needs `python benchmarks/cpu_models.py --out optcli-out/cpu-models --only bert_base,minilm` (data) and
# `python benchmarks/compile_time.py` once (its pt2-fast-0/01-export/model.onnx is the source).
set -euo pipefail
OLD=$(cd "$1" && pwd); NEW=$(cd "$2" && pwd); ROUNDS=${3:-2}; MODELS=${4:-bert_base minilm}
PY=${PY:-$NEW/.venv/bin/python}
for round in $(seq 1 "$ROUNDS"); do
  for model in $MODELS; do
    data=$NEW/optcli-out/cpu-models/$model
    src=$NEW/optcli-out/compile-time/$model/pt2-fast-0/01-export/model.onnx
    [ "${FROM:-onnx}" = pt2 ] && src=$NEW/optcli-out/cpu-models/$model.pt2
    order="old new"; [ $((round % 2)) -eq 0 ] && order="new old"  # alternate: no side always goes first
    for which in $order; do
      [ "$which" = old ] && dir=$OLD || dir=$NEW
      out=/tmp/optcli-ab-$which-$model
      rm -rf "$out"  # a cold compile into an empty folder: an earlier run's folders skewed the side they were on
      t0=$(date +%s.%N)
      if [ "${PRECISION:-int8}" = int8 ]; then precision=(--int8 --calib "$data/calib"); else precision=(); fi
      (cd "$dir" && HF_HUB_OFFLINE=1 "$PY" -m optcli compile "$src" --out "$out" "${precision[@]}" \
         --eval "$data/eval" --force --search fast >/dev/null 2>&1) || echo "  ($which failed)"
      t1=$(date +%s.%N)
      stages=$("$PY" -c "
import json
r = json.load(open('$out/report.json'))
print(' '.join(f\"{s['name']}={s['seconds']:.1f}\" for s in r['stages'] if s.get('seconds') is not None),
      r['final']['backend'], round(r['final']['latency_ms']['p50'], 2))")
      echo "round $round $model $which wall $(echo "$t1 - $t0" | bc) | $stages"
    done
  done
done
