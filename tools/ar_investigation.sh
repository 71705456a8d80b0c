#!/bin/bash
# The runs behind docs/AR_INVESTIGATION.md (2-core CPU, about 3 hours of wall clock in all), then
# its table and figure. Usage: tools/ar_investigation.sh [OUT_DIR]   (default out/ar_investigation)
# Each run is resumable: rerunning skips finished ones.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-out/ar_investigation}
mkdir -p "$OUT"
run() {
  local name=$1; shift
  [ -f "$OUT/$name/results.json" ] && [ -f "$OUT/$name.done" ] && return
  build/ar_probe --quiet --out "$OUT/$name" "$@" > "$OUT/$name.log" 2>&1
  touch "$OUT/$name.done"
}
S="--style safari --vocab 18"
run pairs_recall_seed0 --seed 0
run pairs_recall_seed1 --seed 1 --feature-map softmax,elu,taylor,hedgehog
run pairs_recall_seed2 --seed 2 --feature-map softmax,elu,taylor,hedgehog
run pairs_query --targets query --feature-map softmax,elu,hedgehog
run pairs_all --targets all --feature-map softmax,elu,hedgehog
run safari_recall $S --targets recall --feature-map softmax,elu,taylor,hedgehog
run safari_all $S --targets all
run safari_all_16ep $S --targets all --epochs 16 --patience 16
run hh_untied --feature-map hedgehog --untied
run hh_joint --feature-map hedgehog --joint-softmax
run hh_f64 --feature-map hedgehog --feature-dim 64
run safari_all_4layers $S --targets all --epochs 8 --patience 8 --layers 4 --feature-map softmax,elu,hedgehog
run safari_sweep $S --targets all --train-samples 10000 --sweep --early-stop loss --patience 10 --epochs 16 \
  --stop-at 1 --feature-map softmax,elu,hedgehog
mkdir -p docs/ar
python3 tools/ar_summary.py --svg docs/ar/entropy_vs_accuracy.svg \
  "pairs, recall, seed 0=$OUT/pairs_recall_seed0" "pairs, recall, seed 1=$OUT/pairs_recall_seed1" \
  "pairs, recall, seed 2=$OUT/pairs_recall_seed2" "pairs, query only=$OUT/pairs_query" "pairs, all=$OUT/pairs_all" \
  "safari, recall=$OUT/safari_recall" "safari, all=$OUT/safari_all" "safari, all, 16 epochs=$OUT/safari_all_16ep" \
  "safari, all, 4 layers, 8 epochs=$OUT/safari_all_4layers" "safari, paper sweep=$OUT/safari_sweep" \
  "hedgehog untied=$OUT/hh_untied" "hedgehog joint softmax=$OUT/hh_joint" "hedgehog F=64=$OUT/hh_f64"
