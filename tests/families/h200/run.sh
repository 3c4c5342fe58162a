#!/usr/bin/env bash
# Issue 13 on the GPU machine (device tool; needs `.dev` from shared/tools/device-prep carried):
#   source .dev/enter.sh && bash tests/families/h200/run.sh [tier3] [large] [8b]
# tier3: the transformers fixtures on ptx, vulkan and wgpu (tests/families/transformers.test.ts).
# large: realistic-width bf16 checkpoints of every family vs transformers fp32 logits, 64 steps (compare.ts).
# 8b:    a Llama-3-8B-shaped bf16 safetensors folder; peak RSS while it uploads (compare.ts prints it).
set -uo pipefail
out=${OUT:-/tmp/poot-out}; mkdir -p "$out"
large=/tmp/poot-large
export NO_COLOR=1
[ $# -eq 0 ] && set -- tier3 large
for what in "$@"; do
  case "$what" in
    tier3)
      POOT_BACKENDS=ptx,vulkan,wgpu timeout 400 deno test -A --no-check tests/families/transformers.test.ts > "$out/families-tier3.txt" 2>&1
      grep -E "\.\.\. (ok|FAILED|ignored)|^(ok|FAILED) \|" "$out/families-tier3.txt" | sed 's/ ([0-9.]*m\?s)$//' ;;
    large)
      timeout 400 python3 tests/families/h200/make_large.py "$large" > "$out/families-large-make.txt" 2>&1; tail -8 "$out/families-large-make.txt"
      timeout 400 deno run -A --no-check tests/families/h200/compare.ts "$large" ptx,vulkan,wgpu > "$out/families-large.txt" 2>&1
      cat "$out/families-large.txt" ;;
    8b)
      timeout 500 python3 tests/families/h200/make_large.py "$large" --8b llama > "$out/families-8b-make.txt" 2>&1; tail -3 "$out/families-8b-make.txt"
      timeout 300 deno run -A --no-check tests/families/h200/compare.ts "$large" ptx llama > "$out/families-8b.txt" 2>&1
      cat "$out/families-8b.txt" ;;
  esac
done
