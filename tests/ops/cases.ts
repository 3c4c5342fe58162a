// The op cases of the one harness (tests/ops/ops.test.ts): every graph op and composite, over several shapes
// including odd ones, as small graphs whose inputs are slots (values per step), weights (consts) and State.
import type { DType, ScalarDType } from "../../graph/dtype.ts";
import type { Graph } from "../../graph/ir.ts";
import { type Tensor, toStorage, Tracer } from "../../graph/tracer.ts";
import type { Storage } from "../../graph/dtype.ts";
import { quantize } from "../../llm/formats/quant.ts";
import { quantCases } from "./quant_cases.ts";
import { appendSampler, SAMPLER_SLOT, type SamplerParams, samplerSlot } from "../../llm/sampling.ts";
import { blockF64, type BlockSpec, type BlockStep } from "./block_f64.ts";
import { rng as seeded } from "../rng.ts";
import type { CompileOptions } from "../../kernels/lower.ts";

export interface OpCase {
  name: string;
  graph: Graph;
  /** Slot values by name. */
  slots: Record<string, Storage>;
  /** Weights: role key -> (dtype, shape, bytes as the file stores them). */
  weights: { role: string; dtype: DType; shape: number[]; bytes: Uint8Array }[];
  /** Steps to run (State cases carry across steps; each step gets `slotsAt(step)` when given). */
  steps?: number;
  slotsAt?: (step: number) => Record<string, Storage>;
  /**
   * The bound mode (graph/tolerance.ts): "worst" (default) for one op or a short chain; "expected" for a fused
   * block as deep as a model layer, where the rigorous bound grows past the value itself and tests nothing.
   */
  bounds?: "worst" | "expected";
  /** A float64 evaluation of every step (outputs and State by name), for fused blocks: see block_f64.ts. */
  exact?: () => BlockStep[];
  /**
   * Options the harness compiles the case with on every device: a fusion a target plans only where its caps ask
   * (PlanOptions.gatherCast: where dispatches cost) forced on, so that every device runs the fused kernel.
   */
  compile?: CompileOptions;
}

/** Deterministic uniform numbers in [lo, hi), from the tests' one seeded generator (tests/rng.ts). */
export function rng(seed: number): (lo?: number, hi?: number) => number {
  const r = seeded(seed);
  return (lo = -1, hi = 1) => lo + (hi - lo) * r();
}

export class CaseBuilder {
  readonly t = new Tracer();
  readonly slots: Record<string, Storage> = {};
  readonly weights: OpCase["weights"] = [];
  private n = 0;
  constructor(readonly name: string, private readonly r: (lo?: number, hi?: number) => number) {}
  input(dtype: ScalarDType, shape: number[], lo = -2, hi = 2): Tensor {
    const name = `in${this.n++}`;
    const count = shape.reduce((a, b) => a * b, 1);
    const vals = Array.from({ length: count }, () => {
      const v = this.r(lo, hi);
      return dtype === "bool" ? (v > (lo + hi) / 2 ? 1 : 0) : dtype === "f32" || dtype === "f16" || dtype === "bf16" ? v : Math.floor(v);
    });
    this.slots[name] = toStorage(dtype, vals);
    return this.t.slot(name, { kind: "Input", dtype, shape });
  }
  weight(dtype: DType, shape: number[], scale = 0.5): Tensor {
    const role = `${this.name}.w${this.n++}`;
    const count = shape.reduce((a, b) => a * b, 1);
    const x = new Float32Array(count).map(() => this.r(-scale, scale));
    const bytes = quantize(dtype as "f32", x);
    this.weights.push({ role, dtype, shape, bytes });
    return this.t.const({ role }, dtype, shape);
  }
  /** A weight given as the bytes a file stores (crafted blocks). */
  weightBytes(dtype: DType, shape: number[], bytes: Uint8Array): Tensor {
    const role = `${this.name}.w${this.n++}`;
    this.weights.push({ role, dtype, shape, bytes });
    return this.t.const({ role }, dtype, shape);
  }
  done(outs: Record<string, Tensor>, extra: Partial<OpCase> = {}): OpCase {
    for (const [k, v] of Object.entries(outs)) this.t.output(k, v);
    return { name: this.name, graph: this.t.build(), slots: this.slots, weights: this.weights, ...extra };
  }
}

export function opCases(): OpCase[] {
  const cases: OpCase[] = [];
  let seed = 1;
  const add = (name: string, f: (b: CaseBuilder) => OpCase) => cases.push(f(new CaseBuilder(name, rng(seed++ * 7919))));
  const shapes = [[1], [7], [3, 33], [2, 5, 129]];

  const unary: [string, number, number][] = [
    ["neg", -3, 3], ["abs", -3, 3], ["exp", -5, 5], ["log", 0.01, 10], ["sqrt", 0, 10], ["rsqrt", 0.01, 10],
    ["recip", 0.1, 4], ["sin", -20, 20], ["cos", -20, 20], ["tanh", -4, 4], ["floor", -5, 5],
  ];
  for (const [op, lo, hi] of unary) for (const s of shapes.slice(1, 3)) {
    add(`${op} ${s.join("x")}`, (b) => b.done({ y: b.t.unary(op as "neg", b.input("f32", s, lo, hi)) }));
  }
  add("not bool", (b) => b.done({ y: b.t.not(b.input("bool", [37])) }));
  for (const op of ["add", "sub", "mul", "div", "max", "min"] as const) for (const s of shapes) {
    add(`${op} ${s.join("x")}`, (b) => b.done({ y: b.t.binary(op, b.input("f32", s), b.input("f32", s, 0.5, 3)) }));
  }
  add("pow", (b) => b.done({ y: b.t.pow(b.input("f32", [45], 0.1, 3), b.input("f32", [45], -2, 2)) }));
  for (const op of ["add", "sub", "mul", "div", "mod", "max", "min", "and", "or"] as const) {
    add(`${op} i32`, (b) => b.done({ y: b.t.binary(op, b.input("i32", [3, 11], -50, 50), b.input("i32", [3, 11], 1, 9)) }));
  }
  for (const op of ["eq", "ne", "lt", "le", "gt", "ge"] as const) {
    add(`${op} f32`, (b) => {
      const x = b.input("f32", [40], -2, 2);
      return b.done({ y: b.t.binary(op, x, b.t.floor(b.input("f32", [40], -2, 2))) });
    });
    add(`${op} i32`, (b) => b.done({ y: b.t.binary(op, b.input("i32", [23], -3, 3), b.input("i32", [23], -3, 3)) }));
  }
  add("select", (b) => b.done({ y: b.t.select(b.input("bool", [3, 9]), b.input("f32", [3, 9]), b.input("f32", [3, 9])) }));
  for (const [from, to] of [["f32", "i32"], ["i32", "f32"], ["f32", "f16"], ["f16", "f32"], ["f32", "bf16"], ["bf16", "f32"], ["i32", "u32"]] as const) {
    add(`cast ${from}->${to}`, (b) => b.done({ y: b.t.cast(b.input(from, [33], -300, 300), to) }));
  }
  add("fused group with broadcast", (b) => {
    const x = b.input("f32", [4, 17]), y = b.input("f32", [17]), z = b.input("f32", [4, 17]);
    return b.done({ y: b.t.mul(b.t.add(x, b.t.broadcast(y, [4, 17])), b.t.exp(b.t.mul(z, 0.5))) });
  });
  for (const fn of ["sum", "max", "min"] as const) for (const axis of [0, 1, 2]) {
    add(`reduce ${fn} axis ${axis}`, (b) => b.done({ y: b.t.reduce(fn, b.input("f32", [3, 10, 7]), axis) }));
  }
  for (const axis of [1, 0]) add(`argmax axis ${axis}`, (b) => b.done({ y: b.t.argmax(b.input("f32", [5, 301]), axis) }));
  for (const dt of ["f32", "f16", "bf16", "q8_0", "q4_0"] as const) for (const [batch, n, k] of [[1, 33, 64], [3, 17, 96], [1, 129, 256], [64, 33, 96], ...(dt.startsWith("q") ? [] : [[300, 67, 131]])]) {
    // x as hi + lo parts where a tensor-core path takes the rows (PTX, >= 16 rows of bf16): the f32 bound holds
    // there; x rounded once (the prefill default) is checked against float64 in tests/kernels/mma_cases.ts (and
    // the cooperative matrices', which have no split and so leave these to the FMA kernel, in coop_matmul.test.ts)
    add(`matmul ${dt} ${batch}x${n}x${k}`, (b) => b.done({ y: b.t.matmul(b.input("f32", [batch, k]), b.weight(dt, [n, k])) }, { compile: { mmaSplit: true } }));
  }
  add("matmul + residual", (b) => {
    const x = b.input("f32", [2, 64]);
    return b.done({ y: b.t.add(b.input("f32", [2, 40]), b.t.matmul(x, b.weight("f32", [40, 64]))) });
  });
  add("matmul + bias", (b) => {
    const x = b.input("f32", [1, 64]);
    return b.done({ y: b.t.add(b.t.matmul(x, b.weight("bf16", [40, 64])), b.weight("f32", [40])) });
  });
  add("state f16 cache written from an f32 row (cast in the update)", (b) => {
    const st = b.t.state("cache16", "f16", [6, 8]);
    const row = b.input("f32", [1, 8]);
    const pos = b.t.slot("pos", { kind: "Pos", dtype: "i32", shape: [1] });
    b.slots.pos = new Int32Array([3]);
    const next = b.t.updateSlice(st, b.t.cast(row, "f16"), pos, 0);
    b.t.writeState("cache16", next);
    return b.done({ y: b.t.cast(b.t.reshape(next, [48]), "f32") });
  });
  add("matmul batched temps", (b) => b.done({ y: b.t.matmul(b.input("f32", [3, 5, 9]), b.input("f32", [3, 7, 9])) }));
  for (const dt of ["f32", "f16", "q8_0"] as const) {
    add(`gather ${dt}`, (b) => {
      const ids = b.input("i32", [3], 0, 40);
      return b.done({ y: b.t.gather(b.weight(dt, [40, 64]), ids) });
    });
  }
  for (const dt of ["f16", "bf16"] as const) {
    // An embedding lookup: the gather and its cast as one kernel (bit-exact: both widen exactly).
    add(`gather ${dt} + cast to f32, one kernel`, (b) => {
      const ids = b.input("i32", [3], 0, 40);
      return b.done({ y: b.t.cast(b.t.gather(b.weight(dt, [40, 72]), ids), "f32") }, { compile: { gatherCast: true } });
    });
  }
  // Qwen3 / Gemma 3 q/k norms: per-head rmsnorms of one gemv's outputs, their ropes and K's cache write as one
  // kernel (a two-part norm_rope: q [1, 4, hd] and k [1, 2, hd]), over two positions; a partial rotation, and a
  // head narrower than the subgroup (lanes without a pair).
  for (const [hd, rot, style, kv] of [[32, 32, "half", "f16"], [64, 32, "adjacent", "f32"], [128, 128, "half", "bf16"]] as const) {
    add(`q and k head norms + rope + cache write, one kernel (hd ${hd}, rot ${rot}, ${style}, ${kv} cache)`, (b) => {
      const x = b.input("f32", [1, 48]);
      const pos = b.t.slot("pos", { kind: "Pos", dtype: "i32", shape: [1] });
      b.slots.pos = new Int32Array([2]);
      const q = b.t.reshape(b.t.matmul(x, b.weight("bf16", [4 * hd, 48])), [1, 4, hd]);
      const k = b.t.reshape(b.t.matmul(x, b.weight("bf16", [2 * hd, 48])), [1, 2, hd]);
      const o = { theta: 10000, style, dims: rot };
      // Gemma 3's weights are 1 + w (folded into the kernel's weight load), Qwen3's w.
      const nw = () => (hd === 64 ? b.t.add(b.weight("f32", [hd], 0.5), b.t.literal(1, "f32", [hd])) : b.weight("f32", [hd], 1));
      const qr = b.t.rope(b.t.rmsnorm(q, nw(), 1e-6), pos, o);
      const kr = b.t.rope(b.t.rmsnorm(k, nw(), 1e-6), pos, o);
      const st = b.t.state(`kc${hd}`, kv, [6, 2, hd]);
      b.t.writeState(`kc${hd}`, b.t.updateSlice(st, kv === "f32" ? kr : b.t.cast(kr, kv), pos, 0));
      return b.done({ q: qr }, { compile: { normRope: true }, steps: 2, slotsAt: (s) => ({ pos: new Int32Array([2 + 3 * s]) }) });
    });
  }
  // Gemma's post-norms: h + rmsnorm(o, 1 + w) as one kernel (the residual add and the weight's add folded in).
  for (const [rows, n, plus, res] of [[1, 64, true, true], [3, 127, false, true], [2, 96, true, false]] as const) {
    add(`rmsnorm${plus ? " (1 + w)" : ""}${res ? " + residual" : ""} ${rows}x${n}, one kernel`, (b) => {
      const x = b.input("f32", [rows, n], -3, 3);
      const w = plus ? b.t.add(b.weight("f32", [n], 0.5), b.t.literal(1, "f32", [n])) : b.weight("f32", [n], 1);
      const y = b.t.rmsnorm(x, w, 1e-6);
      return b.done({ y: res ? b.t.add(b.input("f32", [rows, n]), y) : y }, { compile: { normAdd: true } });
    });
  }
  add("reshape+permute", (b) => b.done({ y: b.t.permute(b.t.reshape(b.input("f32", [6, 35]), [2, 3, 5, 7]), [3, 1, 0, 2]) }));
  add("broadcast", (b) => b.done({ y: b.t.broadcast(b.input("f32", [3, 1, 5]), [2, 3, 4, 5]) }));
  add("slice", (b) => b.done({ y: b.t.slice(b.input("f32", [5, 9, 4]), [1, 2, 0], [4, 9, 3]) }));
  add("concat", (b) => b.done({ y: b.t.concat([b.input("f32", [3, 4]), b.input("f32", [3, 7]), b.input("f32", [3, 1])], 1) }));
  add("iota", (b) => b.done({ y: b.t.add(b.t.iota([4, 6], 1, "i32"), b.input("i32", [4, 6], 0, 3)) }));
  for (const s of [[1, 64], [3, 127]]) {
    add(`rmsnorm ${s.join("x")}`, (b) => b.done({ y: b.t.rmsnorm(b.input("f32", s), b.weight("f32", [s[1]], 1), 1e-5) }));
    add(`layernorm ${s.join("x")}`, (b) => b.done({ y: b.t.layernorm(b.input("f32", s), b.weight("f32", [s[1]], 1), b.weight("f32", [s[1]], 1), 1e-5) }));
    add(`softmax ${s.join("x")}`, (b) => b.done({ y: b.t.softmax(b.input("f32", s, -8, 8)) }));
  }
  for (const style of ["adjacent", "half"] as const) for (const [R, H, D, dims] of [[1, 4, 8, 8], [3, 2, 16, 8], [2, 3, 64, 64]]) {
    add(`rope ${style} ${R}x${H}x${D}/${dims}`, (b) => {
      const x = b.input("f32", [R, H, D]);
      const pos = b.input("i32", [R], 0, 2000);
      return b.done({ y: b.t.rope(x, pos, { theta: 10000, style, dims }) });
    });
  }
  for (const [R, H, KVH, D, C] of [[1, 4, 2, 8, 16], [3, 8, 4, 16, 37], [1, 6, 6, 64, 128]]) {
    add(`attention ${R}x${H}/${KVH}x${D} cap ${C}`, (b) => {
      const q = b.input("f32", [R, H, D]), k = b.input("f32", [C, KVH, D]), v = b.input("f32", [C, KVH, D]);
      const pos = b.t.slot("pos", { kind: "Pos", dtype: "i32", shape: [1] });
      b.slots.pos = new Int32Array([Math.floor(C / 2) - R]);
      return b.done({ y: b.t.attention(q, k, v, b.t.causalMask(pos, R, C), 1 / Math.sqrt(D)) });
    });
  }
  // Paged attention: each row with its own position and block table row over a shuffled pool; rows 0..1 share
  // a table with consecutive positions (a prefill chunk), the others are decode rows of other sequences.
  // With a window and a soft cap (Gemma 2 and 3, Mistral's sliding layers): each row sees its last `window` positions.
  for (const [R, H, KVH, D, B, MB, NB, kv, window, softcap] of [
    [1, 4, 2, 8, 4, 3, 5, "f32"], [4, 8, 4, 16, 4, 5, 12, "f32"], [3, 6, 6, 64, 16, 2, 4, "f32"], [5, 4, 2, 32, 8, 4, 9, "f16"],
    [3, 4, 2, 16, 16, 40, 48, "f32"], // 640 positions: split into chunks where the target splits
    [4, 8, 4, 16, 4, 5, 12, "f32", 5, 2.5], [5, 4, 2, 32, 8, 4, 9, "f16", 7], [3, 4, 2, 16, 16, 40, 48, "f32", 100, 30],
    [2, 4, 2, 8, 4, 3, 5, "f32", undefined, 0.5],
  ] as const) {
    const extra = `${window ? ` window ${window}` : ""}${softcap ? ` softcap ${softcap}` : ""}`;
    add(`paged_attention ${R}x${H}/${KVH}x${D} block ${B}x${MB} of ${NB} ${kv}${extra}`, (b) => {
      const q = b.input("f32", [R, H, D]), k = b.input(kv, [NB * B, KVH, D]), v = b.input(kv, [NB * B, KVH, D]);
      const r = rng(R * 131 + D);
      const table = new Int32Array(R * MB), pos = new Int32Array(R);
      for (let i = 0; i < R; i++) {
        for (let j = 0; j < MB; j++) table[i * MB + j] = Math.floor(r(0, NB));
        pos[i] = Math.floor(r(0, MB * B));
      }
      if (R > 1) {
        table.copyWithin(MB, 0, MB);
        pos[0] = Math.min(pos[0], MB * B - 2);
        pos[1] = pos[0] + 1;
      }
      b.slots.table = table;
      b.slots.pos = pos;
      const tb = b.t.slot("table", { kind: "SlotMap", dtype: "i32", shape: [R, MB] });
      const ps = b.t.slot("pos", { kind: "Pos", dtype: "i32", shape: [R] });
      return b.done({ y: b.t.pagedAttention(q, k, v, tb, ps, { scale: 1 / Math.sqrt(D), block: B, window, softcap }) });
    });
  }
  // What no kernel computes directly, decomposed before planning (kernels/decomp/graph.ts): a composite becomes
  // its expansion, an inner-axis update an axis-0 update between permutes.
  add("attention under a general mask, value width 12 != head width 8, f16 K with f32 V (expanded)", (b) => {
    const q = b.input("f32", [2, 4, 8]), k = b.input("f16", [6, 2, 8]), v = b.input("f32", [6, 2, 12]);
    const mask = b.t.or(b.input("bool", [2, 6]), b.t.lt(b.t.iota([2, 6], 1, "i32"), 1)); // every row sees something
    return b.done({ y: b.t.attention(q, k, v, mask, 0.35) });
  });
  add("attention with a causal mask, value width 4 != head width 8 (expanded)", (b) => {
    const pos = b.t.slot("pos", { kind: "Pos", dtype: "i32", shape: [1] });
    b.slots.pos = new Int32Array([3]);
    const q = b.input("f32", [2, 4, 8]), k = b.input("f32", [7, 2, 8]), v = b.input("bf16", [7, 2, 4]);
    return b.done({ y: b.t.attention(q, k, v, b.t.causalMask(pos, 2, 7), 0.35) });
  });
  for (const extra of [{}, { window: 3, softcap: 1.5 }]) {
    add(`paged_attention over f16 K and f32 V${extra.window ? ", window 3, softcap 1.5" : ""} (expanded)`, (b) => {
      const q = b.input("f32", [2, 4, 8]), k = b.input("f16", [12, 2, 8]), v = b.input("f32", [12, 2, 8]);
      b.slots.table = new Int32Array([2, 0, 1, 2]);
      b.slots.pos = new Int32Array([5, 7]);
      const tb = b.t.slot("table", { kind: "SlotMap", dtype: "i32", shape: [2, 2] });
      const ps = b.t.slot("pos", { kind: "Pos", dtype: "i32", shape: [2] });
      return b.done({ y: b.t.pagedAttention(q, k, v, tb, ps, { scale: 0.35, block: 4, ...extra }) });
    });
  }
  add("softmax along axis 0 (expanded)", (b) => b.done({ y: b.t.softmax(b.input("f32", [5, 9], -8, 8), 0) }));
  add("dynamic_update_slice along axis 1 (permuted to axis 0)", (b) => {
    const off = b.t.slot("off", { kind: "Input", dtype: "i32", shape: [1] });
    b.slots.off = new Int32Array([3]);
    return b.done({ y: b.t.updateSlice(b.input("f32", [4, 9, 3]), b.input("f32", [4, 2, 3]), off, 1) });
  });
  for (const op of ["lt", "le", "gt", "ge"] as const) {
    add(`${op} bool`, (b) => b.done({ y: b.t.binary(op, b.input("bool", [29]), b.input("bool", [29])) }));
  }
  add("causal_mask", (b) => {
    const pos = b.t.slot("pos", { kind: "Pos", dtype: "i32", shape: [1] });
    b.slots.pos = new Int32Array([5]);
    return b.done({ y: b.t.causalMask(pos, 3, 11) });
  });
  for (const op of ["silu", "gelu"] as const) add(op, (b) => b.done({ y: b.t.unary(op as "neg", b.input("f32", [77], -6, 6)) }));
  add("silu_mul", (b) => b.done({ y: b.t.siluMul(b.input("f32", [3, 50], -6, 6), b.input("f32", [3, 50])) }));

  // State: a K-cache-like buffer written at pos (DynamicUpdateSlice) or through a write map (scatter), carried
  // over several steps, with the updated cache also read by the step.
  for (const kind of ["update_slice", "scatter"] as const) {
    add(`state ${kind}`, (b) => {
      const C = 9, W = [2, 3];
      const st = b.t.state("cache", "f32", [C, ...W]);
      const row = b.input("f32", [1, ...W]);
      const pos = b.t.slot("pos", { kind: kind === "scatter" ? "WriteMap" : "Pos", dtype: "i32", shape: [1] });
      const next = kind === "scatter" ? b.t.scatter(st, row, pos) : b.t.updateSlice(st, row, pos, 0);
      b.t.writeState("cache", next);
      return b.done({ y: b.t.sum(b.t.reshape(next, [C, 6])) }, {
        steps: 6,
        slotsAt: (step) => ({ in0: new Float32Array(6).map(rng(99 + step)), pos: new Int32Array([kind === "scatter" ? (step * 4) % C : step]) }),
      });
    });
  }

  // On-device sampling (graph/sample.ts): one row per sampler configuration, rows with NaN / Inf logits,
  // replayed with new counters and a changed temperature (slot values, the same entry).
  for (const [rows, V, spread] of [[10, 97, 2], [4, 300, 8]] as const) {
    add(`sample ${rows}x${V}`, (b) => {
      const x = b.input("f32", [rows, V], -spread, spread);
      const xs = b.slots.in0 as Float32Array;
      xs[V + 3] = NaN;
      xs[2 * V + 7] = -Infinity;
      const cfgs: SamplerParams[] = [
        { temperature: 0 }, {}, { temperature: 0.8, topK: 40, topP: 0.9 }, { temperature: 1, topK: 5 }, { temperature: 0.7, topP: 0.5 },
        { temperature: 1.2, minP: 0.1 }, { temperature: 1 }, { temperature: 0.9, topK: 20, topP: 0.95, minP: 0.05 },
      ];
      const words = (step: number, t = 1) =>
        samplerSlot(Array.from({ length: rows }, (_, r) => {
          const c = cfgs[(r + step) % cfgs.length];
          return { ...c, temperature: (c.temperature ?? 0) * t, seed: 11 };
        }), Array.from({ length: rows }, (_, r) => step * 100 + r), rows);
      b.slots[SAMPLER_SLOT] = words(0);
      appendSampler(b.t, x, { output: "y" });
      return b.done({}, { steps: 3, slotsAt: (step) => ({ [SAMPLER_SLOT]: words(step, step === 2 ? 1.5 : 1) }) });
    });
  }

  // Fused batch-1 gemv units (graph/plan.ts planGemv): an rmsnorm folded into the matmuls that read it, q/k/v
  // in one kernel with bias, rope at the slot's position, the K/V cast and in-place cache write; gate/up with
  // silu_mul; a residual add; odd widths, partial rotary dims, f32 and f16 caches, an rmsnorm that is also an
  // output (not folded). Several steps, so the cache rows land at moving positions.
  const decodeBlock = (name: string, o: BlockSpec) =>
    add(name, (b) => {
      const { D, H, KVH, hd, C } = o;
      const t = b.t;
      const x = b.input("f32", [1, D]);
      const pos = t.slot("pos", { kind: "Pos", dtype: "i32", shape: [1] });
      b.slots.pos = new Int32Array([0]);
      const h = t.rmsnorm(x, b.weight("f32", [D], 1), 1e-5);
      const proj = (n: number) => {
        const y = t.matmul(h, b.weight(o.w, [n, D]));
        return o.bias ? t.add(y, b.weight("f32", [n], 0.3)) : y;
      };
      const rope = (v: Tensor) => t.rope(v, pos, { theta: 10000, style: o.style, dims: o.dims });
      const q = rope(t.reshape(proj(H * hd), [1, H, hd]));
      let k = rope(t.reshape(proj(KVH * hd), [1, KVH, hd]));
      let v = t.reshape(proj(KVH * hd), [1, KVH, hd]);
      if (o.kv !== "f32") {
        k = t.cast(k, o.kv);
        v = t.cast(v, o.kv);
      }
      const cache = (kind: string, row: Tensor) => {
        const nm = `${kind}:${D}x${KVH}x${hd}x${C}`; // State names are per engine: one per shape
        const next = t.updateSlice(t.state(nm, o.kv, [C, KVH, hd]), row, pos, 0);
        t.writeState(nm, next);
        return next;
      };
      const att = t.attention(q, cache("k", k), cache("v", v), t.causalMask(pos, 1, C), 1 / Math.sqrt(hd));
      const y = t.add(x, t.matmul(t.reshape(att, [1, H * hd]), b.weight(o.w, [D, H * hd])));
      const h2 = t.rmsnorm(y, b.weight("f32", [D], 1), 1e-5);
      const ff = t.siluMul(t.matmul(h2, b.weight(o.w, [o.ffn, D])), t.matmul(h2, b.weight(o.w, [o.ffn, D])));
      const out = t.add(y, t.matmul(ff, b.weight(o.w, [D, o.ffn])));
      const outs: Record<string, Tensor> = { y: out, q: t.reshape(q, [H * hd]) };
      if (o.normOut) outs.h2 = h2;
      const slotsAt = (step: number) => {
        const r = rng(500 + step);
        return { in0: Float32Array.from({ length: D }, () => r(-2, 2)), pos: new Int32Array([step * 2 + 1]) };
      };
      const shape = `${D}x${KVH}x${hd}x${C}`;
      return b.done(outs, {
        bounds: "expected",
        steps: 3,
        slotsAt,
        exact: () => blockF64(o, b.weights, 3, slotsAt, { k: `k:${shape}`, v: `v:${shape}` }),
      });
    });
  decodeBlock("gemv units: llama-like block bf16, half rope, f16 cache", { w: "bf16", D: 64, H: 4, KVH: 2, hd: 16, C: 8, kv: "f16", style: "half", bias: false, ffn: 96 });
  decodeBlock("gemv units: qwen-like block bf16 with q/k/v bias, odd ffn, f16 cache", { w: "bf16", D: 96, H: 3, KVH: 1, hd: 32, C: 8, kv: "f16", style: "half", bias: true, ffn: 75 });
  decodeBlock("gemv units: f32 block, adjacent partial rope, f32 cache, rmsnorm also an output", { w: "f32", D: 40, H: 2, KVH: 2, hd: 20, C: 7, kv: "f32", style: "adjacent", dims: 12, bias: true, ffn: 33, normOut: true });
  decodeBlock("gemv units: f16 weights, half partial rope, long k", { w: "f16", D: 520, H: 2, KVH: 1, hd: 24, C: 8, kv: "f16", style: "half", dims: 16, bias: false, ffn: 1100 });
  add("gemv units: norm folded into a matmul pair of different dtypes, and a plain matmul", (b) => {
    const t = b.t, x = b.input("f32", [1, 48]);
    const h = t.rmsnorm(x, b.weight("f32", [48], 1), 1e-6);
    const a = t.matmul(h, b.weight("bf16", [17, 48])), c = t.matmul(h, b.weight("f32", [9, 48]));
    return b.done({ a, c, d: t.matmul(x, b.weight("f16", [5, 48])) });
  });
  // argmax over long rows (a vocab) runs in two phases on subgroup targets (kernels/lib/argmax.ts): ties across
  // chunks keep the first index, a row of -inf gives index 0. (No NaN: the oracle never picks one after the
  // first element, the kernels pick the first NaN.)
  add("argmax long rows (two phases): ties across chunks, all -inf", (b) => {
    const n = 40000;
    const x = b.input("f32", [3, n], -4, 4);
    const xs = b.slots.in0 as Float32Array;
    xs[5000] = 9;
    xs[30000] = 9;
    xs[29999] = 9;
    xs[n + 100] = 50;
    xs[n + 39000] = 50;
    xs.fill(-Infinity, 2 * n, 3 * n);
    return b.done({ y: b.t.argmax(x, 1) });
  });
  quantCases(add, decodeBlock);
  return cases;
}
