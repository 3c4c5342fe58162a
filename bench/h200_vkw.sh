#!/usr/bin/env bash
# Issue 23 (Vulkan and WebGPU at PTX speed on the H200): the measurements the vkw branch prepared and could not
# run (no GPU where it was built). Each section is bounded by `timeout` and writes its log under $OUT; the
# summary lines go to stdout. From the repo root on the GPU machine, after `source .dev/enter.sh`:
#
#   bash bench/h200_vkw.sh wall          (~3 min) whole decode step per backend and per fusion variant, warmed up
#   bash bench/h200_vkw.sh wall-deep     (~1 min) the attention variants again at position 1024
#   bash bench/h200_vkw.sh profile       (~3 min) per-kernel table: ptx, vulkan, wgpu side by side, matched by name
#   bash bench/h200_vkw.sh wgpu-host     (~3 min) wgpu's host µs per step split into our calls, finish(), submit, map
#   bash bench/h200_vkw.sh goal          (~4 min) the table: bench/decode.ts on ptx, vulkan, wgpu
#
# What each answers:
# - wall: which fusion costs what on wgpu (the first --wall run had wgpu:no-plan-fuse at qwen 2.702 ms queued
#   and 1.345 synced, queued above synced, which no fixed cost explains: read as a GPU clock still ramping from
#   idle, since each entry compiles for seconds first; --wall now warms each entry for 1 s and takes the median
#   of 5 rounds). Vulkan hypotheses for qwen (70% -> 80% of ptx): no-attention-fuse (partial + combine as two
#   dispatches instead of the fused kernel: 11 µs against ptx's 4.8 in session 6), attention-team-count (the
#   fused kernel's lane 0 counts for its team: 1/32 of the same-address atomics), splits8 (fewer chunks at
#   positions 0-63), attention-skip-empty (the fused kernel's empty chunks, 31 of 32 at position 0, neither
#   write nor count; bit-identical), restrict (read-only bindings decorated Restrict, so NVIDIA's compiler may
#   use its read-only data path as PTX's ld.global.nc does; timing only until recordings check aliasing),
#   no-robust (what robustBufferAccess's bounds checks cost; timing only, never a default).
# - profile: the per-kernel breakdown per backend (bench/profile.ts kernelTable: shared kernels in one row each,
#   each backend's own kernels under it, and the token by kind: attention_partial + combine beside attention_fused).
# - wgpu-host: bench/gap.ts prints the device's stats per step: encodeMicros/preEncodeMicros (our loop plus
#   finish), finishMicros (wgpu's validation, tracking and recording inside GPUCommandEncoder.finish), submitMicros,
#   mapMicros; the rest of a step's host time is the Engine's.
set -uo pipefail
out=${OUT:-/tmp/poot-out}; mkdir -p "$out"
export NO_COLOR=1
for what in "$@"; do
  case "$what" in
    wall)
      timeout 480 deno run -A --no-check bench/kernels.ts --shape qwen2.5-0.5b,llama-3.2-1b --wall --backend \
        ptx,vulkan,vulkan:no-attention-fuse,vulkan:attention-team-count,vulkan:attention-skip-empty,vulkan:attention-skip-empty+attention-team-count,vulkan:splits8,vulkan:restrict,vulkan:no-robust,wgpu,wgpu:no-plan-fuse,wgpu:no-outputs-in-place,wgpu:no-gather-cast,wgpu:no-attention-fuse,wgpu:attention-skip-empty \
        > "$out/vkw-wall.txt" 2>&1; echo "wall exit $?" >> "$out/vkw-wall.txt"
      grep -vE "^\s*at |^$" "$out/vkw-wall.txt" | tail -40 ;;
    wall-deep)
      # the attention variants where every chunk has positions (a variant that wins at pos 0 must not lose here)
      timeout 300 deno run -A --no-check bench/kernels.ts --shape qwen2.5-0.5b --wall --pos 1024 --backend \
        ptx,vulkan,vulkan:no-attention-fuse,vulkan:attention-team-count,vulkan:attention-skip-empty,vulkan:splits8,wgpu,wgpu:attention-skip-empty \
        > "$out/vkw-wall-deep.txt" 2>&1; echo "wall-deep exit $?" >> "$out/vkw-wall-deep.txt"
      grep -vE "^\s*at |^$" "$out/vkw-wall-deep.txt" | tail -12 ;;
    profile)
      timeout 480 deno run -A --no-check bench/kernels.ts --shape qwen2.5-0.5b,llama-3.2-1b --backend ptx,vulkan,wgpu \
        --out "$out/vkw-profile.json" > "$out/vkw-profile.txt" 2>&1; echo "profile exit $?" >> "$out/vkw-profile.txt"
      grep -E "steps, kernels|stream read|^by kind|^sum of|^(gemv|attention|argmax|gather|elementwise) |exit" "$out/vkw-profile.txt" | head -60 ;;
    wgpu-host)
      timeout 420 deno run -A --no-check bench/gap.ts --shape qwen2.5-0.5b,llama-3.2-1b --backend wgpu --tokens 64 \
        > "$out/vkw-gap-wgpu.txt" 2>&1; echo "gap exit $?" >> "$out/vkw-gap-wgpu.txt"
      grep -E "device stats per step|engine again|rec bare|rec queued|exit" "$out/vkw-gap-wgpu.txt" | head -20 ;;
    goal)
      for b in ptx vulkan wgpu; do
        timeout 180 deno run -A --no-check bench/decode.ts --shape llama-3.2-1b,qwen2.5-0.5b --tokens 64 --no-eager --deep 0 \
          --backend "$b" > "$out/vkw-goal-$b.txt" 2>&1; echo "$b exit $?" >> "$out/vkw-goal-$b.txt"
        grep -E "replay at pos|exit" "$out/vkw-goal-$b.txt"
      done ;;
    *) echo "unknown section $what (wall, wall-deep, profile, wgpu-host, goal)"; exit 2 ;;
  esac
done
