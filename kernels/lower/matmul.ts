// Lowering of matmuls: the choice among the tensor-core kernels (MMA, staged MMA for prefill), the tiled FMA
// kernel and matmul.ts by rows, options and target, with the thresholds that choice uses; plus the matmul node
// and the plan's matmul_residual unit. Batch-1 gemv units are kernels/lower/gemv.ts.
import { type Node, numel } from "../../graph/ir.ts";
import { type Plan, soleReads, type Unit, unitInputs, viewSource } from "../../graph/plan.ts";
import { isBlock } from "../../graph/dtype.ts";
import type { Caps } from "../target.ts";
import type { Binding, Work } from "../program.ts";
import * as lib from "../lib/mod.ts";
import { isQType } from "../lib/dequant.ts";
import { batchedMatmul } from "../lib/generic.ts";
import type { LowerContext } from "../lower.ts";
import { etype, last, LoweringError } from "./common.ts";
import { elementwiseGroup, type GroupExpr, groupExpr } from "./group.ts";
import { isElementwise } from "../../graph/ops.ts";

/** Rows from which "auto" picks the tensor-core matmul: below, the FMA kernel reads W about as fast. */
export const MMA_MIN_ROWS = 16;
/** Rows from which "auto" takes the cooperative-matrix matmul (caps.coop), as MMA_MIN_ROWS for PTX's tiles. */
export const COOP_MIN_ROWS = 16;
/** Rows from which prefill MMA matmuls and flash attention run on the staged kernels (blocks of 64+ rows). */
export const STAGED_MIN_ROWS = 128;

/**
 * Whether x enters the MMA as hi + lo bf16 parts by default (CompileOptions.mmaSplit): in serving entries ("all"),
 * not in prefill chunks ("auto"), where x is rounded once to bf16 as llama.cpp (its CPU and CUDA paths convert
 * the activations of a bf16 matmul to bf16) and PyTorch do. One MMA per tile instead of two: on the H200 the
 * staged kernel ran 2048 x 14336 x 4096 in 681 µs against 1197 split (bench/mma.ts, session 6).
 */
export function mmaSplitDefault(mode: "auto" | "all" | "off"): boolean {
  return mode === "all";
}

/**
 * Rows from which the tiled matmul replaces matmul.ts (which reads W once per 8 rows). On the H200 (BERT-base
 * f32, ptx) the tiled kernel was 2x faster at 4096 and 32768 rows but 2x slower at 128 (then with 64 x 64 tiles
 * only: 24 workgroups); a 512-row prefill chunk of the 1B on Vulkan took 58 ms tiled vs 175 ms in 32-row chunks.
 */
export const TILED_MIN_ROWS = 256;

/**
 * Whether "auto" takes the tiled matmul on this target: not where subgroups are one lane (the JS device, a CPU
 * running invocations one by one: matmul.ts runs there without barriers, ~3x faster than the tiled kernel's
 * lock-step emulation).
 */
export function tiledAuto(caps: Caps): boolean {
  return !(caps.subgroups && caps.subgroupSize <= 1);
}

/**
 * Whether matmulSteps runs this matmul on tensor cores: bf16 weights only (with f16 weights x would enter the MMA
 * as f16, and activations past 65504, the MLP's down-projection input in some models, would overflow; the FMA
 * kernel keeps them in f32).
 */
function takesMma<S extends { n: number; k: number; batch: number; w: string }>(caps: Caps, opts: LowerContext["opts"], s: S): s is S & { w: "bf16" } {
  const mode = opts.mma ?? "auto";
  return mode !== "off" && s.w === "bf16" && lib.mmaMatmulFits(caps, s.w, s.n, s.k) && (mode === "all" || s.batch >= MMA_MIN_ROWS);
}

/**
 * The staged layout matmulSteps runs a matmul over GGUF blocks in on tensor cores (CompileOptions.mmaBlocks), or
 * undefined where it does not: prefill chunks ("auto", x rounded once) from MMA_MIN_ROWS rows (where bf16 weights
 * take it from 128), and, with mmaBlocks "all", every serving entry ("all") in one layout of n and k alone
 * (SERVING_BLOCKS): a row's sums then run in the same order at every entry size (mma_staged.ts: the order depends on
 * k and the split only), which the batch invariance asks. By default serving entries take registerBlocks' kernel.
 */
function stagedBlocks(caps: Caps, opts: LowerContext["opts"], s: { n: number; k: number; batch: number; w: string }, split: boolean): lib.StagedLayout | undefined {
  const mode = opts.mma ?? "auto";
  const on = opts.mmaBlocks ?? true;
  if (!isQType(s.w) || mode === "off" || !on || (mode === "all" && on !== "all") || !(opts.staged ?? true)) return undefined;
  // a prefill chunk that asks for f32-level operands (mmaSplit) keeps the FMA kernel: the weights would be rounded
  if (mode === "auto" && (s.batch < MMA_MIN_ROWS || split)) return undefined;
  const l = mode === "all" ? SERVING_BLOCKS(!!caps.wgmma) : lib.stagedBlockLayout(s.batch, s.n, s.k, !!caps.wgmma);
  return lib.stagedMatmulFits(caps, "bf16", s.n, s.k, l, split, s.w) ? l : undefined;
}

/**
 * Whether a serving entry ("all") runs this matmul over GGUF blocks on the register-operand MMA kernel (mma_matmul.ts
 * `blocks`): each lane decodes its chunks once for every row tile, x as hi + lo, the K split a function of n, k and
 * the block type, so a row's sums run in one order at every entry size (the batch invariance). Default where the
 * target has MMA tiles; mmaBlocks false keeps the FMA kernel, "all" the staged kernel's serving layout.
 */
function registerBlocks(caps: Caps, opts: LowerContext["opts"], s: { n: number; k: number; w: string }): s is { n: number; k: number; w: lib.QType } {
  const on = opts.mmaBlocks ?? true;
  return (opts.mma ?? "auto") === "all" && on === true && isQType(s.w) && lib.mmaMatmulFits(caps, "bf16", s.n, s.k, s.w);
}

/**
 * Workgroups splitting k in a serving entry over blocks on the staged kernel (mmaBlocks "all"; StagedMatmulShape
 * .splitK), a function of n and k alone (the invariance): doubled from 1 while the n / 64 blocks times the splits stay
 * under two waves of ~132 SMs and each split keeps at least 8 of k's 64-value slices (two trips). H100, 8B Q4_K_M
 * steps at batch 1 / 32: 31.6 / 27.0 ms unsplit, 24.4 / 19.3 split (session 40; registerBlocks' kernel 5.6 / 11.5).
 */
export function servingSplits(n: number, k: number): number {
  const KT = k / 64, blocks = Math.ceil(n / 64);
  let s = 1;
  while (blocks * s < 264 && KT % (2 * s) === 0 && KT / (2 * s) >= 8) s *= 2;
  return s;
}

/**
 * The serving entries' block layout on the staged kernel: 64 x 64 blocks, whose grid of n / 64 blocks a decode batch
 * of up to 64 rows fills alone (warpgroup MMA where the target has it; one choice per target, never per entry size).
 */
const SERVING_BLOCKS = (wgmma: boolean): lib.StagedLayout =>
  wgmma ? { bm: 64, bn: 64, bk: 64, stages: 6, wm: 1, wn: 1, wg: true, wgPending: 1 } : { bm: 64, bn: 64, bk: 64, stages: 3, wm: 2, wn: 2 };

/**
 * The layout matmulSteps runs this matmul in on cooperative matrices (caps.coop: Vulkan), or undefined where it
 * does not: bf16 or GGUF block weights (dequantized to bf16 in the kernel), prefill chunks ("auto") of at least
 * coopMinRows rows (serving entries, "all": coopServingFor). The kernel rounds x (and block weights) once to
 * bf16: where mmaSplit asks for the hi + lo parts' f32-level precision, the FMA kernel keeps the matmul.
 * opts.coopLayout where it fits, else coopLayout's.
 */
function coopLayoutFor(caps: Caps, opts: LowerContext["opts"], s: { n: number; k: number; batch: number; w: string }): lib.CoopLayout | undefined {
  if ((opts.mma ?? "auto") !== "auto" || !(opts.coop ?? true) || opts.mmaSplit === true || s.batch < (opts.coopMinRows ?? COOP_MIN_ROWS)) return undefined;
  if (opts.coopLayout && lib.coopMatmulFits(caps, s.w, s.n, s.k, opts.coopLayout)) return opts.coopLayout;
  return lib.coopLayout(caps, s.batch, s.n, s.k, s.w);
}

/**
 * Whether a serving entry ("all") runs this matmul on cooperative matrices (caps.coop: Vulkan; kernels/lib/
 * coop_serving.ts): bf16 or GGUF block weights the kernel takes, unless opts.coopServing is false. Its K split
 * follows n, k and the weight type alone, so every entry size sums a row in one order.
 */
function coopServingFor(caps: Caps, opts: LowerContext["opts"], s: { n: number; k: number; w: string }): boolean {
  return (opts.mma ?? "auto") === "all" && (opts.coop ?? true) && opts.coopServing !== false && !!caps.coop && lib.coopServingFits(caps, s.w, s.n, s.k);
}

/**
 * The elementwise groups an MMA matmul computes in its x preparation instead of reading them (CompileOptions
 * .mmaPrepFuse, default on): a group of f32 values of x's shape, from full-length f32 inputs, whose value only the
 * next unit reads, as the x of a matmul on the tensor-core path (in a Llama prefill chunk, the SiLU product of
 * gate and up before the down projection). Its kernel and the store and reload of its value go (compileGraph plans
 * again with no storage for it: PlanOptions.unstored); the bits do not change (the same expression, evaluated in
 * f32, then rounded as x is). The reader must be the next unit: the
 * group's inputs are freed in the arena after the group's unit (graph/plan.ts), and only the reader's own
 * outputs may take their place, which its preparation has read by then.
 */
export function mmaPrepGroups(p: Plan, caps: Caps, opts: LowerContext["opts"]): Map<number, GroupExpr> {
  const nodes = p.graph.nodes;
  const out = new Map<number, GroupExpr>();
  if (opts.mmaPrepFuse === false) return out;
  const source = (id: number) => viewSource(nodes, id);
  const sole = soleReads(p);
  p.units.forEach((unit, i) => {
    const next = p.units[i + 1];
    // a fused group, or one elementwise node (lowered as a group of one)
    const u = unit.k === "node" && isElementwise(nodes[unit.node].op) ? elementwiseGroup(nodes[unit.node]) : unit;
    if (u.k !== "group" || !next) return;
    const root = nodes[u.group.root];
    if (root.dtype !== "f32" || !sole.has(root.id)) return;
    const mm = next.k === "matmul_residual" ? nodes[next.matmul] : next.k === "node" && nodes[next.node].op === "matmul" ? nodes[next.node] : undefined;
    // x, and nothing else the reader binds (a residual, the weight)
    if (!mm || source(mm.inputs[0]) !== root.id || unitInputs(p.graph, next).filter((id) => source(id) === root.id).length !== 1) return;
    const wn = nodes[mm.inputs[1]], K = root.shape[root.shape.length - 1];
    if (wn.shape.length !== 2 || wn.shape[1] !== K) return;
    const s = { n: wn.shape[0], k: K, batch: numel(root.shape) / K, w: wn.dtype };
    if (!takesMma(caps, opts, s) && !coopLayoutFor(caps, opts, s) && !coopServingFor(caps, opts, s) && !registerBlocks(caps, opts, s) && !stagedBlocks(caps, opts, s, opts.mmaSplit ?? mmaSplitDefault(opts.mma ?? "auto"))) return;
    const g = groupExpr(nodes, u);
    if (g.inputs.every((x) => x.type === "f32" && x.len === numel(root.shape))) out.set(root.id, g);
  });
  return out;
}

/**
 * y = x W^T (+ bias / residual), `rest` the bindings after x's (w, bias or residual, y): on tensor cores where opts.mma and
 * the target allow (PTX's MMA tiles, or cooperative matrices: x made into MMA words once by a small kernel, into a
 * scratch buffer every such matmul reuses: steps run in order; computed there from its inputs when x is a group
 * mmaPrepGroups chose), else the FMA kernel.
 */
function matmulSteps(cx: LowerContext, s: lib.MatmulShape & { batch: number }, x: number, rest: Binding[], work: Work): void {
  const { caps, opts, buf, kernel, bind, bytesOfIds } = cx;
  // x bound only where a kernel reads it: a value the preparation computes has no storage (Plan unstored)
  const bindings = () => [bind(x), ...rest];
  const mode = opts.mma ?? "auto";
  const coop = coopLayoutFor(caps, opts, s);
  const serving = !coop && coopServingFor(caps, opts, s);
  const regBlocks = !coop && !serving && registerBlocks(caps, opts, s);
  const blocks = coop || serving || regBlocks ? undefined : stagedBlocks(caps, opts, s, opts.mmaSplit ?? mmaSplitDefault(mode));
  if (coop || serving || regBlocks || blocks || takesMma(caps, opts, s)) {
    // x in MMA words of the weights' type (bf16 here: PTX's tiles take bf16 weights; blocks are dequantized to bf16)
    const w = coop || serving || regBlocks || blocks ? "bf16" : s.w as "bf16";
    const split = coop ? false : opts.mmaSplit ?? mmaSplitDefault(mode);
    // the serving kernel loads x's 16-row tiles whole: room for the last one's rows past the batch; with eights its
    // tiles are 8 rows' hi and lo words (mmaPrepX eights)
    const want = typeof opts.coopServing === "object" ? opts.coopServing : undefined;
    const eights = !!serving && lib.coopServingEights(split, want);
    const bytes = serving ? lib.xWordsBytes(s.batch, s.k, split, eights) : (split ? 2 : 1) * s.batch * s.k * 2;
    const xw: Binding = { buffer: buf("arena", "mma-x-words", bytes), offset: 0, bytes };
    const key = `${x}:${s.batch}:${s.k}:${w}:${split}:${eights}`;
    if (cx.mmaWords.key !== key) {
      const g = cx.prepGroups.get(viewSource(cx.nodes, x));
      const prep = lib.mmaPrepX(caps, { m: s.batch, k: s.k, ab: w, split, eights, ew: g && { inputs: g.inputs, expr: g.expr } });
      const ins = g ? g.ids.map(bind) : [bind(x)];
      kernel(prep, [...ins, xw], { bytes: (g ? bytesOfIds(g.ids) : s.batch * s.k * 4) + bytes, flops: s.batch * s.k });
      cx.mmaWords.key = key;
    }
    if (coop) {
      kernel(lib.coopMatmul(caps, { ...s, layout: coop, prepared: true }), [xw, ...rest], work);
      return;
    }
    if (serving) {
      kernel(lib.coopServing(caps, { ...s, split, layout: want }), [xw, ...rest], work);
      return;
    }
    if (blocks) {
      const shape = { ...blocks, n: s.n, k: s.k, batch: s.batch, w, blocks: s.w as lib.QType, split };
      const splits = mode === "all" ? servingSplits(s.n, s.k) : 1;
      if (splits === 1) {
        kernel(lib.stagedMatmul(caps, { ...shape, bias: s.bias, residual: s.residual }), [xw, ...rest], work);
        return;
      }
      // split over k, then the partials summed in split order with the bias and residual (rest: w, bias or residual, y)
      const pb = splits * s.batch * s.n * 4;
      const part: Binding = { buffer: buf("arena", "mma-partials", pb), offset: 0, bytes: pb };
      kernel(lib.stagedMatmul(caps, { ...shape, splitK: splits }), [xw, rest[0], part], work);
      kernel(lib.stagedCombine(caps, { n: s.n, batch: s.batch, splits, bias: s.bias, residual: s.residual }), [part, ...rest.slice(1)], { bytes: pb + s.batch * s.n * 4, flops: pb / 4 });
      return;
    }
    const staged = opts.stagedLayout ?? lib.stagedLayout(s.batch, s.n, s.k, split, !!caps.wgmma);
    if (mode === "auto" && (opts.staged ?? true) && s.batch >= (opts.stagedMinRows ?? STAGED_MIN_ROWS) &&
      lib.stagedMatmulFits(caps, s.w, s.n, s.k, staged, split)) {
      const k = lib.stagedMatmul(caps, { ...staged, n: s.n, k: s.k, batch: s.batch, w, bias: s.bias, residual: s.residual, split });
      kernel(k, [xw, ...rest], work);
      return;
    }
    // serving entries: a K split of the shape alone (the same at every entry: invariance), tiles by rows
    const q = regBlocks ? s.w as lib.QType : undefined;
    const layout = mode === "auto" ? opts.mmaLayout : lib.mmaServingLayout(s.n, s.k, s.batch, opts.mmaServing, q);
    const shape: lib.MmaMatmulShape = { ...layout, n: s.n, k: s.k, batch: s.batch, w, bias: s.bias, residual: s.residual, split, prepared: true, blocks: q };
    if (q) delete shape.stages;
    // a pipeline the target cannot stage, or whose stages do not fit its shared memory, loads directly (the same bits)
    while (shape.stages && (!caps.staging || lib.mmaSharedBytes(caps, shape) > caps.maxSharedBytes)) shape.stages = shape.stages > 2 ? shape.stages - 1 : 0;
    const k = lib.mmaMatmul(caps, shape);
    kernel(k, [xw, ...rest], work);
    return;
  }
  const tiled = opts.tiled ?? "auto";
  if ((tiled === true || (tiled === "auto" && tiledAuto(caps))) &&
    s.batch >= (opts.tiledMinRows ?? TILED_MIN_ROWS) && lib.tiledLayout(caps, s.w, s.batch, s.n)) {
    const layout = opts.tiledTile && { ...opts.tiledTile, bk: lib.tiledSlice(s.w) };
    const fits = layout && lib.tiledFits(caps, layout);
    kernel(lib.tiledMatmul(caps, { ...s, layout: fits ? layout : undefined }), bindings(), work);
    return;
  }
  kernel(lib.matmul(caps, { ...s, tile: opts.matmulTile }), bindings(), work);
}

/** A matmul whose bias or residual add the plan fused into it (graph/plan.ts matmul_residual). */
export function lowerMatmulResidual(cx: LowerContext, u: Extract<Unit, { k: "matmul_residual" }>): void {
  const { nodes, bind, bytesOfIds } = cx;
  const mm = nodes[u.matmul], [x, w] = mm.inputs, wn = nodes[w];
  const K = wn.shape[1], N = wn.shape[0];
  const extra = u.residual ?? u.bias!;
  matmulSteps(cx, { n: N, k: K, batch: numel(mm.shape) / N, w: wn.dtype as lib.WType, residual: u.residual !== undefined, bias: u.bias !== undefined }, x,
    [bind(w), bind(extra), bind(u.add)], { bytes: bytesOfIds([x, w, extra, u.add]), flops: 2 * numel(mm.shape) * K });
}

/** A matmul node: 2-D weights through matmulSteps, anything else (batched, both operands computed) the generic kernel. */
export function lowerMatmul(cx: LowerContext, n: Node): void {
  const { nodes, caps, bind, kernel, bytesOfIds } = cx;
  const ins = n.inputs, out = bind(n.id);
  const [x, w] = ins, wn = nodes[w], xn = nodes[x];
  const K = last(xn);
  if (n.attrs.xq) throw new LoweringError(`matmul #${n.id} with quantized x (attrs.xq) lowers only as a batch-1 gemv unit (graph/plan.ts)`);
  if (wn.shape.length === 2 && xn.dtype === "f32" && (wn.op === "const" || !isBlock(wn.dtype))) {
    const N = wn.shape[0];
    return matmulSteps(cx, { n: N, k: K, batch: numel(xn.shape) / K, w: wn.dtype as lib.WType }, x, [bind(w), out],
      { bytes: bytesOfIds([x, w, n.id]), flops: 2 * numel(n.shape) * K });
  }
  const M = xn.shape[xn.shape.length - 2], N = wn.shape[wn.shape.length - 2];
  const batch = numel(xn.shape) / (M * K);
  const k = batchedMatmul(caps, { batch, m: M, n: N, k: K, a: etype(xn.dtype), w: etype(wn.dtype), wBatchStride: wn.shape.length > 2 ? N * K : 0 });
  return kernel(k, [bind(x), bind(w), out], { bytes: bytesOfIds([x, w, n.id]), flops: 2 * numel(n.shape) * K });
}
