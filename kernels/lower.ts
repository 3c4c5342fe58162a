// Lowering: a graph -> optimize -> plan -> a Program of library kernels for one target. Each plan unit maps to
// one kernel of kernels/lib (or a few: a concat is a copy per part); bindings point into the program's buffers.
// Scalars that depend on a slot (a position, a write map) stay in their slot buffers: kernels load them.
// This file holds the options, the context every lowerer shares and the dispatch tables; the lowerers with a
// choice of kernels live by concept in kernels/lower/ (matmul, gemv, attention, rope, sampling, collective).
import { isBlock } from "../graph/dtype.ts";
import { evaluate } from "../graph/eval.ts";
import { type Graph, GraphError, type Node, numel, stridesOf } from "../graph/ir.ts";
import { optimize } from "../graph/passes/mod.ts";
import { isElementwise, OPS } from "../graph/ops.ts";
import { type Home, plan, type Plan, type PlanOptions, resultOf, soleReads, type Unit, unitInputs, type Value, viewSource } from "../graph/plan.ts";
import { type Kernel, KernelError } from "./ir.ts";
import type { TargetSet } from "./target.ts";
import type { Binding, Place, Program, ProgramBuffer, Step, Work } from "./program.ts";
import * as lib from "./lib/mod.ts";
import { causalMask, gatherRows, iota, reduceAxis, stridedCopy } from "./lib/generic.ts";
import { decomposeGraph } from "./decomp/graph.ts";
import { around, etype, floatOf, itype, last, LoweringError, rowsOf } from "./lower/common.ts";
import { lowerMatmul, lowerMatmulResidual, mmaPrepGroups } from "./lower/matmul.ts";
import { elementwiseGroup, type GroupExpr, lowerGroup } from "./lower/group.ts";
import { lowerGemv } from "./lower/gemv.ts";
import { lowerAttention, lowerPagedAttention } from "./lower/attention.ts";
import { lowerNormRope, lowerRope } from "./lower/rope.ts";
import { lowerArgmax, lowerLogitsProcess, lowerLogprobs, lowerSample } from "./lower/sampling.ts";
import { lowerCollective } from "./lower/collective.ts";
import { mergeSiblings } from "./lower/siblings.ts";

export { LoweringError } from "./lower/common.ts";
export { MMA_MIN_ROWS, STAGED_MIN_ROWS, TILED_MIN_ROWS, tiledAuto } from "./lower/matmul.ts";

/** Switches for comparisons and tuning runs (bench/); the defaults are what the engine uses. */
export interface CompileOptions extends Omit<PlanOptions, "align"> {
  /**
   * Batch-1 gemv units over block weights with an integer path (graph/ops/qdot.ts XQ_RUNS: q8_0, q4_0, q4_1, q5_0,
   * q5_1, q4_k, q5_k, q6_k) take x quantized to int8 and dot in integers (qdot.ts states the arithmetic; the
   * matmuls behave as if marked attrs.xq). true / false: every such unit / none. Default: on where the target has a
   * fast int8 dot (caps.dot4: PTX sm_61+, Vulkan where the driver reports it accelerated, wgpu on a GPU adapter) for
   * the types measured faster on PTX (kernels/lower/gemv.ts XQ_DEFAULT: q8_0, q4_0, q4_k, q5_k, q6_k), off elsewhere. A matmul
   * marked xq in the graph takes that path whatever this says.
   */
  quantizedX?: boolean;
  /**
   * Gemv units on the integer path take x quantized once per unit by a kernel of its own (kernels/lib/xq_prep.ts:
   * x·g as int8 runs with their scales and sums, and the norm's r, into a scratch buffer the gemv reads at 1 byte
   * a value), not quantized by every team from f32 x; bit-identical results, one more dispatch per unit. A prep
   * with a fused norm sums r in the gemv team's order (in each of its workgroups); "no-norm": only the units
   * without one (o, down). Default: on for the weight types of kernels/lower/gemv.ts XQ_PREP_DEFAULT (every
   * type whose integer path is the default), on every target (a dispatch's fixed cost on Vulkan and WebGPU is far
   * less than what each team's own quantization costs there).
   */
  xqPrep?: boolean | "no-norm";
  /** Cache hints on the decode gemvs' loads (lib.GemvShape.hints, Buffer.reads); default on; "weights": theirs alone. */
  gemvHints?: boolean | "weights";
  /**
   * A prepared x that is a split-K decode attention's output (the o projection's) is combined from the partials in
   * the prep kernel (lib.xqPrep combine): one kernel, not a combine and a prep, the same bits. Default true. H200,
   * session 16: the 8B's q8_0 kernel 2.94 µs a layer against 2.5 + 0.78 for the two; decode within the calls'
   * ±2% spread either way (bench/decode.ts, 8B / 1B / qwen2.5-0.5b tok/s, before / after: q8_0 394.2 / 388.7,
   * 1571 / 1583, 1520 / 1550; q4_k_m 493.5 / 502.2, 1573 / 1552, 1457 / 1434). A first form, four values an
   * invocation, cost 1-4% on five of those six (fewer invocations, each a longer chain of loads).
   */
  combinePrep?: boolean;
  /**
   * Where the o projection's x is prepared (xqPrep, no norm) from a fused decode attention's output (Vulkan,
   * WebGPU: lib.attentionFused), that kernel's combining team writes the prepared x (lib.FusedPrep) and the prep
   * dispatch goes: the same bits. Default true.
   */
  attentionPrep?: boolean;
  /**
   * Kernel steps with no common bytes run as one dispatch (kernels/lower/siblings.ts: a Q4_K_M layer's two x
   * preps and its q/k and v gemvs), within the device's binding limit. Default true; false: never.
   */
  siblings?: boolean;
  /** Overrides the gemv kernels' tuning (kernels/lib/gemv_tune.ts gemvTune). */
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
  /**
   * bf16 matmuls and attention (unless `flash` is false) of at least `coopMinRows` (default COOP_MIN_ROWS) rows on
   * cooperative matrices (kernels/lib/coop_matmul.ts, coop_flash.ts) where the target has `caps.coop` and `mma`
   * is "auto" (prefill chunks; serving entries' matmuls: coopServing): default true, false for the FMA kernels
   * (A/B runs).
   */
  coop?: boolean;
  coopMinRows?: number;
  /**
   * Serving entries' ("all") matmuls, bf16 or GGUF blocks, on cooperative matrices where the target has
   * `caps.coop` (kernels/lib/coop_serving.ts: one summation order per weight shape, x as mmaPrepX's words, hi + lo
   * with mmaSplit): default true; false keeps the FMA kernel (matmul.ts). An object tunes its layout (its ks and
   * cols must be the same at every entry size: bench runs).
   */
  coopServing?: boolean | Partial<lib.CoopServingLayout>;
  /** The cooperative-matrix matmul's tile (tuning runs), where it fits; default coopLayout's. */
  coopLayout?: lib.CoopLayout;
  /** The cooperative-matrix attention's subgroups and block (tuning runs; must fit); default its own. */
  coopFlashLayout?: lib.CoopFlashLayout;
  /** The tiled matmul's tile (tuning runs; the K slice stays the weight type's), where it fits; default tiledLayout's. */
  tiledTile?: Omit<lib.TiledLayout, "bk">;
  /**
   * x as hi + lo parts in the MMA (MmaMatmulShape.split): within ~2^-16 of the f32 path, at two MMAs a tile.
   * Default kernels/lower/matmul.ts mmaSplitDefault: in serving entries, not in prefill chunks (x rounded once).
   */
  mmaSplit?: boolean;
  /**
   * Small outputs (at most OUTPUT_IN_PLACE_BYTES: the token, flags, top-n logprobs) that no kernel reads are
   * written by their kernels straight into their readback buffers, not copied there by a step of their own;
   * default the target's Caps.dispatchGap (the copy is one more dependent command there).
   */
  outputsInPlace?: boolean;
  /**
   * An elementwise group that only the next unit's MMA matmul reads, as x, is computed in that matmul's x
   * preparation instead of a kernel of its own (kernels/lower/matmul.ts mmaPrepGroups: the SiLU product before a
   * prefill chunk's down projection); default true. The same bits either way.
   */
  mmaPrepFuse?: boolean;
  /** The same for flash attention's operands (FlashShape.split); default mmaSplit's. */
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
   * Serving ("all") never for bf16 weights: its rows keep mma_matmul.ts's summation order at every entry size.
   * (GGUF blocks have no other MMA path: mmaBlocks.)
   */
  staged?: boolean;
  stagedMinRows?: number;
  /**
   * Matmuls over GGUF block weights on tensor cores, the blocks dequantized to bf16 in the kernel (kernels/lib/
   * mma_blocks.ts), where the target has caps.mma. true (default): prefill ("auto") chunks of at least MMA_MIN_ROWS
   * rows on the staged kernel (with caps.staging), x rounded once (not where mmaSplit asks for f32-level operands:
   * the weights are rounded); every serving ("all") entry on the register-operand MMA kernel (mma_matmul.ts `blocks`),
   * x as hi + lo. "all": the serving entries on the staged kernel instead, in one layout, k split over workgroups
   * (kernels/lower/matmul.ts servingSplits). H100, 8B Q4_K_M serving steps at batch 1 / 32: FMA 5.24 / 117.1 ms,
   * register MMA 5.6 / 11.3, staged 24.4 / 19.3 (README "Serving quantized models"). false: neither; the FMA
   * kernels, x and W in f32.
   */
  mmaBlocks?: boolean | "all";
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
  /** Split-K attention chunks whole loop trips of the live positions (AttentionShape.live; default true). */
  attentionLive?: boolean;
  /** Query heads per attention team (AttentionShape.group); default 1 (kernels/lower/attention.ts attentionGroup). */
  attentionGroup?: number;
  /** Positions per position group per loop trip of paged (serving) attention (AttentionShape.unroll; default 2). */
  pagedUnroll?: number;
  /** Paged split-K attention keeps its chunk's block-table entries in lanes (AttentionShape.tableInLanes; default true). */
  pagedTableInLanes?: boolean;
  /** Decode and paged attention load each trip's successor's K/V rows ahead (AttentionShape.prefetch; default false, true for the MMA decode attention). */
  attentionPrefetch?: boolean;
  /**
   * Paged (serving) attention on MMA tiles, a warp per (row, KV head, chunk) (kernels/lib/flash_decode.ts) where the
   * target and shape allow (lib.flashDecodeFits); false keeps the subgroup kernel. Default on (kernels/lower/attention.ts).
   */
  pagedFlash?: boolean;
  /** Decode attention over a contiguous cache on MMA tiles where it fits (lib.flashDecodeFits); default on (kernels/lower/attention.ts). */
  decodeFlash?: boolean;
  /** The MMA decode and paged attention's K/V through a cp.async pipeline this many trips deep (FlashDecodeShape.stages; default 3 for decode, 0 for paged). */
  attentionStages?: number;
  /**
   * Split-K decode attention combines in its own last team (lib.attentionFused: one dispatch, not two) where it
   * can, and so does the long-row argmax (lib.argmaxFused); default the target's Caps.dispatchGap (Vulkan and
   * WebGPU, whose every dispatch after a barrier pays a launch and a drain: 4-7 µs on the H200, where PTX's PDL
   * launches overlap).
   */
  attentionFuse?: boolean;
  /**
   * Who counts a finished team of the fused decode attention (lib.FusedCount): "lane" (default) or "team" (lane 0
   * alone: 1/32 of the atomics on an item's counter). Opt-in, and only for targets whose barrier("device") has
   * device memory scope (SPIR-V, JS), never WGSL. The H200's Vulkan measured no gain (session 8, bench/kernels.ts
   * --wall, whole step at pos 64: qwen2.5-0.5b 0.887 against 0.877 ms, 1B 1.018 against 1.022).
   */
  attentionCount?: lib.FusedCount;
  /**
   * The fused decode attention's empty chunks (past pos) neither write nor count, and its combine takes their
   * values without reading them (lib.attentionFused skipEmpty; bit-identical either way). Opt-in; slower on the
   * H200 (session 8, bench/kernels.ts --wall: qwen2.5-0.5b at pos 64 0.938 against 0.877 ms on Vulkan, 1.403 against
   * 1.345 on wgpu; at pos 1024 0.979 against 0.945 on Vulkan).
   */
  attentionSkipEmpty?: boolean;
  /**
   * The fused decode attention combines an item in its first workgroup, its partials in shared memory, while the
   * item's chunks with positions all fall there (lib.attentionFused local: a short context; bit-identical either
   * way). Default on. H200 (session 18, `bench/kernels.ts --wall --backend vulkan,vulkan:no-attention-local`, ms a
   * token, qwen2.5-0.5b / 1B): pos 64 0.789 / 0.957 against 0.884 / 1.031; pos 400 0.918 / 1.042 against 0.908 /
   * 1.044; pos 1024 0.959 / 1.096 against 0.943 / 1.088; pos 1900 0.962 / 1.105 against 0.966 / 1.079 (past the
   * reach of the local combine, 256 positions at these shapes, the kernel costs ~1-2% more).
   */
  attentionLocal?: boolean;
  /**
   * Invocations a workgroup of the fused decode attention (lib.attentionFused wg); default the library's (256: 8
   * teams of 32 lanes). H200 Vulkan, session 18 (`bench/kernels.ts --wall --backend vulkan,vulkan:attention-wg512,
   * vulkan:attention-wg1024`, ms a token, qwen2.5-0.5b / 1B): pos 64 0.789 / 0.957, 0.833 / 0.991, 0.963 / 1.076;
   * pos 400 0.918 / 1.042, 0.869 / 0.999, 1.009 / 1.111; pos 1024 0.959 / 1.096, 0.977 / 1.108, 1.147 / 1.194.
   */
  attentionWorkgroup?: number;
  /** Positions per position group per trip of the attention kernels (AttentionShape.unroll); default the library's. */
  attentionUnroll?: number;
  /** A short row's positions spread a slot or two a team over a workgroup's teams, with tail trips (AttentionShape.spread); default on. */
  attentionSpread?: boolean;
  /** Parts per row of the split sample kernels (kernels/lib/sample_split.ts; 1 = one workgroup per row); default sampleParts'. */
  sampleParts?: number;
  /** Parts per row of the split logprobs kernels (kernels/lib/logprobs_split.ts; 1 = one workgroup per row); default logprobsParts'. */
  logprobsParts?: number;
  /** The sample kernel's top-p bracket path (kernels/lib/sample_bracket.ts); default on (off: for A/B). */
  sampleBracket?: boolean;
  /** The sample kernel skips what a row does not need (SampleShape.lean); default on (off: for A/B). */
  sampleLean?: boolean;
  /** Lists the sample kernel ranks on one subgroup (SampleShape.subgroupList); default the library's. */
  sampleSubgroupList?: number;
}

/**
 * Decompose what has no direct kernel (decomp/graph.ts), optimize, plan and lower a graph for a target. Where a
 * dispatch has a fixed cost of its own (caps.dispatchGap) the plan also fuses what saves one at no extra work
 * (PlanOptions.gatherCast: the embedding lookup and its cast; normRope: per-head q/k norms with their ropes and
 * cache write; normAdd: an rmsnorm with its residual add and its weight's 1 + w), unless opts say otherwise.
 */
export function compileGraph(graph: Graph, target: TargetSet, opts: CompileOptions = {}): Program {
  const g = optimize(decomposeGraph(graph, hasLowerer));
  const gap = target.caps.dispatchGap;
  const fuse = { gatherCast: opts.gatherCast ?? gap, normRope: opts.normRope ?? gap, normAdd: opts.normAdd ?? gap };
  const popts: PlanOptions = { gemv: opts.gemv, ...fuse, align: Math.max(256, target.caps.bindingAlign) };
  const p = plan(g, popts);
  // planned again with no storage for the values matmuls compute in their preparation (the same units)
  const unstored = new Set(mmaPrepGroups(p, target.caps, opts).keys());
  const prog = lower(unstored.size ? plan(g, { ...popts, unstored }) : p, target, opts);
  return opts.siblings ?? true ? mergeSiblings(prog, target.caps) : prog;
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
  /**
   * Elementwise groups the one matmul that reads them computes in its MMA x preparation, by root node
   * (kernels/lower/matmul.ts mmaPrepGroups): no kernel of their own, their value never stored.
   */
  prepGroups: Map<number, GroupExpr>;
  /** Values one unit alone reads, nothing else keeps (graph/plan.ts soleReads). */
  sole: Set<number>;
  /**
   * The latest split-K attention combine: the node it writes, its step, shape and partials (a gemv whose x
   * preparation reads that node alone may take the combine into its prep: kernels/lower/gemv.ts).
   */
  combine?: {
    node: number;
    step: number;
    s: { rows: number; heads: number; hd: number; splits: number };
    part: Binding;
    /** The step is lib.attentionFused (the combine is its tail): its shape, its bindings but the output, its work. */
    fused?: { shape: Parameters<typeof lib.attentionFused>[1]; inputs: Binding[]; work: Work };
  };
}

/** The largest output CompileOptions.outputsInPlace writes straight into its readback buffer. */
export const OUTPUT_IN_PLACE_BYTES = 64 * 1024;

/**
 * The outputs a kernel may write straight into their readback buffers, by the home of their value: an arena
 * value of at most OUTPUT_IN_PLACE_BYTES that no unit reads, one output's alone (not a State write's too).
 */
function outputsInPlace(p: Plan): Map<Home, string> {
  const nodes = p.graph.nodes;
  const source = (id: number) => viewSource(nodes, id);
  const read = new Set(p.units.flatMap((u) => unitInputs(p.graph, u).map(source)));
  const copied = new Set(p.stateCopies.map((s) => source(s.node)));
  const count = new Map<number, number>();
  for (const o of p.outputs) count.set(source(o.node), (count.get(source(o.node)) ?? 0) + 1);
  const m = new Map<Home, string>();
  for (const o of p.outputs) {
    const v = p.values[o.node], src = source(o.node);
    if (v.home.k !== "temp" || v.home.offset < 0 || v.bytes > OUTPUT_IN_PLACE_BYTES) continue;
    if (read.has(src) || copied.has(src) || count.get(src) !== 1 || m.has(v.home)) continue;
    m.set(v.home, o.name);
  }
  return m;
}

function context(p: Plan, target: TargetSet, opts: CompileOptions, direct: Map<Home, string>): LowerContext {
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
    const rb = direct.get(v.home);
    if (rb !== undefined) return { buffer: buf("readback", rb, Math.max(v.bytes, 4)), offset: 0, bytes: Math.max(v.bytes, 4) };
    const at = homeOf(v.home, v);
    return { buffer: at.buffer, offset: at.offset, bytes: Math.max(v.bytes, 4) };
  };
  const bytesOfIds = (ids: number[]) => ids.reduce((a, i) => a + p.values[i].bytes, 0);
  return {
    p, nodes, caps: target.caps, backend: target.backend, opts, buffers, steps, byName, buf, bind, bytesOfIds, mmaWords: {}, prepGroups: new Map(), sole: new Set(),
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
  let direct = opts.outputsInPlace ?? target.caps.dispatchGap ? outputsInPlace(p) : new Map<Home, string>();
  for (;;) {
    const prog = lowerWith(p, target, opts, direct);
    // Only plain stores may land in a readback buffer (no kernel reads it or updates it in place): an output a
    // kernel binds otherwise is copied after all, and the program lowered again.
    const bad = new Set<string>();
    for (const s of prog.steps) {
      if (s.k !== "kernel") continue;
      s.bindings.forEach((b, i) => {
        const pb = prog.buffers[b.buffer];
        if (pb.kind === "readback" && s.kernel.buffers[i].access !== "w") bad.add(pb.name);
      });
    }
    const kept = new Map([...direct].filter(([, name]) => !bad.has(name)));
    if (kept.size === direct.size) return prog;
    direct = kept;
  }
}

function lowerWith(p: Plan, target: TargetSet, opts: CompileOptions, direct: Map<Home, string>): Program {
  const cx = context(p, target, opts, direct);
  const { nodes, buf, bind, copy, byName } = cx;
  cx.prepGroups = mmaPrepGroups(p, cx.caps, opts);
  cx.sole = soleReads(p);
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
    if (direct.get(v.home) !== o.name) copy(bind(o.node), { buffer: rb, offset: 0, bytes: Math.max(v.bytes, 4) });
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
  matmul_residual: lowerMatmulResidual,
  gather_cast(cx, u) {
    const { nodes, caps, bind, kernel } = cx;
    const [t, idx] = nodes[u.gather].inputs, tn = nodes[t];
    const width = numel(tn.shape) / tn.shape[0], count = numel(nodes[idx].shape);
    const k = lib.gather(caps, { rows: count, width, vocab: tn.shape[0], table: tn.dtype as lib.WType, ids: itype(nodes[idx].dtype) });
    kernel(k, [bind(t), bind(idx), bind(u.cast)], gatherWork(cx, t, idx, u.cast));
  },
  norm_rope: lowerNormRope,
  norm_add(cx, u) {
    const { nodes, caps, bind, kernel, simpleWork } = cx;
    const n = nodes[u.norm], i0 = nodes[n.inputs[0]];
    const ins = [n.inputs[0], u.weight, ...(u.residual === undefined ? [] : [u.residual])];
    const k = lib.rmsnorm(caps, { rows: rowsOf(i0), n: last(i0), eps: n.attrs.eps!, weight: floatOf(nodes[u.weight]), weightAdd: u.weightAdd, residual: u.residual !== undefined });
    kernel(k, [...ins.map(bind), bind(u.add ?? u.norm)], simpleWork(u, ins));
  },
  attention: lowerAttention,
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
    if (cx.prepGroups.has(n.id)) return; // computed by the matmul that reads it, never stored
    cx.bind(n.id); // the result's buffer first, whatever the op (buffer ids follow first use)
    if (n.op === "all_reduce" || n.op === "all_gather") return lowerCollective(cx, n);
    const f = NODE_LOWERERS[n.op];
    if (f) return f(cx, n, u);
    if (isElementwise(n.op)) return lowerGroup(cx, elementwiseGroup(n));
    throw new LoweringError(`no kernel for ${n.op}`);
  },
};

/** A node's own kernel(s): its op's lowerer gets the context, the node, and the unit (for work estimates). */
type NodeLowerer = (cx: LowerContext, n: Node, u: Unit) => void;

/** A gather's work: the rows it reads of the table (not the whole table), its ids and its output. */
function gatherWork({ p, nodes }: LowerContext, table: number, ids: number, out: number): Work {
  const rows = nodes[table].shape[0], count = numel(nodes[ids].shape);
  return { bytes: Math.ceil(p.values[table].bytes / rows) * Math.min(count, rows) + p.values[ids].bytes + p.values[out].bytes, flops: numel(nodes[out].shape) };
}

/** One lowerer per op that has a kernel of its own; elementwise ops without one lower as a one-node group. */
export const NODE_LOWERERS: Partial<Record<Node["op"], NodeLowerer>> = {
  matmul: lowerMatmul,
  gather(cx, n) {
    const { nodes, caps, bind, kernel } = cx;
    const ins = n.inputs, out = bind(n.id), work = gatherWork(cx, ins[0], ins[1], n.id);
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
  rope: lowerRope,
  argmax: lowerArgmax,
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
  paged_attention: lowerPagedAttention,
  sample: lowerSample,
  logits_process: lowerLogitsProcess,
  logprobs: lowerLogprobs,
};

function movement(cx: LowerContext, src: number, n: Node, s: { offset: number; strides: number[] }, d: { offset: number; strides: number[] }, shape: number[]): void {
  const k = stridedCopy(cx.caps, { shape, elem: etype(n.dtype), src: s, dst: d });
  cx.kernel(k, [cx.bind(src), cx.bind(n.id)], { bytes: 2 * numel(shape) * (cx.p.values[n.id].bytes / Math.max(numel(n.shape), 1)), flops: 0 });
}

/** A literal's bytes, as the oracle stores it. */
function literalBytes(n: Node): Uint8Array {
  const one: Graph = { nodes: [{ ...n, id: 0, inputs: [] }], outputs: { x: 0 }, states: {} };
  const v = evaluate(one).output.x;
  return new Uint8Array(v.buffer.slice(v.byteOffset, v.byteOffset + v.byteLength));
}
export { SHORT_DECODE, shortDecodeReach } from "./lower/attention.ts";
