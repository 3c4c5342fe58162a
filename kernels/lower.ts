// Lowering: a graph -> optimize -> plan -> a Program of library kernels for one target. Each plan unit maps to
// one kernel of kernels/lib (or a few: a concat is a copy per part); bindings point into the program's buffers.
// Scalars that depend on a slot (a position, a write map) stay in their slot buffers: kernels load them.
import { hasXq } from "../graph/ops/qdot.ts";
import { byteSize, type DType, isBlock } from "../graph/dtype.ts";
import { evaluate } from "../graph/eval.ts";
import { type Graph, GraphError, type Node, numel, stridesOf } from "../graph/ir.ts";
import { optimize } from "../graph/passes/mod.ts";
import { isElementwise, OPS } from "../graph/ops.ts";
import { type Home, plan, type Plan, type PlanOptions, resultOf, type Unit, type Value } from "../graph/plan.ts";
import { Tracer } from "../graph/tracer.ts";
import { computeOf, type CType, type EType, type Kernel, KernelError } from "./ir.ts";
import type { Caps, TargetSet } from "./target.ts";
import type { Binding, Place, Program, ProgramBuffer, Step, Work } from "./program.ts";
import * as lib from "./lib/mod.ts";
import { argmaxAxis, batchedMatmul, causalMask, gatherRows, iota, reduceAxis, stridedCopy } from "./lib/generic.ts";
import type { EwExpr, EwInput } from "./lib/elementwise.ts";
import { decomposeGraph } from "./decomp/graph.ts";

export class LoweringError extends Error {
  override name = "LoweringError";
}

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

/** Storage element type of a graph dtype (bool is stored as bytes). */
function etype(d: DType): EType {
  if (d === "bool") return "u8";
  if (isBlock(d)) throw new LoweringError(`${d} is not a plain element type`);
  return d;
}
function ctype(d: DType): CType {
  if (d === "bool") return "bool";
  if (isBlock(d)) throw new LoweringError(`${d} has no compute type`);
  return computeOf(d);
}
function itype(d: DType): "u32" | "i32" {
  if (d === "i32" || d === "u32") return d;
  throw new LoweringError(`index tensors must be i32 or u32, got ${d}`);
}

/** Switches for comparisons and tuning runs (bench/); the defaults are what the engine uses. */
export interface CompileOptions extends Omit<PlanOptions, "align"> {
  /**
   * Batch-1 gemv units over q8_0, q4_k and q6_k weights take x quantized to int8 and dot in integers (graph/ops/qdot.ts
   * states the arithmetic; the matmuls behave as if marked attrs.xq): default on where the target has an int8
   * dot instruction (caps.dot4: PTX), off elsewhere. A matmul marked xq in the graph takes that path whatever this says.
   */
  quantizedX?: boolean;
  /** Overrides the gemv kernels' tuning (kernels/lib/gemv.ts gemvTune). */
  gemvTune?: Partial<lib.GemvTune>;
  /** Batch rows a matmul pass carries (kernels/lib/matmul.ts MatmulShape.tile); default the library's. */
  matmulTile?: number;
  /**
   * Tensor-core matmuls (kernels/lib/mma_matmul.ts) where the target has `caps.mma` and the weight is bf16:
   * "auto" (default) for matmuls of at least MMA_MIN_ROWS rows (prefill chunks), "all" for every row count
   * (the server's entries: batch 1 runs the same kernel as a full batch, so a row's bits never depend on the
   * batch), "off" never.
   */
  mma?: "auto" | "all" | "off";
  /**
   * Matmuls of at least `tiledMinRows` (default TILED_MIN_ROWS) rows on the shared-memory tiled kernel
   * (kernels/lib/tiled_matmul.ts) where the MMA path does not take them: "auto" (default) on GPU targets, true
   * on every target (tests), false never. Serving entries turn it off: a row must run the same kernel at every
   * entry size (batch invariance).
   */
  tiled?: boolean | "auto";
  tiledMinRows?: number;
  /** The tiled matmul's tile (tuning runs; the K slice stays the weight type's), where it fits; default tiledLayout's. */
  tiledTile?: Omit<lib.TiledLayout, "bk">;
  /** x as hi + lo parts in the MMA (MmaMatmulShape.split); default true. */
  mmaSplit?: boolean;
  /** The same for flash attention's operands (FlashShape.split); default mmaSplit. */
  flashSplit?: boolean;
  /**
   * Prefill attention of chunks of >= MMA_MIN_ROWS rows on MMA tiles (kernels/lib/flash.ts) where the target
   * has them and mma is not "off"; default true. Decode and serving (paged) attention never use it.
   */
  flash?: boolean;
  /**
   * Tiling of the "auto" (prefill) MMA matmuls (tuning runs; kernels/lib/mma_matmul.ts): warps splitting K, along
   * N and M, tiles per warp, unroll. Serving ("all") keeps the library's, whose K split is a function of the shape.
   */
  mmaLayout?: Pick<lib.MmaMatmulShape, "ks" | "nw" | "mw" | "mt" | "nt" | "unroll">;
  /** Layout of the serving ("all") MMA matmuls (tuning runs; lib.mmaServingLayout); default the library's. */
  mmaServing?: lib.MmaServingTune;
  /**
   * Prefill ("auto") MMA matmuls of at least `stagedMinRows` (default STAGED_MIN_ROWS) rows on the staged kernel
   * (kernels/lib/mma_staged.ts: cp.async pipeline, ldmatrix) where the target has `caps.staging`; default true.
   * Serving ("all") never: its rows keep mma_matmul.ts's summation order at every entry size.
   */
  staged?: boolean;
  stagedMinRows?: number;
  /**
   * Prefill attention of chunks of >= stagedMinRows rows on the staged flash kernels (kernels/lib/flash_staged.ts:
   * K/V to f16 halves once, then cp.async tiles and ldmatrix) where caps.staging and flash allow; default true.
   */
  flashStaged?: boolean;
  /** Warps and positions per tile of the staged flash attention (tuning runs); default the library's (4, 64). */
  flashLayout?: Pick<lib.FlashStagedShape, "warps" | "bkv">;
  /** Block tiling of the staged matmuls (tuning runs); default stagedLayout's. */
  stagedLayout?: lib.StagedLayout;
  /** Position splits of the flash attention (default: enough warps to fill a large GPU); 1 = none. */
  flashSplits?: number;
  /** Split-K chunks of decode and paged attention (1 = the one-pass kernel); default attentionSplitCount's / attentionSplits'. */
  attentionSplits?: number;
  /**
   * Split-K decode attention combines in its own last team (lib.attentionFused: one dispatch, not two) where it
   * can, and so does the long-row argmax (lib.argmaxFused); default the target's Caps.dispatchGap (Vulkan and
   * WebGPU, whose every dispatch after a barrier pays a launch and a drain: 4-7 µs on the H200, where PTX's PDL
   * launches overlap).
   */
  attentionFuse?: boolean;
  /** Positions per position group per trip of the attention kernels (AttentionShape.unroll); default the library's. */
  attentionUnroll?: number;
  /** Parts per row of the split sample kernels (kernels/lib/sample_split.ts; 1 = one workgroup per row); default sampleParts'. */
  sampleParts?: number;
  /** Parts per row of the split logprobs kernels (kernels/lib/logprobs_split.ts; 1 = one workgroup per row); default logprobsParts'. */
  logprobsParts?: number;
  /** The sample kernel's top-p bracket path (kernels/lib/sample_bracket.ts); default on (off: for A/B). */
  sampleBracket?: boolean;
}

/** Rows from which "auto" picks the tensor-core matmul: below, the FMA kernel reads W about as fast. */
export const MMA_MIN_ROWS = 16;
/** Rows from which prefill MMA matmuls and flash attention run on the staged kernels (blocks of 64+ rows). */
export const STAGED_MIN_ROWS = 128;
/** Largest scratch (each of K and V as f16 halves) the staged flash attention takes; past it, flash.ts. */
const FLASH_STAGED_MAX_BYTES = 256 * 2 ** 20;
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

/** Decompose what has no direct kernel (decomp/graph.ts), optimize, plan and lower a graph for a target. */
export function compileGraph(graph: Graph, target: TargetSet, opts: CompileOptions = {}): Program {
  const g = optimize(decomposeGraph(graph, hasLowerer));
  return lower(plan(g, { gemv: opts.gemv, align: Math.max(256, target.caps.bindingAlign) }), target, opts);
}
/**
 * What every lowerer shares: the plan and its nodes, the target, and the program under construction with the
 * helpers that add to it (a buffer by kind and name, a value's binding, a kernel or copy step, work estimates).
 */
export interface LowerContext {
  p: Plan;
  nodes: Node[];
  caps: TargetSet["caps"];
  backend: TargetSet["backend"];
  opts: CompileOptions;
  buffers: ProgramBuffer[];
  steps: Step[];
  /** Buffer id by `${kind}:${name}`. */
  byName: Map<string, number>;
  /** The buffer of that kind and name (made on first use, grown to the largest size asked). */
  buf(kind: ProgramBuffer["kind"], name: string, bytes: number, init?: Uint8Array): number;
  /** Where a node's value lives, as a binding. */
  bind(id: number): Binding;
  kernel(k: Kernel, bindings: Binding[], work: Work): void;
  copy(src: Binding, dst: Binding): void;
  bytesOfIds(ids: number[]): number;
  simpleWork(u: Unit, ins: number[]): Work;
  /**
   * The MMA words in the "mma-x-words" scratch: which node's, in which form (matmulSteps; only its prep kernels
   * write that buffer). A node's value does not change while it is live, so matmuls of one input (q/k/v,
   * gate/up) share one prep.
   */
  mmaWords: { key?: string };
}

function context(p: Plan, target: TargetSet, opts: CompileOptions): LowerContext {
  const nodes = p.graph.nodes;
  const buffers: ProgramBuffer[] = [];
  const steps: Step[] = [];
  const byName = new Map<string, number>();
  const buf = (kind: ProgramBuffer["kind"], name: string, bytes: number, init?: Uint8Array): number => {
    const key = `${kind}:${name}`;
    const known = byName.get(key);
    if (known !== undefined) {
      buffers[known].bytes = Math.max(buffers[known].bytes, bytes);
      return known;
    }
    const id = buffers.length;
    buffers.push(init ? { id, kind, name, bytes, init } : { id, kind, name, bytes });
    byName.set(key, id);
    return id;
  };
  const arena = p.arenaBytes > 0 ? buf("arena", "arena", p.arenaBytes) : -1;

  const homeOf = (h: Home, v: Value): { buffer: number; offset: number } => {
    switch (h.k) {
      case "weight": return { buffer: buf("weight", h.role, v.bytes), offset: 0 };
      case "slot": return { buffer: buf("slot", h.name, v.bytes), offset: 0 };
      case "state": return { buffer: buf("state", h.name, v.bytes), offset: 0 };
      case "literal": return { buffer: buf("literal", `#${h.node}`, v.bytes, literalBytes(nodes[h.node])), offset: 0 };
      case "temp":
        if (h.offset < 0) throw new LoweringError(`value of node ${v.node} has no storage`);
        return { buffer: arena, offset: h.offset };
    }
  };
  const bind = (id: number): Binding => {
    const v = p.values[id];
    const at = homeOf(v.home, v);
    return { buffer: at.buffer, offset: at.offset, bytes: Math.max(v.bytes, 4) };
  };
  const bytesOfIds = (ids: number[]) => ids.reduce((a, i) => a + p.values[i].bytes, 0);
  return {
    p, nodes, caps: target.caps, backend: target.backend, opts, buffers, steps, byName, buf, bind, bytesOfIds, mmaWords: {},
    kernel: (k, bindings, work) => {
      steps.push({ k: "kernel", kernel: k, bindings, grid: k.grid, work });
    },
    copy: (src, dst) => {
      steps.push({ k: "copy", src, dst, work: { bytes: 2 * src.bytes, flops: 0 } });
    },
    simpleWork: (u, ins) => ({ bytes: bytesOfIds(ins) + p.values[resultOf(u)].bytes, flops: numel(nodes[resultOf(u)].shape) }),
  };
}

export function lower(p: Plan, target: TargetSet, opts: CompileOptions = {}): Program {
  const cx = context(p, target, opts);
  const { nodes, buf, bind, copy, byName } = cx;
  // Touch every leaf so that weights, slots and states exist as buffers even when no kernel reads them.
  for (const n of nodes) if (n.op === "const" || n.op === "slot" || n.op === "state") bind(n.id);

  for (const u of p.units) {
    try {
      (UNIT_LOWERERS[u.k] as (cx: LowerContext, u: Unit) => void)(cx, u);
    } catch (e) {
      if (e instanceof LoweringError || e instanceof RangeError || e instanceof KernelError) {
        const n = nodes[resultOf(u)];
        // A sharded graph's collectives run between the ranks of a group, not in one device's kernels.
        const why = n.op === "all_reduce" || n.op === "all_gather" ? " (a sharded graph runs on a tp group: backends/group.ts)" : "";
        throw new GraphError("attr", `cannot lower for ${target.backend}: ${(e as Error).message}${why}`, { id: n.id, op: n.op, label: n.label });
      }
      throw e;
    }
  }

  // State written by a non-in-place update, then outputs into readback buffers.
  for (const s of p.stateCopies) {
    const v = p.values[s.node];
    copy(bind(s.node), { buffer: buf("state", s.name, v.bytes), offset: 0, bytes: v.bytes });
  }
  const outputs: Place[] = [];
  for (const o of p.outputs) {
    const v = p.values[o.node];
    const rb = buf("readback", o.name, Math.max(v.bytes, 4));
    copy(bind(o.node), { buffer: rb, offset: 0, bytes: Math.max(v.bytes, 4) });
    outputs.push({ name: o.name, buffer: rb, offset: 0, dtype: v.dtype === "bool" ? "u8" : v.dtype, shape: v.shape });
  }
  const places = (kind: "slot" | "state" | "weight", op: string, name: (n: Node) => string): Place[] =>
    nodes.filter((n) => n.op === op).map((n) => ({
      name: name(n), buffer: byName.get(`${kind}:${name(n)}`)!, offset: 0, dtype: n.dtype, shape: n.shape,
    }));
  return {
    buffers: cx.buffers,
    steps: cx.steps,
    slots: places("slot", "slot", (n) => n.attrs.name!),
    state: places("state", "state", (n) => n.attrs.name!),
    outputs,
    weights: places("weight", "const", (n) => (p.values[n.id].home as { role: string }).role),
  };
}

/** CompileOptions.attentionFuse, resolved: whether split reductions combine in their own last team. */
function fusesTails(cx: LowerContext): boolean {
  return cx.opts.attentionFuse ?? cx.caps.dispatchGap;
}

/**
 * y = x W^T (+ bias / residual) with bindings [x, w, (bias | residual), y]: on tensor cores where opts.mma and
 * the target allow (x made into MMA words once by a small kernel, into a scratch buffer every such matmul
 * reuses: steps run in order), else the FMA kernel.
 */
function matmulSteps(cx: LowerContext, s: lib.MatmulShape & { batch: number }, x: number, bindings: Binding[], work: Work): void {
  const { caps, opts, buf, kernel } = cx;
  const mode = opts.mma ?? "auto";
  // bf16 weights only: with f16 weights x would enter the MMA as f16, and activations past 65504 (the MLP's
  // down-projection input in some models) would overflow; the FMA kernel keeps them in f32.
  if (mode !== "off" && s.w === "bf16" && lib.mmaMatmulFits(caps, s.w, s.n, s.k) &&
    (mode === "all" || s.batch >= MMA_MIN_ROWS)) {
    const split = opts.mmaSplit ?? true;
    const bytes = (split ? 2 : 1) * s.batch * s.k * 2;
    const xw: Binding = { buffer: buf("arena", "mma-x-words", bytes), offset: 0, bytes };
    const key = `${x}:${s.batch}:${s.k}:${s.w}:${split}`;
    if (cx.mmaWords.key !== key) {
      const prep = lib.mmaPrepX(caps, { m: s.batch, k: s.k, ab: s.w, split });
      kernel(prep, [bindings[0], xw], { bytes: s.batch * s.k * 4 + bytes, flops: s.batch * s.k });
      cx.mmaWords.key = key;
    }
    const staged = opts.stagedLayout ?? lib.stagedLayout(s.batch, s.n);
    if (mode === "auto" && (opts.staged ?? true) && s.batch >= (opts.stagedMinRows ?? STAGED_MIN_ROWS) &&
      lib.stagedMatmulFits(caps, s.w, s.n, s.k, staged, split)) {
      const k = lib.stagedMatmul(caps, { ...staged, n: s.n, k: s.k, batch: s.batch, w: s.w, bias: s.bias, residual: s.residual, split });
      kernel(k, [xw, ...bindings.slice(1)], work);
      return;
    }
    // serving entries: a K split of the shape alone (the same at every entry: invariance), tiles by rows
    const layout = mode === "auto" ? opts.mmaLayout : lib.mmaServingLayout(s.n, s.k, s.batch, opts.mmaServing);
    const k = lib.mmaMatmul(caps, { ...layout, n: s.n, k: s.k, batch: s.batch, w: s.w, bias: s.bias, residual: s.residual, split, prepared: true });
    kernel(k, [xw, ...bindings.slice(1)], work);
    return;
  }
  const tiled = opts.tiled ?? "auto";
  if ((tiled === true || (tiled === "auto" && tiledAuto(caps))) &&
    s.batch >= (opts.tiledMinRows ?? TILED_MIN_ROWS) && lib.tiledLayout(caps, s.w, s.batch, s.n)) {
    const layout = opts.tiledTile && { ...opts.tiledTile, bk: lib.tiledSlice(s.w) };
    const fits = layout && lib.tiledFits(caps, layout);
    kernel(lib.tiledMatmul(caps, { ...s, layout: fits ? layout : undefined }), bindings, work);
    return;
  }
  kernel(lib.matmul(caps, { ...s, tile: opts.matmulTile }), bindings, work);
}

/**
 * Ops with a kernel of their own, as their records say (graph/ops/: lower "kernel" is a NODE_LOWERERS entry,
 * "elementwise" a fused group); a composite without one is expanded by decomp/graph.ts.
 */
const hasLowerer = (op: Node["op"]): boolean => OPS[op].lower === "kernel" || OPS[op].lower === "elementwise";

type UnitLowerer<K extends Unit["k"]> = (cx: LowerContext, u: Extract<Unit, { k: K }>) => void;

/** One lowerer per plan unit kind; a "node" unit goes to its op's lowerer (NODE_LOWERERS). */
export const UNIT_LOWERERS: { [K in Unit["k"]]: UnitLowerer<K> } = {
  group: lowerGroup,
  gemv: lowerGemv,
  matmul_residual(cx, u) {
    const { nodes, bind, bytesOfIds } = cx;
    const mm = nodes[u.matmul], [x, w] = mm.inputs, wn = nodes[w];
    const K = wn.shape[1], N = wn.shape[0];
    const extra = u.residual ?? u.bias!;
    matmulSteps(cx, { n: N, k: K, batch: numel(mm.shape) / N, w: wn.dtype as lib.WType, residual: u.residual !== undefined, bias: u.bias !== undefined }, x,
      [bind(x), bind(w), bind(extra), bind(u.add)], { bytes: bytesOfIds([x, w, extra, u.add]), flops: 2 * numel(mm.shape) * K });
  },
  attention(cx, u) {
    const { nodes, caps, opts, buf, bind, kernel, bytesOfIds } = cx;
    const n = nodes[u.node], [q, k, v] = n.inputs;
    const [R, H, D] = nodes[q].shape, [C, KVH] = nodes[k].shape;
    if (nodes[v].shape[2] !== D || nodes[q].dtype !== "f32") throw new LoweringError("attention needs f32 q and Dv == D");
    const kv = nodes[k].dtype;
    if ((kv !== "f32" && kv !== "f16" && kv !== "bf16") || nodes[v].dtype !== kv) throw new LoweringError(`attention over ${kv} K and ${nodes[v].dtype} V`);
    const shape = { rows: R, heads: H, kvHeads: KVH, hd: D, cap: C, kv, pos: itype(nodes[u.pos].dtype), scale: n.attrs.scale, window: u.window, softcap: n.attrs.softcap, unroll: opts.attentionUnroll };
    const work = { bytes: bytesOfIds([q, k, v, n.id]), flops: 4 * R * H * C * D };
    const fsplit = opts.flashSplit ?? opts.mmaSplit;
    const staged = { ...shape, ...opts.flashLayout, split: fsplit };
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
        kernel(lib.flashAttention(caps, { ...shape, split: opts.flashSplit ?? opts.mmaSplit }), [bind(q), bind(k), bind(v), bind(u.pos), bind(n.id)], work);
        return;
      }
      const bytes = R * H * fs * (D + 2) * 4;
      const part: Binding = { buffer: buf("arena", "attention-partials", bytes), offset: 0, bytes };
      kernel(lib.flashAttention(caps, { ...shape, split: opts.flashSplit ?? opts.mmaSplit, splits: fs }), [bind(q), bind(k), bind(v), bind(u.pos), part], work);
      kernel(lib.attentionCombine(caps, { rows: R, heads: H, hd: D, splits: fs }), [part, bind(n.id)], { bytes: 2 * bytes, flops: bytes });
      return;
    }
    const splits = Math.min(opts.attentionSplits ?? attentionSplitCount(caps, C, R * H), C);
    if (splits <= 1) {
      kernel(lib.attention(caps, shape), [bind(q), bind(k), bind(v), bind(u.pos), bind(n.id)], work);
      return;
    }
    // Flash-decoding: chunks of positions in parallel, then a combine. Empty chunks (past pos) cost nothing.
    if (fusesTails(cx) && !lib.attentionFusable(caps, { rows: R, heads: H, splits })) {
      // the partials and the counters persist between steps (the counters are zero between dispatches): State,
      // one per size, zeroed when made and by resetState (a step that failed midway may leave a count)
      const bytes = lib.attentionFusedBytes({ rows: R, heads: H, hd: D, splits });
      const part: Binding = { buffer: buf("state", `attention-partials:${bytes}`, bytes), offset: 0, bytes };
      kernel(lib.attentionFused(caps, { ...shape, splits }), [bind(q), bind(k), bind(v), bind(u.pos), part, bind(n.id)], work);
      return;
    }
    const bytes = R * H * splits * (D + 2) * 4;
    const part: Binding = { buffer: buf("arena", "attention-partials", bytes), offset: 0, bytes };
    kernel(lib.attentionPartial(caps, { ...shape, splits }), [bind(q), bind(k), bind(v), bind(u.pos), part], work);
    kernel(lib.attentionCombine(caps, { rows: R, heads: H, hd: D, splits }), [part, bind(n.id)], { bytes: 2 * bytes, flops: bytes });
  },
  update(cx, u) {
    const { nodes, caps, bind, kernel, copy, simpleWork } = cx;
    const n = nodes[u.node], [target, row, index] = n.inputs;
    const update = u.src ?? row;
    const t = nodes[target], up = nodes[update];
    if (u.copyFirst) copy(bind(target), bind(n.id));
    const rows = up.shape[0], width = numel(up.shape) / Math.max(rows, 1), cap = t.shape[0];
    if (n.op === "dynamic_update_slice") {
      if ((n.attrs.axis ?? 0) !== 0) throw new LoweringError("dynamic_update_slice along an axis other than 0");
      const k = lib.updateSlice(caps, { rows, width, cap, src: etype(up.dtype), dst: etype(t.dtype), pos: itype(nodes[index].dtype) });
      kernel(k, [bind(update), bind(index), bind(n.id)], simpleWork(u, [update]));
    } else {
      const k = lib.scatter(caps, { rows, width, cap, src: etype(up.dtype), dst: etype(t.dtype), index: itype(nodes[index].dtype) });
      kernel(k, [bind(update), bind(index), bind(n.id)], simpleWork(u, [update]));
    }
  },
  node(cx, u) {
    const n = cx.nodes[u.node];
    cx.bind(n.id); // the result's buffer first, whatever the op (buffer ids follow first use)
    if (n.op === "all_reduce" || n.op === "all_gather") return lowerCollective(cx, n);
    const f = NODE_LOWERERS[n.op];
    if (f) return f(cx, n, u);
    if (isElementwise(n.op)) return lowerGroup(cx, { k: "group", group: { root: n.id, nodes: [n.id], inputs: [...new Set(n.inputs)] } });
    throw new LoweringError(`no kernel for ${n.op}`);
  },
};

/**
 * A collective as a step of the rank's own program, where the target records collectives (caps.collectives: a
 * PTX rank with NCCL). NCCL gathers rank-major (rank r's block at r·count); a gather along an inner axis (rows
 * of logits gathered along the vocab) lands in a scratch first and one copy per (outer index, rank) block puts
 * it in place.
 */
function lowerCollective(cx: LowerContext, n: Node): void {
  if (!cx.caps.collectives) throw new LoweringError(`${n.op} needs a device that records collectives`);
  const x = cx.nodes[n.inputs[0]], ranks = n.attrs.ranks!, count = numel(x.shape);
  const esize = byteSize(x.dtype as "f32", 1), bytes = count * esize;
  const src = cx.bind(x.id), dst = cx.bind(n.id);
  if (n.op === "all_reduce") {
    cx.steps.push({ k: "collective", op: n.op, dtype: x.dtype, count, ranks, src, dst, work: { bytes: 2 * bytes, flops: count * ranks } });
    return;
  }
  const axis = n.attrs.axis!, outer = numel(x.shape.slice(0, axis));
  const work = { bytes: bytes * (ranks + 1), flops: 0 };
  if (outer === 1) {
    cx.steps.push({ k: "collective", op: "all_gather", dtype: x.dtype, count, ranks, src, dst, work });
    return;
  }
  const scratch: Binding = { buffer: cx.buf("arena", "all-gather-scratch", bytes * ranks), offset: 0, bytes: bytes * ranks };
  cx.steps.push({ k: "collective", op: "all_gather", dtype: x.dtype, count, ranks, src, dst: scratch, work });
  const block = bytes / outer; // one rank's part of one outer index
  for (let o = 0; o < outer; o++) {
    for (let r = 0; r < ranks; r++) {
      cx.copy({ buffer: scratch.buffer, offset: (r * outer + o) * block, bytes: block }, { buffer: dst.buffer, offset: dst.offset + (o * ranks + r) * block, bytes: block });
    }
  }
}

/** A node's own kernel(s): its op's lowerer gets the context, the node, and the unit (for work estimates). */
type NodeLowerer = (cx: LowerContext, n: Node, u: Unit) => void;

const rowsOf = (x: Node) => numel(x.shape) / x.shape[x.shape.length - 1];
const last = (x: Node) => x.shape[x.shape.length - 1];

/** One lowerer per op that has a kernel of its own; elementwise ops without one lower as a one-node group. */
export const NODE_LOWERERS: Partial<Record<Node["op"], NodeLowerer>> = {
  matmul(cx, n) {
    const { nodes, caps, bind, kernel, bytesOfIds } = cx;
    const ins = n.inputs, out = bind(n.id);
    const [x, w] = ins, wn = nodes[w], xn = nodes[x];
    const K = last(xn);
    if (n.attrs.xq) throw new LoweringError(`matmul #${n.id} with quantized x (attrs.xq) lowers only as a batch-1 gemv unit (graph/plan.ts)`);
    if (wn.shape.length === 2 && xn.dtype === "f32" && (wn.op === "const" || !isBlock(wn.dtype))) {
      const N = wn.shape[0];
      return matmulSteps(cx, { n: N, k: K, batch: numel(xn.shape) / K, w: wn.dtype as lib.WType }, x, [bind(x), bind(w), out],
        { bytes: bytesOfIds([x, w, n.id]), flops: 2 * numel(n.shape) * K });
    }
    const M = xn.shape[xn.shape.length - 2], N = wn.shape[wn.shape.length - 2];
    const batch = numel(xn.shape) / (M * K);
    const k = batchedMatmul(caps, { batch, m: M, n: N, k: K, a: etype(xn.dtype), w: etype(wn.dtype), wBatchStride: wn.shape.length > 2 ? N * K : 0 });
    return kernel(k, [bind(x), bind(w), out], { bytes: bytesOfIds([x, w, n.id]), flops: 2 * numel(n.shape) * K });
  },
  gather(cx, n, u) {
    const { nodes, caps, bind, kernel, simpleWork } = cx;
    const ins = n.inputs, out = bind(n.id), work = simpleWork(u, ins);
    const [t, idx] = ins, tn = nodes[t];
    const width = numel(tn.shape) / tn.shape[0], count = numel(nodes[idx].shape);
    if (n.dtype === "f32" && (isBlock(tn.dtype) || tn.dtype === "f32" || tn.dtype === "f16" || tn.dtype === "bf16")) {
      const k = lib.gather(caps, { rows: count, width, vocab: tn.shape[0], table: tn.dtype as lib.WType, ids: itype(nodes[idx].dtype) });
      return kernel(k, [bind(t), bind(idx), out], work);
    }
    const k = gatherRows(caps, { count, width, rows: tn.shape[0], elem: etype(tn.dtype), index: itype(nodes[idx].dtype) });
    return kernel(k, [bind(t), bind(idx), out], work);
  },
  rmsnorm(cx, n, u) {
    const { nodes, caps, bind, kernel, simpleWork } = cx;
    const ins = n.inputs, i0 = nodes[ins[0]], out = bind(n.id);
    return kernel(lib.rmsnorm(caps, { rows: rowsOf(i0), n: last(i0), eps: n.attrs.eps!, weight: floatOf(nodes[ins[1]]) }), [bind(ins[0]), bind(ins[1]), out], simpleWork(u, ins));
  },
  layernorm(cx, n, u) {
    const { nodes, caps, bind, kernel, simpleWork } = cx;
    const ins = n.inputs, i0 = nodes[ins[0]], out = bind(n.id);
    return kernel(lib.layernorm(caps, { rows: rowsOf(i0), n: last(i0), eps: n.attrs.eps!, weight: floatOf(nodes[ins[1]]), bias: true }), [bind(ins[0]), bind(ins[1]), bind(ins[2]), out], simpleWork(u, ins));
  },
  softmax(cx, n, u) {
    const { nodes, caps, bind, kernel, simpleWork } = cx;
    const ins = n.inputs, i0 = nodes[ins[0]], out = bind(n.id);
    if ((n.attrs.axis ?? n.shape.length - 1) !== n.shape.length - 1) throw new LoweringError("softmax along an inner axis");
    return kernel(lib.softmax(caps, { rows: rowsOf(i0), n: last(i0) }), [bind(ins[0]), out], simpleWork(u, ins));
  },
  rope(cx, n, u) {
    const { nodes, caps, bind, kernel, simpleWork } = cx;
    const ins = n.inputs, out = bind(n.id), work = simpleWork(u, ins);
    const [R, H, D] = n.shape, dims = n.attrs.dims ?? D;
    const tb = ropeTable(cx, n.attrs.theta!, dims, ins[2]);
    const k = lib.rope(caps, { rows: R, heads: H, hd: D, theta: n.attrs.theta!, style: n.attrs.style!, rot: dims, pos: itype(nodes[ins[1]].dtype), positions: "rows", freqs: true });
    return kernel(k, [bind(ins[0]), bind(ins[1]), tb, out], work);
  },
  argmax(cx, n, u) {
    const { nodes, caps, opts, buf, bind, kernel, simpleWork } = cx;
    const ins = n.inputs, i0 = nodes[ins[0]], out = bind(n.id), work = simpleWork(u, ins);
    const axis = n.attrs.axis!;
    const [outer, len, inner] = around(i0.shape, axis);
    if (inner === 1 && i0.dtype === "f32" && len >= 16384 && caps.subgroups && caps.subgroupSize >= 8) {
      // Long rows (a vocab): chunks in parallel, then a merge.
      if (fusesTails(cx) && !lib.argmaxFusable(caps, { rows: outer, n: len })) {
        // one dispatch, as fused attention (the same switch): its candidates and counters are State
        const bytes = lib.argmaxFusedBytes({ rows: outer, n: len });
        const part: Binding = { buffer: buf("state", `argmax-partials:${bytes}`, bytes), offset: 0, bytes };
        return kernel(lib.argmaxFused(caps, { rows: outer, n: len, out: "i32" }), [bind(ins[0]), part, out], work);
      }
      const bytes = outer * lib.argmaxChunks(len).parts * 8;
      const part: Binding = { buffer: buf("arena", "argmax-partials", bytes), offset: 0, bytes };
      kernel(lib.argmaxPartial(caps, { rows: outer, n: len }), [bind(ins[0]), part], work);
      return kernel(lib.argmaxCombine(caps, { rows: outer, n: len, out: "i32" }), [part, out], { bytes: bytes + 4 * outer, flops: bytes });
    }
    if (inner === 1 && i0.dtype === "f32") return kernel(lib.argmax(caps, { rows: outer, n: len, out: "i32" }), [bind(ins[0]), out], work);
    return kernel(argmaxAxis(caps, { outer, n: len, inner, elem: etype(i0.dtype) }), [bind(ins[0]), out], work);
  },
  reduce(cx, n, u) {
    const { nodes, caps, bind, kernel, simpleWork } = cx;
    const ins = n.inputs, i0 = nodes[ins[0]], out = bind(n.id);
    const [outer, len, inner] = around(i0.shape, n.attrs.axis!);
    return kernel(reduceAxis(caps, { outer, n: len, inner, elem: etype(i0.dtype), fn: n.attrs.fn! }), [bind(ins[0]), out], simpleWork(u, ins));
  },
  iota(cx, n, u) {
    const out = cx.bind(n.id);
    return cx.kernel(iota(cx.caps, { shape: n.shape, axis: n.attrs.axis ?? 0, elem: etype(n.dtype) }), [out], cx.simpleWork(u, n.inputs));
  },
  causal_mask(cx, n, u) {
    const { nodes, caps, bind, kernel, simpleWork } = cx;
    const ins = n.inputs, i0 = nodes[ins[0]], out = bind(n.id);
    return kernel(causalMask(caps, { rows: n.attrs.rows!, cap: n.attrs.cap!, pos: itype(i0.dtype), window: n.attrs.window }), [bind(ins[0]), out], simpleWork(u, ins));
  },
  permute(cx, n) {
    const i0 = cx.nodes[n.inputs[0]];
    const st = stridesOf(i0.shape), perm = n.attrs.perm!;
    return movement(cx, n.inputs[0], n, { offset: 0, strides: perm.map((a) => st[a]) }, { offset: 0, strides: stridesOf(n.shape) }, n.shape);
  },
  broadcast(cx, n) {
    const i0 = cx.nodes[n.inputs[0]];
    const st = stridesOf(i0.shape), pad = n.shape.length - i0.shape.length;
    const strides = n.shape.map((_, d) => (d < pad || i0.shape[d - pad] === 1 ? 0 : st[d - pad]));
    return movement(cx, n.inputs[0], n, { offset: 0, strides }, { offset: 0, strides: stridesOf(n.shape) }, n.shape);
  },
  slice(cx, n) {
    const i0 = cx.nodes[n.inputs[0]];
    const st = stridesOf(i0.shape), start = n.attrs.start!;
    const offset = start.reduce((a, s, d) => a + s * st[d], 0);
    return movement(cx, n.inputs[0], n, { offset, strides: st }, { offset: 0, strides: stridesOf(n.shape) }, n.shape);
  },
  concat(cx, n) {
    const axis = n.attrs.axis!, ost = stridesOf(n.shape);
    let at = 0;
    for (const id of n.inputs) {
      const x = cx.nodes[id];
      movement(cx, id, n, { offset: 0, strides: stridesOf(x.shape) }, { offset: at * ost[axis], strides: ost }, x.shape);
      at += x.shape[axis];
    }
  },
  reshape() {}, // a view
  paged_attention(cx, n) {
    const { nodes, caps, buf, bind, kernel, bytesOfIds } = cx;
    const ins = n.inputs, out = bind(n.id);
    const [q, k, v, tb, ps] = ins;
    const [R, H, D] = nodes[q].shape, [P, KVH] = nodes[k].shape;
    if (nodes[v].shape[2] !== D) throw new LoweringError("paged attention needs Dv == D");
    const kv = nodes[k].dtype;
    if ((kv !== "f32" && kv !== "f16" && kv !== "bf16") || nodes[v].dtype !== kv) throw new LoweringError(`paged attention over ${kv} K/V`);
    const T = nodes[tb].shape[1] * n.attrs.block!;
    const shape = {
      rows: R, heads: H, kvHeads: KVH, hd: D, poolRows: P, block: n.attrs.block!, maxBlocks: nodes[tb].shape[1],
      kv, pos: itype(nodes[ps].dtype), table: itype(nodes[tb].dtype), scale: n.attrs.scale,
    } as const;
    const bindings = [bind(q), bind(k), bind(v), bind(tb), bind(ps)];
    const work = { bytes: bytesOfIds([q, tb, ps, n.id]) + 2 * R * T * KVH * D * byteSize(kv, 1), flops: 4 * R * H * T * D };
    // Split count from the table length alone, never from the rows: a row's order must not depend on the batch.
    const splits = Math.min(cx.opts.attentionSplits ?? lib.attentionSplits(caps, T), T);
    if (splits <= 1) return kernel(lib.pagedAttention(caps, shape), [...bindings, out], work);
    const bytes = R * H * splits * (D + 2) * 4;
    const part: Binding = { buffer: buf("arena", "attention-partials", bytes), offset: 0, bytes };
    kernel(lib.pagedAttentionPartial(caps, { ...shape, splits }), [...bindings, part], work);
    return kernel(lib.attentionCombine(caps, { rows: R, heads: H, hd: D, splits }), [part, out], { bytes: 2 * bytes, flops: bytes });
  },
  sample(cx, n) { // a long row: stats and masses over many workgroups, then one per row; else one per row
    const { nodes, caps, buf, bind, kernel } = cx;
    const ins = n.inputs, i0 = nodes[ins[0]], out = bind(n.id);
    const [R, V] = i0.shape;
    const parts = lib.sampleSplit(V, cx.opts.sampleParts ?? lib.sampleParts(caps, V)).parts;
    const k = lib.sample(caps, { rows: R, vocab: V, parts, bracket: cx.opts.sampleBracket });
    if (parts <= 1) return kernel(k, [bind(ins[0]), bind(ins[1]), out], { bytes: 16 * R * V, flops: 32 * R * V });
    const arena = (name: string, words: number): Binding => {
      const bytes = R * parts * words * 4;
      return { buffer: buf("arena", name, bytes), offset: 0, bytes };
    };
    const stats = arena("sample-stats", lib.STATS_WORDS), mass = arena("sample-mass", lib.MASS_WORDS);
    kernel(lib.sampleStats(caps, { rows: R, vocab: V, parts }), [bind(ins[0]), stats], { bytes: 4 * R * V, flops: 4 * R * V });
    kernel(lib.sampleMass(caps, { rows: R, vocab: V, parts }), [bind(ins[0]), bind(ins[1]), stats, mass], { bytes: 4 * R * V, flops: 4 * R * V });
    return kernel(k, [bind(ins[0]), bind(ins[1]), stats, mass, out], { bytes: 12 * R * V, flops: 32 * R * V });
  },
  logits_process(cx, n) { // (row, chunk) workgroups: a copy with the mask, then the row's sparse entries
    const { nodes, caps, bind, kernel } = cx;
    const ins = n.inputs, out = bind(n.id);
    const [R, V] = nodes[ins[0]].shape;
    const entries = (nodes[ins[1]].shape[1] - 8) / 3;
    const countRows = ins.length > 3 ? nodes[ins[3]].shape[0] : 0;
    const k = lib.logitsProcess(caps, { rows: R, vocab: V, entries, countRows });
    return kernel(k, [...ins.map(bind), out], { bytes: (countRows ? 12 : 8) * R * V + 12 * R * entries, flops: R * V });
  },
  logprobs(cx, n) { // a long row: per-part top lists over many teams, then a merge; else one workgroup per row
    const { nodes, caps, buf, bind, kernel } = cx;
    const ins = n.inputs, out = bind(n.id);
    const [R, V] = nodes[ins[0]].shape;
    const N = n.attrs.n!;
    const parts = lib.sampleSplit(V, cx.opts.logprobsParts ?? lib.logprobsParts(caps, V)).parts;
    if (parts <= 1) {
      const k = lib.logprobs(caps, { rows: R, vocab: V, n: N });
      return kernel(k, [bind(ins[0]), bind(ins[1]), bind(ins[2]), out], { bytes: 4 * R * V * (2 + N), flops: 8 * R * V });
    }
    const bytes = R * parts * lib.logprobsPartWords(N) * 4;
    const part: Binding = { buffer: buf("arena", "logprobs-parts", bytes), offset: 0, bytes };
    const shape = { rows: R, vocab: V, n: N, parts };
    kernel(lib.logprobsPart(caps, shape), [bind(ins[0]), bind(ins[2]), part], { bytes: 4 * R * V, flops: 8 * R * V });
    return kernel(lib.logprobsCombine(caps, shape), [bind(ins[0]), bind(ins[1]), bind(ins[2]), part, out], { bytes: 2 * bytes, flops: bytes });
  },
};

/**
 * The frequencies rope reads: 1/theta^(2i/dims), divided by the frequency factors when given. Literal factors
 * (a config's rope scaling) fold on the host; factors that are a weight (GGUF rope_freqs) are divided on the
 * device by a small kernel that runs before the first reader.
 */
function ropeTable(cx: LowerContext, theta: number, dims: number, factors?: number): Binding {
  const { nodes, caps, buf, bind, kernel, byName } = cx;
  const fn = factors === undefined ? undefined : nodes[factors];
  if (fn && fn.op === "literal") {
    const table = ropeFreqs(theta, dims, fn);
    return { buffer: buf("literal", `rope:${theta}:${dims}:#${factors}`, table.byteLength, table), offset: 0, bytes: table.byteLength };
  }
  const table = ropeFreqs(theta, dims);
  const base: Binding = { buffer: buf("literal", `rope:${theta}:${dims}`, table.byteLength, table), offset: 0, bytes: table.byteLength };
  if (!fn) return base;
  const key = `rope-freqs:${theta}:${dims}:#${factors}`;
  const done = byName.has(`arena:${key}`);
  const scaled: Binding = { buffer: buf("arena", key, table.byteLength), offset: 0, bytes: table.byteLength };
  if (!done) {
    const k = lib.elementwise(caps, { n: dims / 2, inputs: [{ type: "f32" }, { type: etype(fn.dtype) }], out: "f32", expr: { op: "div", args: [{ in: 0 }, { in: 1 }] } });
    kernel(k, [base, bind(factors!), scaled], { bytes: 3 * table.byteLength, flops: dims / 2 });
  }
  return scaled;
}

function lowerGemv(cx: LowerContext, u: Extract<Unit, { k: "gemv" }>): void {
  const { p, nodes, caps, opts, bind, kernel, bytesOfIds } = cx;
  const first = nodes[u.parts[0].matmuls[0]], wn = nodes[first.inputs[1]];
  const K = wn.shape[1];
  const bindings: Binding[] = [bind(u.x)];
  const reads: number[] = [u.x];
  let norm: lib.GemvShape["norm"];
  if (u.norm !== undefined) {
    const nn = nodes[u.norm];
    norm = { eps: nn.attrs.eps!, weight: floatOf(nodes[nn.inputs[1]]) };
    bindings.push(bind(nn.inputs[1]));
    reads.push(nn.inputs[1]);
  }
  const parts: lib.GemvPart[] = u.parts.map((pp) => {
    const N = numel(nodes[pp.matmuls[0]].shape);
    const part: lib.GemvPart = { n: N, kind: pp.act !== undefined ? "silu_mul" : pp.rope !== undefined ? "rope" : "dot" };
    if (pp.gelu) part.gelu = true;
    for (const m of pp.matmuls) bindings.push(bind(nodes[m].inputs[1]));
    reads.push(...pp.matmuls.map((m) => nodes[m].inputs[1]));
    if (pp.bias) {
      part.bias = true;
      for (const bi of pp.bias) bindings.push(bind(bi));
      reads.push(...pp.bias);
    }
    if (pp.residual !== undefined) {
      part.residual = true;
      bindings.push(bind(pp.residual));
      reads.push(pp.residual);
    }
    let pos: number | undefined;
    if (pp.rope !== undefined) {
      const r = nodes[pp.rope];
      const [, , hd] = r.shape, dims = r.attrs.dims ?? hd;
      part.rope = { hd, rot: dims, style: r.attrs.style! };
      bindings.push(ropeTable(cx, r.attrs.theta!, dims, r.inputs[2]));
      pos = r.inputs[1];
    }
    if (pp.update !== undefined) {
      pos = nodes[pp.update].inputs[2];
      part.cap = nodes[pp.update].shape[0];
    }
    if (pos !== undefined) {
      part.pos = itype(nodes[pos].dtype);
      bindings.push(bind(pos));
      reads.push(pos);
    }
    const outDt = nodes[pp.out].dtype;
    if (outDt !== "f32") part.out = floatOf(nodes[pp.out]);
    bindings.push(bind(pp.out));
    return part;
  });
  // Marked matmuls (plan.ts keeps them apart from unmarked ones) or the option: the integer path.
  const xq = hasXq(wn.dtype) && (nodes[u.parts[0].matmuls[0]].attrs.xq || (opts.quantizedX ?? !!caps.dot4));
  const k = lib.gemv(caps, { k: K, w: wn.dtype as lib.WType, norm, parts, xq, tune: opts.gemvTune });
  const outBytes = u.parts.reduce((a, pp) => a + (pp.update !== undefined ? byteSize(nodes[pp.out].dtype, numel(nodes[pp.matmuls[0]].shape)) : p.values[pp.out].bytes), 0);
  const flops = u.parts.reduce((a, pp) => a + 2 * K * numel(nodes[pp.matmuls[0]].shape) * pp.matmuls.length, 0);
  kernel(k, bindings, { bytes: bytesOfIds(reads) + outBytes, flops });
}

function movement(cx: LowerContext, src: number, n: Node, s: { offset: number; strides: number[] }, d: { offset: number; strides: number[] }, shape: number[]): void {
  const k = stridedCopy(cx.caps, { shape, elem: etype(n.dtype), src: s, dst: d });
  cx.kernel(k, [cx.bind(src), cx.bind(n.id)], { bytes: 2 * numel(shape) * (cx.p.values[n.id].bytes / Math.max(numel(n.shape), 1)), flops: 0 });
}

function lowerGroup(cx: LowerContext, u: Extract<Unit, { k: "group" }>): void {
  const { p, nodes, caps, bind, kernel, bytesOfIds } = cx;
  const root = nodes[u.group.root];
  const n = numel(root.shape);
  const inputs: EwInput[] = [];
  const inputIds: number[] = [];
  const inputIndex = new Map<number, number>();
  const member = new Set(u.group.nodes);
  const expr = (id: number): EwExpr => {
    const x = nodes[id];
    if (!member.has(id)) {
      if (x.op === "literal" && x.attrs.data === undefined && x.dtype !== "bool") return { c: x.attrs.value!, t: ctype(x.dtype) };
      let k = inputIndex.get(id);
      if (k === undefined) {
        k = inputs.length;
        inputIndex.set(id, k);
        inputs.push({ type: etype(x.dtype), len: numel(x.shape) });
        inputIds.push(id);
      }
      const v: EwExpr = { in: k };
      return x.dtype === "bool" ? { op: "ne", args: [v, { c: 0, t: "u32" }] } : v;
    }
    const a = x.inputs.map(expr);
    switch (x.op) {
      case "broadcast": return a[0];
      case "cast": return { cast: ctype(x.dtype), a: a[0] };
      case "silu": return { op: "silu", args: a };
      case "gelu": return { op: "gelu", args: a };
      case "silu_mul": return { op: "mul", args: [{ op: "silu", args: [a[0]] }, a[1]] };
      case "select": return { op: "select", args: a };
      default: return { op: x.op as "add", args: a };
    }
  };
  let e = expr(root.id);
  if (root.dtype === "bool") e = { op: "select", args: [e, { c: 1, t: "u32" }, { c: 0, t: "u32" }] };
  const k = lib.elementwise(caps, { n, inputs, out: etype(root.dtype), expr: e });
  kernel(k, [...inputIds.map(bind), bind(root.id)], { bytes: bytesOfIds(inputIds) + p.values[root.id].bytes, flops: n * u.group.nodes.length });
}

function floatOf(n: Node): "f32" | "f16" | "bf16" {
  if (n.dtype === "f32" || n.dtype === "f16" || n.dtype === "bf16") return n.dtype;
  throw new LoweringError(`norm weight of ${n.dtype}`);
}

/** [product before axis, axis length, product after]. */
function around(shape: number[], axis: number): [number, number, number] {
  return [numel(shape.slice(0, axis)), shape[axis], numel(shape.slice(axis + 1))];
}

/** A literal's bytes, as the oracle stores it. */
function literalBytes(n: Node): Uint8Array {
  const one: Graph = { nodes: [{ ...n, id: 0, inputs: [] }], outputs: { x: 0 }, states: {} };
  const v = evaluate(one).output.x;
  return new Uint8Array(v.buffer.slice(v.byteOffset, v.byteOffset + v.byteLength));
}

/** The oracle's own frequencies (graph/ops/composite.ts expandRope), so a folded table rounds the same way. */
function ropeFreqs(theta: number, dims: number, factors?: Node): Uint8Array {
  const t = new Tracer();
  const n = dims / 2;
  let f = t.recip(t.pow(t.literal(theta, "f32", [n]), t.div(t.mul(t.iota([n], 0, "f32"), 2), dims)));
  if (factors) f = t.div(f, t.node("literal", [], factors.attrs, { dtype: factors.dtype, shape: factors.shape }));
  t.output("f", f);
  const v = evaluate(t.build()).output.f;
  return new Uint8Array(v.buffer.slice(v.byteOffset, v.byteOffset + v.byteLength));
}
