#!/usr/bin/env bash
# The write-fault and disk-full re-run of issue 36: for every app that writes a run folder, a complete
# run into a fresh folder, then a second run (other settings) with a full disk injected at one of
# its files (HH_TEST_WRITE_FAULT, core/atomic_file.h), and, as root, the same on a real full tmpfs.
# Each line says what the folder holds afterwards: "previous intact" (every file of the first run
# byte for byte), "new whole" (the second run completed), or the changed files.
#   tools/write_fault_rerun.sh [BUILD_DIR]          # prints the table
set -uo pipefail
cd "$(dirname "$0")/.."
B=$(realpath "${1:-build}")
FX=$(realpath tests/fixtures)
W=$(mktemp -d)
trap 'mountpoint -q "$W/tmpfs" && umount "$W/tmpfs"; rm -rf "$W"' EXIT
"$B/train_lm" prepare --input "$FX/wikitext" --tokenizer "$FX/wikitext/gpt2-bytes" --out "$W/lmdata" --quiet >/dev/null

AR="--vocab 8 --seq-len 9 --train-samples 32 --test-samples 8 --layers 1 --heads 1 --head-dim 4 --quiet --epochs 1 --feature-map softmax,elu"
LRA="--preset tiny --generate --quiet --tasks listops --attentions elu --steps 20 --eval-every 10"
TLM="train --data $W/lmdata --preset tiny --context 32 --steps 12 --eval-every 6 --samples 1 --sample-tokens 4 --quiet --attentions softmax"
PREP="prepare --input $FX/wikitext --tokenizer $FX/wikitext/gpt2-bytes --quiet"
GPT2="--model $FX/wikitext/gpt2-bytes --data $FX/wikitext --context 32 --stride 16 --batch 8 --max-train-tokens 1500 --feature-map hedgehog --distill-epochs 1 --finetune-epochs 1 --lr 1e-3 --quiet --save"
LLAMA="--model $FX/hf/llama-tiny-tok --data $FX/samsum --max-length 64 --max-new-tokens 8 --feature-map hedgehog --distill-epochs 1 --finetune-epochs 1 --batch 2 --max-eval 2 --quiet --save"
BERT="--model $FX/hf/bert-tiny-tok --task cola --data $FX/glue/CoLA --preset tiny --feature-map hedgehog --max-length 32 --threads 2 --quiet --save"
VIT="--model $FX/vit/vit-cifar-tiny --data $FX/vit/cifar-tiny --feature-map hedgehog --distill-epochs 1 --finetune-epochs 1 --batch 8 --threads 2 --quiet --save"
EVALC="--model $FX/eval/gpt2-tok --task choice --data $FX/eval/choice.jsonl"
EVALP="--model $FX/eval/llama-tok --task passkey --lengths 128 --depths 0,1 --trials 1"
HFRUN="--model $FX/hf/llama-tiny-tok --prompt hello --max-new-tokens 4"

# app | first run | second run | fault points
CASES=(
  "ar_probe|$AR|$AR --lr 0.01|results.json index.html elu/result.json"
  "lra|$LRA|$LRA --steps 21|results.json report.html basic_test.tsv"
  "train_lm|$PREP|$PREP|train_00000.bin meta.json"
  "train_lm|$TLM|$TLM --seed 5|results.json model.safetensors metrics.jsonl checkpoint"
  "train_lm|$TLM|$TLM --resume|results.json metrics.jsonl"
  "convert_gpt2|$GPT2|$GPT2 --seed 5|results.json model.safetensors checkpoint"
  "convert_llama|$LLAMA|$LLAMA --seed 5|results.json model.safetensors"
  "convert_bert|$BERT|$BERT --seed 5|results.json model.safetensors"
  "convert_vit|$VIT|$VIT --seed 5|results.json model.safetensors"
  "eval_lm|$EVALC|$EVALP|results.json index.html"
  "hf_run|$HFRUN|$HFRUN --max-new-tokens 5|results.json report.html"
)

snapshot() { (cd "$1" && find . -type f ! -name .hh-lock ! -path './failed_run/*' ! -path './.previous/*' | sort | xargs -r md5sum); }

# run APP FIRST SECOND OUT (env: what the second run gets) -> one verdict
verdict() {
  local app=$1 first=$2 second=$3 out=$4
  rm -rf "$out"/* "$out"/.[!.]* 2>/dev/null
  "$B/$app" $first --out "$out" >/dev/null 2>&1 || { echo "first run failed"; return; }
  snapshot "$out" > "$W/before"
  env "${@:5}" "$B/$app" $second --out "$out" > "$W/log" 2>&1
  local rc=$?
  snapshot "$out" > "$W/after"
  if [ $rc -eq 0 ]; then echo "new whole (rc 0)"; return; fi
  local said; said=$(grep -a -o -m1 'No space left on device' "$W/log" || echo "no ENOSPC message")
  if diff -q "$W/before" "$W/after" >/dev/null; then echo "previous intact (rc $rc, $said)"
  else echo "CHANGED: $(diff "$W/before" "$W/after" | grep '^>' | awk '{print $3}' | tr '\n' ' ')(rc $rc)"; fi
}

printf '| app | second run | fault at | outcome |\n|---|---|---|---|\n'
mkdir -p "$W/out"
for c in "${CASES[@]}"; do
  IFS='|' read -r app first second faults <<< "$c"
  kind=$( [[ "$second" == *--resume* ]] && echo resume || echo fresh )
  for f in $faults; do
    printf '| %s | %s | %s | %s |\n' "$app" "$kind" "$f" "$(verdict "$app" "$first" "$second" "$W/out" HH_TEST_WRITE_FAULT="$f")"
  done
done
if [ "$(id -u)" -eq 0 ] && mkdir -p "$W/tmpfs" && mount -t tmpfs -o size=16m tmpfs "$W/tmpfs" 2>/dev/null; then
  for c in "${CASES[@]}"; do
    IFS='|' read -r app first second faults <<< "$c"
    kind=$( [[ "$second" == *--resume* ]] && echo resume || echo fresh )
    out="$W/tmpfs/out"
    mkdir -p "$out"
    rm -rf "$out"/* "$out"/.[!.]* 2>/dev/null
    "$B/$app" $first --out "$out" >/dev/null 2>&1 || { printf '| %s | %s | full tmpfs | first run failed |\n' "$app" "$kind"; continue; }
    snapshot "$out" > "$W/before"
    free=$(df --output=avail -B1 "$W/tmpfs" | tail -1)
    dd if=/dev/zero of="$W/tmpfs/fill" bs=4096 count=$(( (free - 65536) / 4096 )) 2>/dev/null
    "$B/$app" $second --out "$out" > "$W/log" 2>&1
    rc=$?
    snapshot "$out" > "$W/after"
    rm -f "$W/tmpfs/fill"
    if [ $rc -eq 0 ]; then v="new whole (rc 0)"
    elif diff -q "$W/before" "$W/after" >/dev/null; then v="previous intact (rc $rc)"
    else v="CHANGED: $(diff "$W/before" "$W/after" | grep '^>' | awk '{print $3}' | tr '\n' ' ')(rc $rc)"; fi
    printf '| %s | %s | full tmpfs | %s |\n' "$app" "$kind" "$v"
  done
fi
