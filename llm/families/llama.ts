// The Llama family (Llama 2/3, Mistral, TinyLlama, SmolLM, stories): config, weight roles and their tensor
// names per file format, and the traced step.
//
// One step reads `rows` token rows at positions pos..pos+rows-1 (decode: rows = 1) against K/V State buffers
// `k_cache@L` / `v_cache@L` of shape [cap, kv_heads, head_dim]. Contiguous KV writes the rows at `pos` with
// DynamicUpdateSlice; paged KV scatters them to physical rows `write_map[r]` and reads the logical sequence
// back through `slot_map[t]` (physical row of logical position t). Attention sweeps all of [cap] under the
// causal mask t <= pos + r, computed in the graph from Slot `pos` against an iota.
// Batched (serving): each row carries its own position (`pos` i32[rows]), block-table row (`block_table`
// i32[rows, maxBlocks]) and pool row to write (`write_slot` i32[rows]); K/V State is a
// pool [blocks * block, kv_heads, head_dim] and attention reads it through each row's table (paged_attention).
import type { DType } from "../../graph/dtype.ts";
import type { Graph, RopeStyle } from "../../graph/ir.ts";
import { type Tensor, Tracer } from "../../graph/tracer.ts";
import { roleKey, type WeightMap, type WeightRole, type WeightStore } from "../../graph/weights.ts";

export interface LlamaConfig {
  /** Model width (embedding length). */
  dim: number;
  /** FFN hidden width. */
  hidden: number;
  layers: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  vocab: number;
  rmsEps: number;
  ropeTheta: number;
  /** "adjacent": pairs (2i, 2i+1) as llama2.c and GGUF llama (GGML rope NORM); "half": Hugging Face checkpoints. */
  ropeStyle: RopeStyle;
  /** Rotated dims of each head (default headDim). */
  ropeDims?: number;
  /** Divide rope frequencies by the `rope_freqs` weight (Llama 3.1+ GGUF). */
  ropeFreqFactors?: boolean;
  /** The output projection is the token embedding. */
  tiedEmbeddings: boolean;
  /** q/k/v projections carry biases (Qwen2-style). */
  qkvBias?: boolean;
  /** Trained context length, when the file states one. */
  contextLength?: number;
}

/** Every weight role the Llama step reads. */
export type LlamaRole =
  | "tok_embd" | "output_norm" | "output" | "rope_freqs"
  | "attn_norm" | "attn.q" | "attn.k" | "attn.v" | "attn.o" | "attn.q.bias" | "attn.k.bias" | "attn.v.bias"
  | "ffn_norm" | "ffn.gate" | "ffn.up" | "ffn.down";

/** Slot names of the step. */
export const SLOTS = {
  token: "token", pos: "pos", slotMap: "slot_map", writeMap: "write_map", blockTable: "block_table", writeSlot: "write_slot",
} as const;

/** State buffer name of layer `layer`'s K or V cache. */
export function kvState(kind: "k" | "v", layer: number): string {
  return `${kind}_cache@${layer}`;
}

/** The roles the step reads, with their shapes ([out, in] for matrices). */
export function llamaWeights(c: LlamaConfig): { role: WeightRole; shape: number[] }[] {
  const q = c.heads * c.headDim, kv = c.kvHeads * c.headDim;
  const w: { role: WeightRole; shape: number[] }[] = [
    { role: { role: "tok_embd" }, shape: [c.vocab, c.dim] },
    { role: { role: "output_norm" }, shape: [c.dim] },
  ];
  if (!c.tiedEmbeddings) w.push({ role: { role: "output" }, shape: [c.vocab, c.dim] });
  if (c.ropeFreqFactors) w.push({ role: { role: "rope_freqs" }, shape: [(c.ropeDims ?? c.headDim) / 2] });
  for (let l = 0; l < c.layers; l++) {
    const at = (role: LlamaRole, shape: number[]) => w.push({ role: { role, layer: l }, shape });
    at("attn_norm", [c.dim]);
    at("attn.q", [q, c.dim]);
    at("attn.k", [kv, c.dim]);
    at("attn.v", [kv, c.dim]);
    if (c.qkvBias) {
      at("attn.q.bias", [q]);
      at("attn.k.bias", [kv]);
      at("attn.v.bias", [kv]);
    }
    at("attn.o", [c.dim, q]);
    at("ffn_norm", [c.dim]);
    at("ffn.gate", [c.hidden, c.dim]);
    at("ffn.up", [c.hidden, c.dim]);
    at("ffn.down", [c.dim, c.hidden]);
  }
  return w;
}

const GGUF_NAMES: Record<LlamaRole, string> = {
  tok_embd: "token_embd.weight", output_norm: "output_norm.weight", output: "output.weight",
  rope_freqs: "rope_freqs.weight",
  attn_norm: "attn_norm.weight", "attn.q": "attn_q.weight", "attn.k": "attn_k.weight", "attn.v": "attn_v.weight",
  "attn.o": "attn_output.weight", "attn.q.bias": "attn_q.bias", "attn.k.bias": "attn_k.bias",
  "attn.v.bias": "attn_v.bias", ffn_norm: "ffn_norm.weight", "ffn.gate": "ffn_gate.weight",
  "ffn.up": "ffn_up.weight", "ffn.down": "ffn_down.weight",
};

// llm/formats/llama2c.ts names each layer's slice of llama2.c's stacked arrays `<field>.<layer>`.
const LLAMA2C_NAMES: Partial<Record<LlamaRole, string>> = {
  tok_embd: "token_embedding_table", output_norm: "rms_final_weight", output: "wcls",
  attn_norm: "rms_att_weight", "attn.q": "wq", "attn.k": "wk", "attn.v": "wv", "attn.o": "wo",
  ffn_norm: "rms_ffn_weight", "ffn.gate": "w1", "ffn.up": "w3", "ffn.down": "w2",
};

/** The tensor name of a role in a file format (undefined when the format has no such tensor). */
export function tensorName(format: "gguf" | "llama2c", r: WeightRole): string | undefined {
  const role = r.role as LlamaRole;
  if (format === "gguf") {
    const n = GGUF_NAMES[role];
    return n && (r.layer === undefined ? n : `blk.${r.layer}.${n}`);
  }
  const n = LLAMA2C_NAMES[role];
  return n && (r.layer === undefined ? n : `${n}.${r.layer}`);
}

/**
 * Binds every role the step reads to its tensor name in `format`. With `names` (the store's tensor names),
 * a role whose tensor is missing throws.
 */
export function weightMap(c: LlamaConfig, format: "gguf" | "llama2c", names?: Iterable<string>): WeightMap {
  const have = names ? new Set(names) : undefined;
  const map: WeightMap = new Map();
  for (const { role } of llamaWeights(c)) {
    const name = tensorName(format, role);
    if (!name || (have && !have.has(name))) {
      throw new RangeError(`${format} model has no tensor for ${roleKey(role)}${name ? ` (${name})` : ""}`);
    }
    map.set(roleKey(role), name);
  }
  return map;
}

/** dtype of each role as the store holds it (for tracing quantized or half-precision models). */
export function dtypesFromStore(store: WeightStore, map: WeightMap): (role: WeightRole) => DType {
  return (role) => {
    const name = map.get(roleKey(role));
    const info = name === undefined ? undefined : store.info(name);
    if (!info) throw new RangeError(`no tensor bound to ${roleKey(role)}`);
    return info.dtype;
  };
}

export interface StepShape {
  /** Token rows per step (1 for decode). */
  rows: number;
  /** KV capacity in positions. */
  cap: number;
  /** Scatter through Slot write_map, read through Slot slot_map (the KV buffer holds `cap` physical rows). */
  paged?: boolean;
  /** Element type of the K/V State (default f32). */
  kvDtype?: "f32" | "f16";
  /** Batched rows over a paged KV pool (cap is then unused): see the header. */
  batch?: BatchShape;
}

/** The paged KV pool a batched step reads: `blocks` blocks of `block` positions; tables of `maxBlocks` entries. */
export interface BatchShape {
  block: number;
  blocks: number;
  maxBlocks: number;
}

export interface TraceOptions {
  /** dtype of each weight (default f32); see dtypesFromStore. */
  dtypeOf?: (role: WeightRole) => DType;
}

/**
 * Traces the step and returns the tracer before build, with the logits [rows, vocab] node, so that a caller
 * can append nodes (a sampler) and declare its own outputs. Slots: token i32[rows], pos i32[1] (position of
 * row 0), and when paged slot_map i32[cap], write_map i32[rows].
 */
export function traceLlama(c: LlamaConfig, s: StepShape, o: TraceOptions = {}): { tracer: Tracer; logits: Tensor } {
  const g = new Tracer();
  const R = s.rows, C = s.cap, D = c.dim, hd = c.headDim, kvDt = s.kvDtype ?? "f32";
  const dt = o.dtypeOf ?? (() => "f32" as DType);
  const w = (role: LlamaRole, shape: number[], layer?: number) => {
    const r: WeightRole = layer === undefined ? { role } : { role, layer };
    return g.const(r, dt(r), shape);
  };
  const q = c.heads * hd, kv = c.kvHeads * hd;

  const token = g.slot(SLOTS.token, { kind: "Token", dtype: "i32", shape: [R] });
  const bt = s.batch;
  const pos = g.slot(SLOTS.pos, { kind: "Pos", dtype: "i32", shape: [bt ? R : 1] });
  const table = bt && g.slot(SLOTS.blockTable, { kind: "SlotMap", dtype: "i32", shape: [R, bt.maxBlocks] });
  const writeSlot = bt && g.slot(SLOTS.writeSlot, { kind: "WriteMap", dtype: "i32", shape: [R] });
  const slotMap = s.paged ? g.slot(SLOTS.slotMap, { kind: "SlotMap", dtype: "i32", shape: [C] }) : undefined;
  const writeMap = s.paged ? g.slot(SLOTS.writeMap, { kind: "WriteMap", dtype: "i32", shape: [R] }) : undefined;
  const positions = R === 1 || bt ? pos : g.label(g.add(g.broadcast(pos, [R]), g.iota([R])), "positions");
  const mask = bt ? undefined : g.label(g.causalMask(pos, R, C), "mask");
  const factors = c.ropeFreqFactors ? w("rope_freqs", [(c.ropeDims ?? hd) / 2]) : undefined;
  const rope = (x: Tensor) => g.rope(x, positions, { theta: c.ropeTheta, style: c.ropeStyle, dims: c.ropeDims, factors });
  const tok = w("tok_embd", [c.vocab, D]);

  // A half-precision table gathers half rows; the residual stream is f32 (a block table already dequantizes).
  const rows = g.gather(tok, token);
  let x = g.label(rows.dtype === "f32" ? rows : g.cast(rows, "f32"), "embd");
  for (let l = 0; l < c.layers; l++) {
    x = g.scope(`blk.${l}`, () => {
      const h = g.rmsnorm(x, w("attn_norm", [D], l), c.rmsEps);
      const proj = (role: "attn.q" | "attn.k" | "attn.v", n: number) => {
        const y = g.label(g.matmul(h, w(role, [n, D], l)), role);
        return c.qkvBias ? g.add(y, w(`${role}.bias` as LlamaRole, [n], l)) : y;
      };
      const qh = g.label(rope(g.reshape(proj("attn.q", q), [R, c.heads, hd])), "q");
      let kh = g.label(rope(g.reshape(proj("attn.k", kv), [R, c.kvHeads, hd])), "k");
      let vh = g.reshape(proj("attn.v", kv), [R, c.kvHeads, hd]);
      if (kvDt !== "f32") {
        kh = g.cast(kh, kvDt);
        vh = g.cast(vh, kvDt);
      }
      const cache = (kind: "k" | "v", row: Tensor) => {
        const name = kvState(kind, l);
        const st = g.state(name, kvDt, [bt ? bt.blocks * bt.block : C, c.kvHeads, hd]);
        const at = writeSlot ?? writeMap;
        const next = at ? g.scatter(st, row, at) : g.updateSlice(st, row, pos, 0);
        g.writeState(name, next);
        return slotMap ? g.gather(next, slotMap) : next;
      };
      const scale = 1 / Math.sqrt(hd);
      const att = bt && table
        ? g.pagedAttention(qh, cache("k", kh), cache("v", vh), table, pos, { scale, block: bt.block })
        : g.attention(qh, cache("k", kh), cache("v", vh), mask!, scale);
      const y = g.add(x, g.label(g.matmul(g.reshape(att, [R, q]), w("attn.o", [D, q], l)), "attn.o"));
      const h2 = g.rmsnorm(y, w("ffn_norm", [D], l), c.rmsEps);
      const gate = g.label(g.matmul(h2, w("ffn.gate", [c.hidden, D], l)), "ffn.gate");
      const up = g.label(g.matmul(h2, w("ffn.up", [c.hidden, D], l)), "ffn.up");
      return g.add(y, g.label(g.matmul(g.siluMul(gate, up), w("ffn.down", [D, c.hidden], l)), "ffn.down"));
    });
  }
  const xf = g.rmsnorm(x, w("output_norm", [D]), c.rmsEps);
  const logits = g.label(g.matmul(xf, c.tiedEmbeddings ? tok : w("output", [c.vocab, D])), "logits");
  return { tracer: g, logits };
}

/** The traced step with output `logits` [rows, vocab]. */
export function traceStep(c: LlamaConfig, s: StepShape, o: TraceOptions = {}): Graph {
  const { tracer, logits } = traceLlama(c, s, o);
  tracer.output("logits", logits);
  return tracer.build();
}

/** One-token decode step over KV capacity `cap`. */
export function traceDecode(c: LlamaConfig, s: Omit<StepShape, "rows">, o: TraceOptions = {}): Graph {
  return traceStep(c, { ...s, rows: 1 }, o);
}

/** Prefill of `rows` token rows at positions pos..pos+rows-1 (causal among themselves). */
export function tracePrefill(c: LlamaConfig, s: StepShape, o: TraceOptions = {}): Graph {
  return traceStep(c, s, o);
}
