// Pieces every family's step shares: the step inputs (token, positions, the causal and sliding-window masks),
// weight constants by role, norms with Gemma's (1 + w), and the per-layer K/V write + attention.
//
// One step reads `rows` token rows at positions pos..pos+rows-1 (decode: rows = 1) against K/V State buffers
// `k_cache@L` / `v_cache@L` of shape [cap, kv_heads, head_dim]. Contiguous KV writes the rows at `pos` with
// DynamicUpdateSlice; paged KV scatters them to physical rows `write_map[r]` and reads the logical sequence
// back through `slot_map[t]` (physical row of logical position t). Attention sweeps all of [cap] under the
// causal mask t <= pos + r (and t > pos + r - window on sliding layers), computed in the graph from Slot `pos`.
// Batched (serving, `s.batch`): each row carries its own position (`pos` i32[rows]), block-table row
// (`block_table` i32[rows, maxBlocks]) and pool row to write (`write_slot` i32[rows]); K/V State is a pool
// [blocks * block, kv_heads, head_dim] and attention reads it through each row's table (paged_attention), so
// a row's result does not depend on the other rows of the step.
import type { DType } from "../../graph/dtype.ts";
import type { Tensor, Tracer } from "../../graph/tracer.ts";
import type { WeightRole } from "../../graph/weights.ts";
import { LlmError } from "../errors.ts";
import type { ModelConfig, StepShape, TraceOptions } from "./family.ts";

/** Slot names of the step. */
export const SLOTS = {
  token: "token", pos: "pos", slotMap: "slot_map", writeMap: "write_map", blockTable: "block_table", writeSlot: "write_slot",
  inputRows: "input_rows", inputUse: "input_use",
} as const;

/** State buffer holding the token a fed step sampled last (StepShape.feed). */
export const FED_STATE = "fed_token";

/**
 * Stores the token a fed step sampled (i32[1], or the token column of the sampler's i32[1, 2]) for the next
 * step to read (StepShape.feed); a step traced with feed must call this once, after its sampler.
 */
export function feedToken(g: Tracer, sampled: Tensor): void {
  const tok = sampled.shape.length === 2 ? g.slice(sampled, 1, 0, 1) : sampled;
  g.state(FED_STATE, "i32", [1]);
  g.writeState(FED_STATE, g.reshape(tok, [1]));
}

/** State buffer name of layer `layer`'s K or V cache. */
export function kvState(kind: "k" | "v", layer: number): string {
  return `${kind}_cache@${layer}`;
}

/** What a step reads besides weights: slots, row positions and the masks. */
export interface StepInputs {
  g: Tracer;
  s: StepShape;
  token: Tensor;
  pos: Tensor;
  /** Position of each row: i32[rows]. */
  positions: Tensor;
  /** bool[rows, cap]: t <= pos + r (absent in a batched step: each row's table and position bound it). */
  mask?: Tensor;
  slotMap?: Tensor;
  writeMap?: Tensor;
  /** Batched: i32[rows, maxBlocks] block tables and i32[rows] pool rows to write. */
  blockTable?: Tensor;
  writeSlot?: Tensor;
  /** Masks with a sliding window, by window width (made once per width). */
  windows: Map<number, Tensor>;
  /** Literal rope frequency factors, by the config's array (one node per table, not per layer). */
  factors: Map<readonly number[], Tensor>;
  /** With StepShape.inputRows: bool[rows], where the `input_rows` slot's row replaces the token's row. */
  inputUse?: Tensor;
}

/** Declares the step's slots: token i32[rows], pos i32[1], and when paged slot_map i32[cap], write_map i32[rows]. */
export function stepInputs(g: Tracer, s: StepShape): StepInputs {
  const R = s.rows, C = s.cap;
  const given = g.slot(SLOTS.token, { kind: "Token", dtype: "i32", shape: [R] });
  if (s.feed && (R !== 1 || s.batch)) throw new LlmError(`a fed step has one row and no batch, got ${R} rows${s.batch ? ", batched" : ""}`);
  const token = s.feed ? g.label(g.select(g.lt(given, 0), g.state(FED_STATE, "i32", [1]), given), "token.fed") : given;
  const bt = s.batch;
  const inputUse = s.inputRows ? g.slot(SLOTS.inputUse, { kind: "Input", dtype: "bool", shape: [R] }) : undefined;
  if (bt) {
    const pos = g.slot(SLOTS.pos, { kind: "Pos", dtype: "i32", shape: [R] });
    const blockTable = g.slot(SLOTS.blockTable, { kind: "SlotMap", dtype: "i32", shape: [R, bt.maxBlocks] });
    const writeSlot = g.slot(SLOTS.writeSlot, { kind: "WriteMap", dtype: "i32", shape: [R] });
    return { g, s, token, pos, positions: pos, blockTable, writeSlot, windows: new Map(), factors: new Map(), inputUse };
  }
  const pos = g.slot(SLOTS.pos, { kind: "Pos", dtype: "i32", shape: [1] });
  const slotMap = s.paged ? g.slot(SLOTS.slotMap, { kind: "SlotMap", dtype: "i32", shape: [C] }) : undefined;
  const writeMap = s.paged ? g.slot(SLOTS.writeMap, { kind: "WriteMap", dtype: "i32", shape: [R] }) : undefined;
  const positions = R === 1 ? pos : g.label(g.add(g.broadcast(pos, [R]), g.iota([R])), "positions");
  const mask = g.label(g.causalMask(pos, R, C), "mask");
  // The rows themselves are declared where their width is known (embed).
  return { g, s, token, pos, positions, mask, slotMap, writeMap, windows: new Map(), factors: new Map(), inputUse };
}

/** The causal mask limited to the last `w` positions: t <= pos + r and t > pos + r - w (made once per width). */
export function windowMask(inp: StepInputs, w: number): Tensor {
  const known = inp.windows.get(w);
  if (known) return known;
  if (inp.s.batch) throw new LlmError("a batched (serving) step has no sliding-window attention yet");
  const m = inp.g.label(inp.g.causalMask(inp.pos, inp.s.rows, inp.s.cap, w), `mask.window${w}`);
  inp.windows.set(w, m);
  return m;
}

/** A weight constant by role, in the dtype the store holds it. */
export type WeightFn = (role: string, shape: number[], layer?: number) => Tensor;

export function weightFn(g: Tracer, o: TraceOptions): WeightFn {
  const dt = o.dtypeOf ?? (() => "f32" as DType);
  return (role, shape, layer) => {
    const r: WeightRole = layer === undefined ? { role } : { role, layer };
    return g.const(r, dt(r), shape);
  };
}

/** RMSNorm with the weight applied as (offset + w) (Gemma's Hugging Face weights store w around 0). */
export function norm(g: Tracer, x: Tensor, w: Tensor, c: ModelConfig): Tensor {
  // rmsnorm takes an f32 weight: a half one (a bf16 Hugging Face checkpoint) is widened once per step, which
  // the planner still folds into the gemv that reads the norm.
  const wf = w.dtype === "f32" ? w : g.cast(w, "f32");
  return g.rmsnorm(x, c.normOffset ? g.add(wf, c.normOffset) : wf, c.rmsEps);
}

/** The token rows in f32 (a half-precision table gathers half rows), scaled when the family says so. */
export function embed(g: Tracer, tok: Tensor, inp: StepInputs, c: ModelConfig): Tensor {
  const rows = g.gather(tok, inp.token);
  const x = rows.dtype === "f32" ? rows : g.cast(rows, "f32");
  const scaled = c.embedScale ? g.mul(x, c.embedScale) : x;
  if (!inp.inputUse) return g.label(scaled, "embd");
  // Rows given by value (a projected image) stand in for their tokens' rows unscaled, as transformers'
  // masked_scatter writes them after the embedding (Gemma's scale lives in its embedding module).
  const R = inp.s.rows, D = c.dim;
  const given = g.slot(SLOTS.inputRows, { kind: "Input", dtype: "f32", shape: [R, D] });
  const use = g.broadcast(g.reshape(inp.inputUse, [R, 1]), [R, D]);
  return g.label(g.select(use, given, scaled), "embd");
}

/** A linear projection of x [R, in] by w [out, in], plus a bias when given. */
export function linear(g: Tracer, x: Tensor, w: Tensor, label: string, bias?: Tensor): Tensor {
  const y = g.label(g.matmul(x, w), label);
  return bias ? g.add(y, bias.dtype === "f32" ? bias : g.cast(bias, "f32")) : y;
}

/** Rope of layer `layer`'s q or k heads [R, H, hd]: the local rope on sliding layers when the family has one. */
export function ropeOf(inp: StepInputs, c: ModelConfig, layer: number, x: Tensor, freqs?: Tensor): Tensor {
  const { g } = inp;
  const local = c.ropeLocal && isSliding(c, layer) ? c.ropeLocal : undefined;
  const theta = local ? local.theta : c.ropeTheta;
  const table = local ? local.factors : c.ropeFactors;
  const dims = c.ropeDims ?? c.headDim;
  let factors = freqs;
  if (table) {
    factors = inp.factors.get(table) ?? g.tensor(table, "f32", [dims / 2]);
    inp.factors.set(table, factors);
  }
  return g.rope(x, inp.positions, { theta, style: c.ropeStyle, dims: c.ropeDims, factors });
}

/** Whether layer `l` attends over the sliding window. */
export function isSliding(c: ModelConfig, l: number): boolean {
  return c.slidingWindow !== undefined && (c.slidingLayers?.[l] ?? true);
}

/**
 * Writes this step's K/V rows of layer `l` into its cache States and attends q [R, H, hd] over the cache:
 * softmax(scale · q·kᵀ under the layer's mask) · v, with the family's soft-capping of scores when it has one.
 * Returns [R, H·hd].
 */
export function attend(inp: StepInputs, c: ModelConfig, l: number, q: Tensor, k: Tensor, v: Tensor): Tensor {
  const { g, s } = inp;
  const R = s.rows, C = s.cap, kvDt = s.kvDtype ?? "f32", bt = s.batch;
  const cache = (kind: "k" | "v", row: Tensor) => {
    const name = kvState(kind, l);
    const st = g.state(name, kvDt, [bt ? bt.blocks * bt.block : C, c.kvHeads, c.headDim]);
    const val = kvDt === "f32" ? row : g.cast(row, kvDt);
    const at = inp.writeSlot ?? inp.writeMap;
    const next = at ? g.scatter(st, val, at) : g.updateSlice(st, val, inp.pos, 0);
    g.writeState(name, next);
    return inp.slotMap ? g.gather(next, inp.slotMap) : next;
  };
  const kc = cache("k", k), vc = cache("v", v);
  const scale = c.attnScale ?? 1 / Math.sqrt(c.headDim);
  if (bt && inp.blockTable) {
    const window = isSliding(c, l) ? c.slidingWindow : undefined;
    return g.reshape(g.pagedAttention(q, kc, vc, inp.blockTable, inp.pos, { scale, block: bt.block, window, softcap: c.attnSoftcap }), [R, c.heads * c.headDim]);
  }
  const mask = isSliding(c, l) && c.slidingWindow! < C ? windowMask(inp, c.slidingWindow!) : inp.mask!;
  const att = g.attention(q, kc, vc, mask, scale, c.attnSoftcap);
  return g.reshape(att, [R, c.heads * c.headDim]);
}

/** cap · tanh(x / cap). */
export function softcap(g: Tracer, x: Tensor, cap: number): Tensor {
  return g.mul(g.tanh(g.div(x, cap)), cap);
}

/** Gated FFN: down(act(gate) · up), SwiGLU or GeGLU. */
export function gatedFfn(g: Tracer, c: ModelConfig, gate: Tensor, up: Tensor, down: Tensor): Tensor {
  const h = c.act === "gelu" ? g.mul(g.gelu(gate), up) : g.siluMul(gate, up);
  return g.label(g.matmul(h, down), "ffn.down");
}

/** The output head over the final normed state: logits [R, vocab], soft-capped when the family says so. */
export function head(g: Tracer, c: ModelConfig, xf: Tensor, out: Tensor): Tensor {
  const l = g.matmul(xf, out);
  return g.label(c.finalSoftcap ? softcap(g, l, c.finalSoftcap) : l, "logits");
}
