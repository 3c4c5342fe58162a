#!/usr/bin/env bash
# One batch of GPU-machine work (the device tool): tests of the GPU backends, then stories260K speed per backend.
#
# Every run of `all`, `tests` and `ptx` checks PTX against the independent reference: tests/llm/tier3.test.ts
# (greedy tokens of `poot run --json` and the log-softmax at 18 positions vs llama.cpp) reads the llama.cpp
# reference carried in tests/llm/llamacpp_stories260K.json (this machine has no Node, so llama.cpp cannot run
# here; the file is made where it can, by `deno run -A tests/llm/llamacpp_reference.ts --write`, and used only
# while its key, the sha256 of the model file and of the helper script, matches). tests/model/ holds ptx to the
# oracle (tier 2) on stories260K.
# What "capture == eager" (tests/ops, tests/model) proves differs per device: on ptx, replay is a CUDA graph
# and eager launches kernel by kernel, two separate paths, so equality proves the captured graph does what the
# launches do; on vulkan, eager is the same recording split into one submission per step, so it proves the
# barriers inside a recording match those between submissions; on js and wgpu, replay and eager run the same
# code, so it proves only that a recording keeps every step and reads the slot values of the current step.
# Usage there: source .dev/enter.sh && bash bench/h200.sh [tests|speed|bench|serve-tests|serve] ...  (logs go to $OUT)
# xq-prep-tests / xq-prep / xq-prep-kernels / xq-prep-sweep: issue 16's x quantized once per gemv (kernels/lib/xq_prep.ts):
#   its tests, the 8B decode and the per-kernel times with it on and off, the gemv tuning sweep with it on
#   (XQ_DTYPES=q5_k_m,q4_0 for the other mixes; XQ_DTYPE for the kernels and the sweep). One call each.
# dot4 / dot4-bench: the native int8 dot on Vulkan and WebGPU (issues 16/23): caps and tests, then the 8B q4_k_m/q8_0
#   decode with and without the integer gemv (DOT4_BACKENDS=vulkan|wgpu, one per call).
# table: the whole speed table of issue 18 (bench/suite.ts: decode, PyTorch anchors from .dev/anchor, deep context, prefill, host µs, vulkan, wgpu, bun rows).
#   More than one call's 10 minutes: TABLE_ROWS=decode,pytorch TABLE_TAG=-a in one call (~4 minutes on an H100 with the
#   three shapes), TABLE_ROWS=prefill,pytorch-prefill,deep,host,vulkan,wgpu,bun TABLE_TAG=-b in the next, then here
#   `deno run -A bench/suite.ts --from table-a.json,table-b.json` prints them as one table.
# tp: tensor parallelism on nvidia-h200-x2 / -x4 (issue 21): tests/tp/ptx.test.ts (fixtures vs the oracle, stories vs
#     llama2.c, on 2 and 4 GPUs), stories260K greedy tokens of `poot run --tp N --backend ptx`
#     vs tp 1, then bench/tp.ts (8B at tp 1/2[/4] with greedy-token agreement, and the 70B shape at tp > 1).
#     TP_LIST=1,2 (x2) or 1,2,4 (x4). With libnccl the group records its collectives inside each GPU's CUDA graph
#     (the device path; POOT_TP_COLLECTIVES=host forces the host-staged path). tests/tp/nccl.test.ts is the
#     device path's own check (a one-rank group on 1 GPU, tp 2/4 with more).
# serve: bench/serve.ts at the 1B and 8B shapes (SERVE_ARGS="--matmul-tile 32" SERVE_TAG=-t32 for the tiled variant).
# serve-blocks: serving GGUF blocks (session 40): the 8B's entries at 1 / 32 / 160 rows per block type and a few tiles (bench/serve_kernels.ts
#   --dtype, weights zeroed), then bench/serve.ts at concurrency 32 over Q4_K_M on each path (--mma-blocks mma, staged,
#   off = the FMA kernel; BLOCK_PATHS to choose). ~9 minutes on an H100 (BLOCK_PATHS=mma: ~5, one call).
# driver-ahead: decode steps in flight through the Driver (DriverOptions.stepsAhead; ptx's default 8, two banks of
#   them): bench/driver.ts at stories260K (1 to 16), qwen2.5-0.5b and the 1B (1, 4, 8 twice), tok/s and host µs a
#   token (DRIVER_BACKEND=vulkan|wgpu for another backend, DRIVER_AHEAD_SMALL / DRIVER_AHEAD for other lists of steps
#   in flight at stories260K / the two larger shapes). Session 46's "default" rows ran one step at a time (bench/timed.ts hid Device.stepsAhead until session
#   47). Session 47 (H100, two interleaved runs of each tree at 4 and 8 in flight): each step waiting for its own mark
#   (Device.mark) against the whole stream (queued blocks, and the plain loop before them): stories260K 12981-13915
#   tok/s against 11209-12978 and 11084-13001, the 1B 969-982 against 955-969 and 942-964, qwen2.5-0.5b 1527-1590
#   against 1424-1574 and 1493-1552. Host µs a token (wall less the device wait) counts host work that overlaps the
#   device too: at stories260K 20-28 with the marks, 18-41 queued, 7.5-19 plain, while tok/s rose. ~1 minute.
#   Each run's "per token" line has PtxDevice.stats: launchMicros (inside cuGraphLaunch), slotWaits /
#   slotWaitMicros (a slot write that waited for the idle stream), which tell a blocking launch from a drained pipeline.
# boundary: bench/boundary.ts's chains of bare weight streams at the three shapes, the megakernel pattern's waits
#   included (BOUNDARY_RINGS, BOUNDARY_DEPS for other rings and modes). Session 50 (H100): --dep ll the slowest mode at every shape.
# goals: issues 14 and 17 in one call (bounded at 570 s): bench/serve.ts at 8B and at 1B (concurrency 1/8/32/64, 512-token
#   prompts, 128 new tokens: tok/s, TTFT, ITL, step b32/b1, µs in/around the step, bytes uploaded per step), the
#   1B serve rows again with the full sampler (--sampler full), bench/sampler.ts (the Driver's full sampler and a
#   JSON-schema mask vs greedy at 1B), and bench/serve_loop.ts (the scheduler loop's own µs per step). Logs: $OUT.
# vk-wall / vk-wall-deep / vk-profile / wgpu-host / vk-goal (issue 23): the whole decode step per backend and per
#   fusion or attention variant, warmed up (at pos 0, then the attention variants at 1024); the per-kernel table of
#   ptx, vulkan and wgpu matched by name; wgpu's host µs per step split into our calls, finish(), submit and map
#   (bench/gap.ts); the issue's bench/decode.ts table on the three backends. Each ~1-4 minutes.
set -uo pipefail
out=${OUT:-/tmp/poot-out}; mkdir -p "$out"
export NO_COLOR=1
for what in "$@"; do
  case "$what" in
    all)
      nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpu.txt" 2>&1
      # parallel files (the GPU machine has 16 cores): ~2 minutes on the H200 (session 5: 1354 passed)
      DENO_JOBS=8 POOT_BACKENDS=ptx,vulkan,wgpu timeout 560 deno test -A --no-check --parallel tests/ffi/ tests/ptx/ tests/ops/ tests/model/ \
        tests/devices/ tests/kernels/ tests/llm/tier3.test.ts tests/vlm/transformers.test.ts tests/vulkan/ tests/wgpu/ tests/sampling/ tests/engine/ tests/quant/ \
        > "$out/tests-all.txt" 2>&1; echo "tests exit $?" >> "$out/tests-all.txt"
      grep -E "\.\.\. FAILED|^(ok|FAILED) \|" "$out/tests-all.txt" | head -40
      grep -A14 "^ ERRORS" "$out/tests-all.txt" | head -60
      timeout 60 deno run -A --no-check tests/wgpu/stories_bench.ts --tokens 300 > "$out/wgpu-bench.txt" 2>&1; tail -1 "$out/wgpu-bench.txt" ;;
    tests)
      nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpu.txt" 2>&1
      POOT_BACKENDS=ptx,vulkan,wgpu timeout 420 deno test -A --no-check tests/ffi/cuda.test.ts tests/ptx/ tests/ops/ tests/model/ \
        tests/llm/tier3.test.ts > "$out/tests-gpu.txt" 2>&1; echo "tests exit $?" >> "$out/tests-gpu.txt"
      grep -E "\.\.\. (ok|FAILED|ignored)|^(ok|FAILED) \|" "$out/tests-gpu.txt" | sed 's/ ([0-9.]*m\?s)$//' | sort | uniq -c | sort -rn | head -60
      grep -A12 "ERRORS" "$out/tests-gpu.txt" | head -60 ;;
    stories)
      POOT_BACKENDS=ptx,vulkan,wgpu timeout 200 deno test -A --no-check tests/model/ tests/llm/tier3.test.ts > "$out/tests-stories.txt" 2>&1
      grep -E "\.\.\. |^(ok|FAILED) \|" "$out/tests-stories.txt" ;;
    tests2)
      timeout 300 deno test -A --no-check tests/vulkan/ tests/wgpu/ tests/sampling/ > "$out/tests-gpu2.txt" 2>&1; echo "exit $?" >> "$out/tests-gpu2.txt"
      grep -E "\.\.\. FAILED|^(ok|FAILED) \|" "$out/tests-gpu2.txt" | head -40
      grep -A14 "^ ERRORS" "$out/tests-gpu2.txt" | head -80 ;;
    speed)
      for b in ptx vulkan wgpu js; do
        timeout 120 deno run -A --no-check cli/main.ts run --json --backend "$b" --max-tokens 256 --ctx 512 --prompt "Once upon a time" \
          > "$out/speed.json" 2> "$out/speed.err"; echo "$b exit $?: $(grep -o '"timings":.*' "$out/speed.json") $(tail -2 "$out/speed.err")"
      done ;;
    ptx)
      POOT_BACKENDS=ptx timeout ${PTX_TIMEOUT:-300} deno test -A --no-check ${PTX_TESTS:-tests/ptx/ tests/ops/ tests/model/ tests/llm/tier3.test.ts} > "$out/tests-ptx.txt" 2>&1; echo "tests exit $?" >> "$out/tests-ptx.txt"
      grep -E "\.\.\. FAILED|^(ok|FAILED) \||tests exit" "$out/tests-ptx.txt" | head -20
      grep -A12 "ERRORS" "$out/tests-ptx.txt" | head -40 ;;
    kernels)
      k="$out/${KERNELS_NAME:-kernels}.txt"
      timeout ${KERNELS_TIMEOUT:-300} deno run -A --no-check bench/kernels.ts --shape ${SHAPES:-llama-3.2-1b,qwen2.5-0.5b,llama-3-8b} ${KERNELS_ARGS:-} \
        > "$k" 2>&1; echo "kernels exit $?" >> "$k"
      grep -v "^\s*$" "$k" | grep -v "^  gemv" | tail -${KERNELS_TAIL:-60} ;;
    tp)
      nvidia-smi -L > "$out/gpus.txt" 2>&1; cat "$out/gpus.txt"
      POOT_BACKENDS=ptx timeout 300 deno test -A --no-check tests/tp/ptx.test.ts tests/tp/nccl.test.ts > "$out/tests-tp.txt" 2>&1; echo "tests exit $?" >> "$out/tests-tp.txt"
      grep -E "\.\.\. |^(ok|FAILED) \||tests exit" "$out/tests-tp.txt"; grep -A12 "ERRORS" "$out/tests-tp.txt" | head -30
      for n in $(echo "${TP_LIST:-1,2}" | tr , ' '); do
        timeout 120 deno run -A --no-check cli/main.ts run --json --backend ptx --tp "$n" --max-tokens 64 --prompt "Once upon a time" \
          > "$out/tp-run-$n.json" 2> "$out/tp-run-$n.err"; echo "run --tp $n exit $?: $(tail -1 "$out/tp-run-$n.json" | head -c 400) $(tail -1 "$out/tp-run-$n.err")"
      done
      timeout ${TP_TIMEOUT:-540} deno run -A --no-check bench/tp.ts --backend ptx --tp "${TP_LIST:-1,2}" --shape llama-3-8b --tokens 64 --big \
        --out "$out/tp-bench.json" > "$out/tp-bench.txt" 2>&1; echo "bench exit $?" >> "$out/tp-bench.txt"; tail -12 "$out/tp-bench.txt" ;;
    serve-tests)
      POOT_BACKENDS=ptx timeout ${SERVE_TIMEOUT:-400} deno test -A --no-check tests/serve/ tests/ops/ > "$out/tests-serve.txt" 2>&1; echo "tests exit $?" >> "$out/tests-serve.txt"
      grep -E "\.\.\. (ok|FAILED|ignored)|^(ok|FAILED) \||round|tests exit" "$out/tests-serve.txt" | head -40
      grep -A12 "ERRORS" "$out/tests-serve.txt" | head -40 ;;
    serve)
      timeout ${BENCH_TIMEOUT:-560} deno run -A --no-check bench/serve.ts --shape ${SHAPES:-llama-3.2-1b,llama-3-8b} --backend ptx \
        ${SERVE_ARGS:-} --out "$out/serve-ptx${SERVE_TAG:-}.json" > "$out/serve-ptx${SERVE_TAG:-}.txt" 2>&1; echo "bench exit $?" >> "$out/serve-ptx${SERVE_TAG:-}.txt"
      grep -v "^\s*$" "$out/serve-ptx${SERVE_TAG:-}.txt" | tail -24 ;;
    serve-blocks)
      nvidia-smi --query-gpu=name --format=csv,noheader > "$out/gpu.txt" 2>&1
      for dt in q4_k_m q8_0; do
        timeout 150 deno run -A --no-check bench/serve_kernels.ts --shape llama-3-8b --rows 1,32,160 --dtype $dt --breakdown off --tune default,b2x1,s1x1,s1x2,s2x1/ks16 \
          > "$out/serve-entries-$dt.txt" 2>&1; tail -4 "$out/serve-entries-$dt.txt"
      done
      for path in ${BLOCK_PATHS:-mma staged off}; do
        timeout 200 deno run -A --no-check bench/serve.ts --shape llama-3-8b --backend ptx --dtype q4_k_m --concurrency 32 --prompt 512 --gen 64 \
          --mma-blocks $path > "$out/serve-blocks-$path.txt" 2>&1; echo "$path: $(grep -E '^\| llama' "$out/serve-blocks-$path.txt" | tr '\n' ' ')"
      done ;;
    driver-ahead)
      d() { timeout "$1" deno run -A --no-check bench/driver.ts "${@:2}" 2>&1 | grep -E "decode after|per token|rror" | head -16; }
      b=${DRIVER_BACKEND:-ptx}
      echo "== stories260K $b"; d 40 --shape stories260K --backend $b --prompts 64 --tokens 1024 --ctx 2048 --steps-ahead ${DRIVER_AHEAD_SMALL:-1,2,4,8,16,4,8}
      for s in qwen2.5-0.5b llama-3.2-1b; do echo "== $s $b"; d 80 --shape $s --backend $b --prompts 16 --prefill 16 --tokens 256 --steps-ahead ${DRIVER_AHEAD:-1,4,8,4,8}; done ;;
    boundary)
      # What a kernel boundary and a megakernel's waits cost with the compute stripped out (bench/boundary.ts; README
      # "Session 32" and "Session 49"): pdl, early, persist, prefetch and the mega chains in every --dep mode, ~20 s.
      timeout 200 deno run -A --no-check bench/boundary.ts --shape qwen2.5-0.5b,llama-3.2-1b,llama-3-8b --cpt 2 --blocks 2 \
        --ring ${BOUNDARY_RINGS:-6x32,3x64} --dep ${BOUNDARY_DEPS:-all,one,none,ll} 2>&1 | tee "$out/boundary.txt" ;;
    goals)
      nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpu.txt" 2>&1
      for shape in llama-3-8b llama-3.2-1b; do
        t=130; [ $shape = llama-3-8b ] && t=250
        timeout $t deno run -A --no-check bench/serve.ts --shape $shape --backend ptx --concurrency 1,8,32,64 --prompt 512 --gen 128 \
          --out "$out/serve-$shape.json" > "$out/serve-$shape.txt" 2>&1; echo "serve $shape exit $?" >> "$out/serve-$shape.txt"
        grep -v "^\s*$" "$out/serve-$shape.txt" | tail -12
      done
      timeout 80 deno run -A --no-check bench/serve.ts --shape llama-3.2-1b --backend ptx --concurrency 1,32 --prompt 512 --gen 128 --sampler full \
        --out "$out/serve-full.json" > "$out/serve-full.txt" 2>&1; echo "serve full sampler exit $?" >> "$out/serve-full.txt"
      grep -v "^\s*$" "$out/serve-full.txt" | tail -8
      timeout 80 deno run -A --no-check bench/sampler.ts --backend ptx --steps 64 > "$out/sampler.txt" 2>&1; echo "sampler exit $?" >> "$out/sampler.txt"
      tail -14 "$out/sampler.txt"
      timeout 30 deno run -A --no-check bench/serve_loop.ts --step-ms 3 --gen 100 --io-every 0,5 > "$out/serve-loop.txt" 2>&1
      cat "$out/serve-loop.txt" ;;
    table)
      # The whole speed table (bench/suite.ts): every row bounded; TABLE_ROWS picks groups, TABLE_BASELINE adds an old column.
      timeout ${TABLE_TIMEOUT:-560} deno run -A --no-check bench/suite.ts ${TABLE_ROWS:+--rows $TABLE_ROWS} ${TABLE_BASELINE:+--baseline $TABLE_BASELINE} \
        --out "$out/table${TABLE_TAG:-}.json" > "$out/table${TABLE_TAG:-}.md" 2> "$out/table${TABLE_TAG:-}.log"; echo "table exit $?" >> "$out/table${TABLE_TAG:-}.md"
      cat "$out/table${TABLE_TAG:-}.md" ;;
    dot4)
      # issues 16/23: the native int8 dot (OpSDot / dot4I8Packed) on NVIDIA's Vulkan and Deno's WebGPU: the caps each
      # reports (poot info: "int8 dot fast|native|no") and tests/devices/dot4.test.ts (native and hidden, bit-exact).
      POOT_BACKENDS=vulkan,wgpu timeout 240 deno test -A --no-check tests/devices/dot4.test.ts > "$out/dot4-tests.txt" 2>&1; echo "tests exit $?" >> "$out/dot4-tests.txt"
      grep -E "\.\.\. (ok|FAILED|ignored)|^(ok|FAILED) \||tests exit" "$out/dot4-tests.txt" | head -12
      timeout 90 deno run -A --no-check cli/main.ts info > "$out/dot4-info.txt" 2>&1; grep -E "^  (ptx|vulkan|wgpu) " "$out/dot4-info.txt" ;;
    dot4-bench)
      # 8B batch-1 decode as q4_k_m and q8_0, the integer gemv (--quantized-x on) against the float one (off), per
      # backend in DOT4_BACKENDS (default vulkan; one backend per call keeps it inside the 10-minute limit).
      for b in ${DOT4_BACKENDS:-vulkan}; do for q in on off; do
        f="$out/decode-${DOT4_SHAPE:-llama-3-8b}-$b-xq-$q"
        timeout ${DOT4_TIMEOUT:-270} deno run -A --no-check bench/decode.ts --shape ${DOT4_SHAPE:-llama-3-8b} --dtype q4_k_m,q8_0 --backend "$b" --quantized-x "$q" \
          --tokens 32 --no-eager --deep 0 --out "$f.json" > "$f.txt" 2>&1; echo "bench exit $?" >> "$f.txt"
        echo "== $b --quantized-x $q"; grep -v "^\s*$" "$f.txt" | tail -5
      done; done ;;
    xq-prep-tests)
      # issue 16: the int8 gemvs' x quantized once per gemv (CompileOptions.xqPrep) against the in-kernel quantization,
      # bit for bit on ptx and vulkan (the op cases of every XQ type; wgpu to the oracle's bound); the 8B prep kernels
      # through ptxas.
      POOT_BACKENDS=${XQ_BACKENDS:-ptx,vulkan} timeout ${XQ_TEST_TIMEOUT:-240} deno test -A --no-check tests/quant/xq_prep.test.ts \
        tests/ptx/qgemv_render.test.ts > "$out/xq-prep-tests.txt" 2>&1; echo "tests exit $?" >> "$out/xq-prep-tests.txt"
      grep -E "\.\.\. (ok|FAILED|ignored)|^(ok|FAILED) \||tests exit" "$out/xq-prep-tests.txt" | head -20 ;;
    xq-prep)
      # the 8B decode with each --xq-prep value (on, no-norm: only the gemvs without a fused norm, off), one load of
      # the weights per dtype
      f="$out/decode-8b-xq-prep"
      timeout ${XQ_TIMEOUT:-540} deno run -A --no-check bench/decode.ts --shape llama-3-8b --dtype ${XQ_DTYPES:-q4_k_m,q8_0} --backend ptx \
        --quantized-x on --xq-prep ${XQ_PREP:-on,no-norm,off} --tokens 32 --no-eager --deep 0 --out "$f.json" > "$f.txt" 2>&1; echo "bench exit $?" >> "$f.txt"
      grep -v "^\s*$" "$f.txt" | tail -12 ;;
    xq-prep-kernels)
      # the same per kernel (bench/kernels.ts: each distinct gemv and prep kernel of the 8B plan, µs and the token's sum)
      for p in on off; do
        f="$out/kernels-8b-${XQ_DTYPE:-q4_k_m}-xq-prep-$p.txt"
        timeout ${XQ_TIMEOUT:-250} deno run -A --no-check bench/kernels.ts --shape llama-3-8b --dtype ${XQ_DTYPE:-q4_k_m} --quantized-x on \
          --xq-prep "$p" --only "gemv|xq_prep" > "$f" 2>&1; echo "kernels exit $?" >> "$f"
        echo "== --xq-prep $p"; grep -v "^\s*$" "$f" | tail -30
      done ;;
    xq-prep-sweep)
      # the gemvs reading prepared x under other row units per team / loads in flight (their tuning was measured with x
      # quantized in every team: xqTune), best per gemv
      f="$out/sweep-8b-${XQ_DTYPE:-q4_k_m}-xq-prep.txt"
      timeout ${XQ_TIMEOUT:-560} deno run -A --no-check bench/kernels.ts --shape llama-3-8b --dtype ${XQ_DTYPE:-q4_k_m} --quantized-x on \
        --xq-prep on --only "gemv|xq_prep" --sweep --lanes ${XQ_LANES:-0} --rows ${XQ_ROWS:-2,4,8} --unroll 2 --ahead ${XQ_AHEAD:-4,8} > "$f" 2>&1
      echo "sweep exit $?" >> "$f"; grep -v "^\s*$" "$f" | grep -v "^  gemv" | tail -40 ;;
    vk-wall)
      timeout 480 deno run -A --no-check bench/kernels.ts --shape qwen2.5-0.5b,llama-3.2-1b --wall --backend \
        ptx,vulkan,vulkan:no-attention-fuse,vulkan:attention-team-count,vulkan:attention-skip-empty,vulkan:attention-skip-empty+attention-team-count,vulkan:splits8,vulkan:restrict,vulkan:no-robust,wgpu,wgpu:no-plan-fuse,wgpu:no-outputs-in-place,wgpu:no-gather-cast,wgpu:no-attention-fuse,wgpu:attention-skip-empty \
        > "$out/vkw-wall.txt" 2>&1; echo "wall exit $?" >> "$out/vkw-wall.txt"
      grep -vE "^\s*at |^$" "$out/vkw-wall.txt" | tail -40 ;;
    vk-wall-deep)
      # the attention variants where every chunk has positions (a variant that wins at pos 0 must not lose here)
      timeout 300 deno run -A --no-check bench/kernels.ts --shape qwen2.5-0.5b --wall --pos 1024 --backend \
        ptx,vulkan,vulkan:no-attention-fuse,vulkan:attention-team-count,vulkan:attention-skip-empty,vulkan:splits8,wgpu,wgpu:attention-skip-empty \
        > "$out/vkw-wall-deep.txt" 2>&1; echo "wall-deep exit $?" >> "$out/vkw-wall-deep.txt"
      grep -vE "^\s*at |^$" "$out/vkw-wall-deep.txt" | tail -12 ;;
    vk-profile)
      timeout 480 deno run -A --no-check bench/kernels.ts --shape qwen2.5-0.5b,llama-3.2-1b --backend ptx,vulkan,wgpu \
        --out "$out/vkw-profile.json" > "$out/vkw-profile.txt" 2>&1; echo "profile exit $?" >> "$out/vkw-profile.txt"
      grep -E "steps, kernels|stream read|^by kind|^sum of|^(gemv|attention|argmax|gather|elementwise) |exit" "$out/vkw-profile.txt" | head -60 ;;
    wgpu-host)
      timeout 420 deno run -A --no-check bench/gap.ts --shape qwen2.5-0.5b,llama-3.2-1b --backend wgpu --tokens 64 \
        > "$out/vkw-gap-wgpu.txt" 2>&1; echo "gap exit $?" >> "$out/vkw-gap-wgpu.txt"
      grep -E "device stats per step|engine again|rec bare|rec queued|exit" "$out/vkw-gap-wgpu.txt" | head -20 ;;
    vk-goal)
      for b in ptx vulkan wgpu; do
        timeout 180 deno run -A --no-check bench/decode.ts --shape llama-3.2-1b,qwen2.5-0.5b --tokens 64 --no-eager --deep 0 \
          --backend "$b" > "$out/vkw-goal-$b.txt" 2>&1; echo "$b exit $?" >> "$out/vkw-goal-$b.txt"
        grep -E "replay at pos|exit" "$out/vkw-goal-$b.txt"
      done ;;
    bench)
      timeout ${BENCH_TIMEOUT:-560} deno run -A --no-check bench/decode.ts --shape ${SHAPES:-stories260K,llama-3.2-1b,qwen2.5-0.5b,llama-3-8b} --backend ptx \
        --tokens 128 --out "$out/decode-ptx.json" > "$out/decode-ptx.txt" 2>&1; echo "bench exit $?" >> "$out/decode-ptx.txt"
      grep -v "^\s*$" "$out/decode-ptx.txt" | tail -12 ;;
  esac
done
