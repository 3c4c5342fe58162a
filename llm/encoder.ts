// Runs an encoder model (llm/families/bert.ts) on an Executor: frames texts (or query/document pairs) with the
// tokenizer's post-processor, packs them into padded batches, and reads back pooled rows and classifier scores.
//
// Shapes: one entry per (batch, seq) bucket, compiled up front by prepare() (the driver calls it at open), so
// a call does not compile; a text longer than every prepared seq bucket (still within the model's positions)
// compiles one entry of the model's full length at first use. Texts are grouped into batches of at
// most the largest batch bucket, longest first (results come back in input order); each batch pads to the
// smallest buckets that hold it.
import type { EntryId, Executor } from "../backends/executor.ts";
import { ContextOverflowError, InvalidArgumentError, ModelKindError } from "./errors.ts";
import type { ModelHandle } from "./model.ts";
import { ENCODER_SLOTS } from "./families/bert.ts";
import { l2Normalize, type Pooling, POOLINGS, poolWeights } from "./pooling.ts";
import { frame, type FramedInput } from "./tokenizer/template.ts";

/** Batch and sequence buckets prepared at open. */
export interface EncoderShapes {
  /** Texts per step (padded up to the next bucket). */
  batches?: number[];
  /** Tokens per text (padded up to the next bucket). */
  seqs?: number[];
}
export const DEFAULT_BATCHES = [1, 8, 32];
export const DEFAULT_SEQS = [32, 128, 512];

/** Per-call options of embed. */
export interface EmbedOptions {
  /** Pooling (default: the model's sentence-transformers config, else mean). */
  pooling?: Pooling;
  /** L2-normalize each embedding (default: the model's config, else true). */
  normalize?: boolean;
  /** Cut texts longer than the model's positions instead of refusing them (default false). */
  truncate?: boolean;
}

/** What one encode pass returns per text. */
interface Encoded {
  pooled: Float32Array[];
  scores: Float32Array[];
}

export class EncoderRunner {
  readonly #model: ModelHandle;
  readonly #exec: Executor;
  readonly #entries = new Map<string, EntryId>();
  readonly #batches: number[];
  readonly #seqs: number[];
  /** Longest input in tokens (the position table's rows past the offset). */
  readonly maxTokens: number;

  constructor(model: ModelHandle, exec: Executor, shapes: EncoderShapes = {}) {
    if (!model.encoder || !model.family.encode) throw new ModelKindError(model.arch, "is not an encoder model");
    this.#model = model;
    this.#exec = exec;
    this.maxTokens = model.encoder.maxTokens;
    const ints = (v: unknown, what: string) => {
      if (!Array.isArray(v) || v.length === 0 || !v.every((x) => Number.isInteger(x) && x >= 1)) {
        throw new InvalidArgumentError(what, "must be a non-empty array of positive integers");
      }
      return [...new Set(v as number[])].sort((a, b) => a - b);
    };
    this.#batches = ints(shapes.batches ?? DEFAULT_BATCHES, "batches");
    this.#seqs = ints(shapes.seqs ?? DEFAULT_SEQS, "seqs").map((s) => Math.min(s, this.maxTokens)).filter((s, i, a) => a.indexOf(s) === i);
  }

  /** Compiles every (batch, seq) bucket entry; `onEntry` reports progress. */
  prepare(onEntry?: (done: number, total: number) => void): void {
    const total = this.#batches.length * this.#seqs.length;
    let done = 0;
    for (const b of this.#batches) {
      for (const s of this.#seqs) {
        this.#entry(b, s);
        onEntry?.(++done, total);
      }
    }
  }

  #entry(batch: number, seq: number): EntryId {
    const key = `${this.#model.arch}:encode:batch=${batch}:seq=${seq}`;
    let id = this.#entries.get(key);
    if (id !== undefined) return id;
    const { tracer, pooled, scores } = this.#model.family.encode!(this.#model.config, { batch, seq }, { dtypeOf: this.#dtypeOf });
    tracer.output("pooled", pooled);
    if (scores) tracer.output("scores", scores);
    id = this.#exec.addEntry(key, tracer.build());
    this.#entries.set(key, id);
    return id;
  }

  readonly #dtypeOf = (role: { role: string; layer?: number }) => {
    const name = this.#model.map.get(role.layer === undefined ? role.role : `${role.role}@${role.layer}`);
    return this.#model.store.info(name!)!.dtype;
  };

  /** Frames one text (or a pair) by the tokenizer's post-processor; too long is refused unless `truncate`. */
  frame(what: string, text: string, pair?: string, truncate = false): FramedInput {
    return frameInput(this.#model, what, this.maxTokens, text, pair, truncate);
  }

  /** Runs framed inputs in padded batches; pooled rows by `pooling`, and classifier scores when the model has them. */
  async run(inputs: FramedInput[], pooling: Pooling): Promise<Encoded> {
    const D = this.#model.config.dim, L = this.#model.config.encoder!.labels;
    const maxB = this.#batches[this.#batches.length - 1];
    const out: Encoded = { pooled: new Array(inputs.length), scores: [] };
    // Longest first, as sentence-transformers batches: a group pads to lengths close to its own.
    const order = inputs.map((_, i) => i).sort((x, y) => inputs[y].ids.length - inputs[x].ids.length);
    for (let at = 0; at < inputs.length; at += maxB) {
      const idx = order.slice(at, at + maxB), group = idx.map((i) => inputs[i]);
      const longest = Math.max(...group.map((x) => x.ids.length));
      const B = this.#batches.find((b) => b >= group.length)!;
      const S = this.#seqs.find((s) => s >= longest) ?? this.maxTokens;
      const r = await this.#exec.step(this.#entry(B, S), this.#slots(group, B, S, pooling));
      const pooled = r.outputs.pooled as Float32Array, scores = r.outputs.scores as Float32Array | undefined;
      idx.forEach((k, i) => {
        out.pooled[k] = pooled.slice(i * D, (i + 1) * D);
        if (scores) out.scores[k] = scores.slice(i * L, (i + 1) * L);
      });
    }
    return out;
  }

  #slots(group: FramedInput[], B: number, S: number, pooling: Pooling) {
    const e = this.#model.config.encoder!;
    const pad = this.#model.tokenizer.pad ?? 0;
    const token = new Int32Array(B * S).fill(pad), type = new Int32Array(B * S);
    // Padded positions: XLM-R's padding_idx (offset - 1), BERT's 0; neither reaches a real row.
    const position = new Int32Array(B * S).fill(Math.max(0, e.posOffset - 1));
    const valid = new Uint8Array(B * S);
    group.forEach((x, b) => {
      token.set(x.ids, b * S);
      type.set(x.types, b * S);
      for (let i = 0; i < x.ids.length; i++) position[b * S + i] = e.posOffset + i;
      valid.fill(1, b * S, b * S + x.ids.length);
    });
    // Rows past the group are padding rows: one valid key keeps their softmax finite.
    for (let b = group.length; b < B; b++) valid[b * S] = 1;
    const lengths = [...group.map((x) => x.ids.length), ...new Array(B - group.length).fill(1)];
    return {
      [ENCODER_SLOTS.token]: token,
      [ENCODER_SLOTS.type]: type,
      [ENCODER_SLOTS.position]: position,
      [ENCODER_SLOTS.valid]: valid,
      [ENCODER_SLOTS.pool]: poolWeights(lengths, S, B, pooling),
    };
  }

  /** Embeddings of texts, one row each, pooled and normalized as the model's config or `opts` say. */
  async embed(texts: readonly string[], opts: EmbedOptions = {}): Promise<Float32Array[]> {
    const p = this.#model.encoder!.pooling;
    const pooling = opts.pooling ?? p.pooling, normalize = opts.normalize ?? p.normalize;
    const inputs = texts.map((t, i) => this.frame(`texts[${i}]`, t, undefined, opts.truncate));
    const { pooled } = await this.run(inputs, pooling);
    const D = this.#model.config.dim;
    return normalize ? pooled.map((v) => l2Normalize(v, D)) : pooled;
  }

  /** Raw relevance logits of each document for the query, in document order (a one-label classifier head). */
  async rerank(query: string, docs: readonly string[], opts: { truncate?: boolean } = {}): Promise<number[]> {
    if (this.#model.config.encoder!.labels !== 1) {
      throw new ModelKindError(this.#model.arch, this.#model.config.encoder!.labels === 0
        ? "has no classification head: it embeds, it does not rerank (a reranker is a BertForSequenceClassification or XLMRobertaForSequenceClassification with one label)"
        : `has ${this.#model.config.encoder!.labels} labels; a reranker has one`);
    }
    const inputs = docs.map((d, i) => this.frame(`documents[${i}]`, query, d, opts.truncate ?? true));
    const { scores } = await this.run(inputs, "cls");
    return scores.map((s) => s[0]);
  }
}

/**
 * A text (or a pair) framed by the model's post-processor: the bare pieces (no BOS/EOS of the tokenizer's
 * own: the template places them), then the template's tokens and types. Longer than `max` is a
 * ContextOverflowError naming `what`, unless `truncate` (the longer text is cut first).
 */
export function frameInput(model: ModelHandle, what: string, max: number, text: string, pair?: string, truncate = false): FramedInput {
  const bare = (s: string) => model.tokenizer.encode(s, { addBos: false, addEos: false });
  const a = bare(text), b = pair === undefined ? undefined : bare(pair);
  const full = frame(model.encoder!.template, a, b);
  if (full.ids.length <= max) return full;
  if (!truncate) throw new ContextOverflowError(full.ids.length, max, what);
  return frame(model.encoder!.template, a, b, max);
}

/**
 * A decoder-based embedder (Qwen3-Embedding): each text framed by the tokenizer's post-processor (its EOS
 * appended), run through the causal step's final normed hidden state (`hidden`: the driver's encode), pooled
 * (last token by default) and normalized. One text per step: causal rows do not see the padding after them,
 * so a padded shape is exact.
 */
export async function embedWithDecoder(
  model: ModelHandle, ctx: number, texts: string[], o: EmbedOptions, hidden: (ids: number[]) => Promise<Float32Array>,
): Promise<Float32Array[]> {
  const e = model.encoder!, D = model.config.dim;
  const pooling = o.pooling ?? e.pooling.pooling, normalize = o.normalize ?? e.pooling.normalize;
  const out: Float32Array[] = [];
  for (const [i, t] of texts.entries()) {
    const ids = frameInput(model, `texts[${i}]`, ctx, t, undefined, o.truncate).ids;
    const h = await hidden(ids), n = ids.length;
    const v = new Float32Array(D);
    if (pooling === "mean") for (let r = 0; r < n; r++) for (let j = 0; j < D; j++) v[j] += h[r * D + j] / n;
    else v.set(h.subarray((pooling === "cls" ? 0 : n - 1) * D, (pooling === "cls" ? 1 : n) * D));
    out.push(normalize ? l2Normalize(v, D) : v);
  }
  return out;
}

/** Checks embed/rerank arguments (a typed error naming the argument). */
export function checkTexts(v: unknown, what: string): string[] {
  if (!Array.isArray(v) || v.length === 0) throw new InvalidArgumentError(what, "must be a non-empty array of strings");
  v.forEach((t, i) => {
    if (typeof t !== "string") throw new InvalidArgumentError(`${what}[${i}]`, `must be a string, got ${t === null ? "null" : typeof t}`);
    if (t === "") throw new InvalidArgumentError(`${what}[${i}]`, "is empty");
  });
  return [...v] as string[];
}

/** Checks embed options. */
export function checkEmbedOptions(o: EmbedOptions): EmbedOptions {
  if (o.pooling !== undefined && !POOLINGS.includes(o.pooling)) {
    throw new InvalidArgumentError("pooling", `${JSON.stringify(o.pooling)} is not one of ${POOLINGS.join(", ")}`);
  }
  if (o.normalize !== undefined && typeof o.normalize !== "boolean") throw new InvalidArgumentError("normalize", "must be a boolean");
  return o;
}
