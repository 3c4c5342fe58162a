// Lowering of attention: over a contiguous cache (flash on cooperative matrices for prefill on Vulkan, the staged
// flash kernel for long prefill, flash on tensor cores, split-K flash-decoding with a separate or fused combine,
// or one kernel) and over a paged cache.
import { byteSize } from "../../graph/dtype.ts";
import type { Node } from "../../graph/ir.ts";
import type { Unit } from "../../graph/plan.ts";
import type { TargetSet } from "../target.ts";
import type { Binding, Work } from "../program.ts";
import type { Kernel } from "../ir.ts";
import * as lib from "../lib/mod.ts";
import type { CompileOptions, LowerContext } from "../lower.ts";
import { fusesTails, itype, LoweringError } from "./common.ts";
import { COOP_MIN_ROWS, MMA_MIN_ROWS, mmaSplitDefault, STAGED_MIN_ROWS } from "./matmul.ts";

/**
 * Chunks for split-K attention: enough (row, head, chunk) teams to fill a wide GPU, about 1024 warps, and
 * about cap / 2 for a long capacity (so a team's share of a full cache stays near 64-128 positions), at most
 * 64 (the combine holds every chunk's (m, l) in registers) and chunks of at least 64 positions of the
 * capacity; none on one-lane targets (the JS device) or when rows x heads already fill the GPU. Measured on
 * the H200 (1B shape, cap 8192): 64 chunks against 32 cost ~40 µs per token at pos 0 and save ~110 at 4100.
 */
function attentionSplitCount(caps: TargetSet["caps"], cap: number, items: number): number {
  if (!caps.subgroups || caps.subgroupSize < 8 || items >= 512) return 1;
  return Math.max(1, Math.min(64, Math.ceil(cap / 64), Math.ceil(Math.max(1024, cap / 2) / items)));
}

/**
 * Decode attention over a contiguous cache on MMA tiles where it fits (CompileOptions.decodeFlash), its K/V through
 * a cp.async pipeline (DECODE_FLASH_STAGES; without staging, each trip's successor's K/V loaded ahead unless
 * attentionPrefetch says otherwise). H200, session 10
 * (bench/kernels.ts --wall --backend ptx,ptx:decode-flash,ptx:decode-flash+attention-prefetch, ms a token, 64
 * chunks): at cap 8192 pos 4100 the 1B 0.996 / 0.973 / 0.963, qwen2.5-0.5b 0.766 / 0.771 / 0.746, the 8B 4.643 /
 * 4.525 / 4.471; at pos 64 the 1B 0.873 / 0.873 / 0.868, qwen 0.651 / 0.643 / 0.640; at cap 2048 pos 0 (64 chunks
 * against the subgroup kernel's 32) the 1B 0.832 / 0.866 / 0.866, qwen 0.602 / 0.624 / 0.628, hence
 * flashDecodeSplits' cap / 64 bound. 32 chunks at pos 4100 were slower (1B 1.047), so were 128 and 256. With that
 * bound and prefetch, against the subgroup kernel (ptx,ptx:no-decode-flash, one call): cap 2048 pos 0 1B 0.839 /
 * 0.830, qwen 0.596 / 0.601; cap 8192 pos 4100 1B 0.960 / 0.997, qwen 0.744 / 0.755.
 */
const DECODE_FLASH_DEFAULT = true;
/**
 * The MMA decode attention's cp.async stages (FlashDecodeShape.stages) where the target has them. H200, session 10
 * (bench/kernels.ts --wall --backend ptx,ptx:attention-stages2,ptx:attention-stages3, prefetch the baseline, ms a
 * token): cap 8192 pos 4100 1B 0.976 / 0.928 / 0.922, qwen2.5-0.5b 0.754 / 0.710 / 0.691; cap 2048 pos 0 (3 stages)
 * 1B 0.851 / 0.833, qwen 0.599 / 0.610. The same bits either way. Serving keeps direct loads: at 32 rows the 8B
 * entry took 8.49 ms direct, 8.64 / 8.59 / 8.62 with 2 / 3 / 4 stages (bench/serve_kernels.ts --tune fpN).
 */
const DECODE_FLASH_STAGES = 3;

/**
 * Chunks of the MMA decode attention: about 1024 warps (one per row, KV head and chunk) to fill a wide GPU, at least
 * 64 positions of the capacity each (each chunk's partial costs the combine), at most 64 (the combine's registers).
 */
function flashDecodeSplits(cap: number, warps: number): number {
  return Math.max(1, Math.min(64, Math.ceil(cap / 64), Math.ceil(1024 / warps)));
}

/**
 * Query heads per attention team (AttentionShape.group): opts.attentionGroup where it divides heads / kvHeads,
 * else one. Grouping loads each K/V row once per KV head instead of once per query head, but the H200 measured
 * nothing for it (session 8, bench/serve_kernels.ts --tune default,g2,g4 and bench/kernels.ts --wall ptx:groupN):
 * serving at 32 rows and pos 576, 4 heads per team took 64.6 against 60.2 µs a layer (8B) and 39.6 against 36.5
 * (1B), and decode at cap 8192, pos 4100, 2 heads per team 1.037 against 0.997 ms a token. So one by default.
 */
export function attentionGroup(opts: { attentionGroup?: number }, group: number): number {
  const g = opts.attentionGroup ?? 1;
  return group % g === 0 ? g : 1;
}

/**
 * Decode at a short context (llm/steps.ts: a step's second entry, used while its row sees at most `reach`
 * positions). Where split-K decode attention is two kernels (no dispatch gap: PTX's MMA flash decode and its
 * combine), the fused kernel (lib.attentionFused) is one while a row's chunks with positions all fall in its first
 * workgroup, which combines them itself (lib.attentionLocalReach); past that it is slower (a device-wide count,
 * no tensor cores). H200, `bench/kernels.ts --wall --backend ptx,ptx:attention-fuse+no-decode-flash --pos
 * 0,128,256,512` (session 25, cap 2048, ms a token): qwen2.5-0.5b (reach 256) 0.610 / 0.583, 0.625 / 0.590,
 * 0.623 / 0.663, 0.631 / 0.677; the 1B (reach 256) 0.826 / 0.802, 0.835 / 0.812, 0.833 / 0.863; the 8B (reach
 * 128) q4_k_m 1.995 / 1.954 at pos 0, 2.021 / 2.073 at 256; bf16 4.106 / 4.034, 4.124 / 4.217. `bench/decode.ts
 * --tokens 64 --no-eager --ahead 8 --short-decode on,off` (positions 0-63), tok/s: qwen2.5-0.5b 1757.3 / 1638.5,
 * the 1B 1241.9 / 1195.5, the 8B 252.9 / 241.4.
 */
export const SHORT_DECODE: CompileOptions = { attentionFuse: true, decodeFlash: false };

/**
 * The positions a decode row may see while SHORT_DECODE's entry is the faster one; 0 where the step's decode
 * attention is not the MMA flash decode and its combine (the case measured: targets with a dispatch gap fuse
 * already, and the subgroup partials' case was not timed), or the fused kernel has no local combine. The same split
 * count and team as the lowering takes under SHORT_DECODE with default options.
 */
export function shortDecodeReach(caps: TargetSet["caps"], s: { heads: number; kvHeads: number; hd: number; cap: number; kv: "f32" | "f16" | "bf16" }): number {
  if (caps.dispatchGap || !caps.mma || lib.flashDecodeFits(caps, s) !== "") return 0;
  const splits = Math.min(attentionSplitCount(caps, s.cap, s.heads), s.cap);
  if (splits <= 1) return 0;
  return lib.attentionLocalReach(caps, { rows: 1, ...s, splits });
}

/** Largest scratch (each of K and V as f16 halves) the staged flash attention takes; past it, flash.ts. */
const FLASH_STAGED_MAX_BYTES = 256 * 2 ** 20;

/** Attention over a contiguous cache: staged flash, flash (split or not), split-K with a combine, or one kernel. */
export function lowerAttention(cx: LowerContext, u: Extract<Unit, { k: "attention" }>): void {
  const { nodes, caps, opts, buf, bind, kernel, bytesOfIds } = cx;
  const n = nodes[u.node], [q, k, v] = n.inputs;
  const [R, H, D] = nodes[q].shape, [C, KVH] = nodes[k].shape;
  if (nodes[v].shape[2] !== D || nodes[q].dtype !== "f32") throw new LoweringError("attention needs f32 q and Dv == D");
  const kv = nodes[k].dtype;
  if ((kv !== "f32" && kv !== "f16" && kv !== "bf16") || nodes[v].dtype !== kv) throw new LoweringError(`attention over ${kv} K and ${nodes[v].dtype} V`);
  const shape = { rows: R, heads: H, kvHeads: KVH, hd: D, cap: C, kv, pos: itype(nodes[u.pos].dtype), scale: n.attrs.scale, window: u.window, softcap: n.attrs.softcap, unroll: opts.attentionUnroll, live: opts.attentionLive, spread: opts.attentionSpread, prefetch: opts.attentionPrefetch };
  const work = { bytes: bytesOfIds([q, k, v, n.id]), flops: 4 * R * H * C * D };
  // flash attention's operands are rounded as the matmuls' x are
  const fsplit = opts.flashSplit ?? opts.mmaSplit ?? mmaSplitDefault(opts.mma ?? "auto");
  const staged = { ...shape, ...opts.flashLayout, split: fsplit };
  // prefill chunks on cooperative matrices (Vulkan), as the matmuls (CompileOptions.coop); operands rounded once,
  // so not where split operands are asked for
  if ((opts.flash ?? true) && (opts.mma ?? "auto") === "auto" && (opts.coop ?? true) && !fsplit && R >= (opts.coopMinRows ?? COOP_MIN_ROWS) &&
    lib.coopFlashFits(caps, shape)) {
    kernel(lib.coopFlash(caps, { ...shape, layout: opts.coopFlashLayout }), [bind(q), bind(k), bind(v), bind(u.pos), bind(n.id)], work);
    return;
  }
  if ((opts.flash ?? true) && (opts.mma ?? "auto") !== "off" && (opts.flashStaged ?? true) && R >= (opts.stagedMinRows ?? STAGED_MIN_ROWS) &&
    lib.flashStagedFits(caps, staged) && lib.flashPrepBytes(staged) <= FLASH_STAGED_MAX_BYTES) {
    // K/V to f16 halves once per chunk and layer (scratch every layer reuses), then the staged kernel
    const bytes = lib.flashPrepBytes(staged);
    const [kw, vw] = ["flash-k-halves", "flash-v-halves"].map((name): Binding => ({ buffer: buf("arena", name, bytes), offset: 0, bytes }));
    kernel(lib.flashPrepKV(caps, staged), [bind(k), bind(v), bind(u.pos), kw, vw], { bytes: bytesOfIds([k, v]) + 2 * bytes, flops: 0 });
    kernel(lib.flashStaged(caps, staged), [bind(q), kw, vw, bind(u.pos), bind(n.id)], work);
    return;
  }
  if ((opts.flash ?? true) && (opts.mma ?? "auto") !== "off" && R >= MMA_MIN_ROWS && lib.flashFits(caps, shape)) {
    // a warp per (16 rows, head) is latency-bound: split the positions until ~4096 warps fill the GPU
    const warps = Math.ceil(R / 16) * H;
    const fs = opts.flashSplits ?? Math.max(1, Math.min(16, Math.ceil(4096 / warps), Math.ceil(C / 64)));
    if (fs <= 1) {
      kernel(lib.flashAttention(caps, { ...shape, split: fsplit }), [bind(q), bind(k), bind(v), bind(u.pos), bind(n.id)], work);
      return;
    }
    const partial = lib.flashAttention(caps, { ...shape, split: fsplit, splits: fs });
    return partialsThenCombine(cx, { rows: R, heads: H, hd: D, splits: fs }, partial, [bind(q), bind(k), bind(v), bind(u.pos)], n.id, work);
  }
  if ((opts.decodeFlash ?? DECODE_FLASH_DEFAULT) && R < MMA_MIN_ROWS && !lib.flashDecodeFits(caps, shape)) {
    // a warp per (row, KV head, chunk) on MMA tiles (kernels/lib/flash_decode.ts), then the combine
    const fs = Math.min(opts.attentionSplits ?? flashDecodeSplits(C, R * KVH), C);
    const stages = opts.attentionStages ?? (caps.staging ? DECODE_FLASH_STAGES : 0), prefetch = opts.attentionPrefetch ?? true;
    const partial = lib.flashDecodePartial(caps, { ...shape, splits: fs, prefetch, stages });
    return partialsThenCombine(cx, { rows: R, heads: H, hd: D, splits: fs }, partial, [bind(q), bind(k), bind(v), bind(u.pos)], n.id, work);
  }
  const splits = Math.min(opts.attentionSplits ?? attentionSplitCount(caps, C, R * H), C);
  const group = attentionGroup(opts, H / KVH);
  if (splits <= 1) {
    kernel(lib.attention(caps, { ...shape, group }), [bind(q), bind(k), bind(v), bind(u.pos), bind(n.id)], work);
    return;
  }
  // Flash-decoding: chunks of positions in parallel, then a combine. Empty chunks (past pos) cost nothing.
  if (fusesTails(cx) && !lib.attentionFusable(caps, { rows: R, heads: H, splits, wg: opts.attentionWorkgroup })) {
    // the partials and the counters persist between steps (the counters are zero between dispatches): State,
    // one per size, zeroed when made and by resetState (a step that failed midway may leave a count)
    const bytes = lib.attentionFusedBytes({ rows: R, heads: H, hd: D, splits });
    const part: Binding = { buffer: buf("state", `attention-partials:${bytes}`, bytes), offset: 0, bytes };
    const fs = { ...shape, splits, count: opts.attentionCount, skipEmpty: opts.attentionSkipEmpty, local: opts.attentionLocal, wg: opts.attentionWorkgroup };
    const inputs = [bind(q), bind(k), bind(v), bind(u.pos), part];
    kernel(lib.attentionFused(caps, fs), [...inputs, bind(n.id)], work);
    cx.combine = { node: n.id, step: cx.steps.length - 1, s: { rows: R, heads: H, hd: D, splits }, part, fused: { shape: fs, inputs, work } };
    return;
  }
  partialsThenCombine(cx, { rows: R, heads: H, hd: D, splits }, lib.attentionPartial(caps, { ...shape, splits, group }), [bind(q), bind(k), bind(v), bind(u.pos)], n.id, work);
}

/** A split-K partial kernel into arena scratch [rows * heads, splits, hd + 2] (its last binding), then attentionCombine into out. */
function partialsThenCombine(
  cx: LowerContext, s: { rows: number; heads: number; hd: number; splits: number }, partial: Kernel, inputs: Binding[], node: number, work: Work,
): void {
  const out = cx.bind(node);
  const bytes = s.rows * s.heads * s.splits * (s.hd + 2) * 4;
  const part: Binding = { buffer: cx.buf("arena", "attention-partials", bytes), offset: 0, bytes };
  cx.kernel(partial, [...inputs, part], work);
  cx.kernel(lib.attentionCombine(cx.caps, s), [part, out], { bytes: 2 * bytes, flops: bytes });
  cx.combine = { node, step: cx.steps.length - 1, s, part };
}

/**
 * Paged attention on MMA tiles where it fits (CompileOptions.pagedFlash). H200, session 10 (bench/serve_kernels.ts
 * --pos 576 --tune default,noflash, device ms at 1 / 32 rows): 8B 5.55 / 8.79 against 5.71 / 9.37 (the attention
 * 33.6 against 54.6 µs a layer at 32 rows), 1B 1.45 / 2.29 against 1.51 / 2.42, qwen2.5-0.5b 1.77 / 2.75 against
 * 1.80 / 3.06; at pos 1000 the 8B 9.35 against 10.55 at 32 rows.
 */
const PAGED_FLASH_DEFAULT = true;

/** Attention over a paged cache (block table, pool of K/V rows): one kernel, or partials and a combine. */
export function lowerPagedAttention(cx: LowerContext, n: Node): void {
  const { nodes, caps, bind, kernel, bytesOfIds } = cx;
  const ins = n.inputs, out = bind(n.id);
  const [q, k, v, tb, ps] = ins;
  const [R, H, D] = nodes[q].shape, [P, KVH] = nodes[k].shape;
  if (nodes[v].shape[2] !== D) throw new LoweringError("paged attention needs Dv == D");
  const kv = nodes[k].dtype;
  if ((kv !== "f32" && kv !== "f16" && kv !== "bf16") || nodes[v].dtype !== kv) throw new LoweringError(`paged attention over ${kv} K/V`);
  const T = nodes[tb].shape[1] * n.attrs.block!;
  const shape = {
    rows: R, heads: H, kvHeads: KVH, hd: D, poolRows: P, block: n.attrs.block!, maxBlocks: nodes[tb].shape[1],
    kv, pos: itype(nodes[ps].dtype), table: itype(nodes[tb].dtype), scale: n.attrs.scale, window: n.attrs.window, softcap: n.attrs.softcap,
    unroll: cx.opts.pagedUnroll, tableInLanes: cx.opts.pagedTableInLanes, prefetch: cx.opts.attentionPrefetch,
  } as const;
  const group = attentionGroup(cx.opts, H / KVH);
  const bindings = [bind(q), bind(k), bind(v), bind(tb), bind(ps)];
  const work = { bytes: bytesOfIds([q, tb, ps, n.id]) + 2 * R * T * KVH * D * byteSize(kv, 1), flops: 4 * R * H * T * D };
  // Split count from the table length alone, never from the rows: a row's order must not depend on the batch.
  const splits = Math.min(cx.opts.attentionSplits ?? lib.attentionSplits(caps, T), T);
  const flash = (cx.opts.pagedFlash ?? PAGED_FLASH_DEFAULT) && !lib.flashDecodeFits(caps, shape);
  if (splits <= 1 && !flash) return kernel(lib.pagedAttention(caps, { ...shape, group }), [...bindings, out], work);
  const partial = flash ? lib.pagedFlashPartial(caps, { ...shape, splits, stages: cx.opts.attentionStages }) : lib.pagedAttentionPartial(caps, { ...shape, splits, group });
  partialsThenCombine(cx, { rows: R, heads: H, hd: D, splits }, partial, bindings, n.id, work);
}
