// The Driver runs a model on an Executor: it loads the weights once (one executable through the family's
// weight map), adds one entry per step shape it needs, and generates by writing slots and replaying.
//
// Entries are keyed by (program, step shape, sampling suffix, carried inputs): a token, a position or a
// sampler value is a slot value, never part of a key, so generation never compiles after `open`
// (prepareEncode prepares the prefill row shapes up front).
import type { EntryId, Executor } from "../backends/executor.ts";
import { ContextOverflowError, LlmError } from "./errors.ts";
import type { ModelHandle } from "./model.ts";
import { checkContext, type ContextRequest } from "./validate.ts";
import { type ChatMessage, type ChatOptions, chatTokens } from "./chat.ts";
import { appendSampler, GREEDY, readSample, type SamplerParams, samplerSlots, validateSampler } from "./sampling.ts";

export type { SamplerParams } from "./sampling.ts";

export interface DriverOptions {
  /**
   * KV capacity in positions (default: the model's context length, at most 2048). Above the trained length
   * it is refused unless `allowLongContext`; one whose KV cache cannot fit the device is always refused.
   */
  ctx?: number;
  /** Allow `ctx` above the length the model was trained for (quality may degrade past it). */
  allowLongContext?: boolean;
  /** Prefill row shapes prepared up front (default [32, 8]; 1 is always there: the decode step). */
  prefill?: number[];
}

export interface GenerateOptions {
  maxTokens?: number;
  /** Generation ends before any of these strings would be emitted. */
  stop?: string[];
  sampler?: SamplerParams;
  /** Prepend BOS (default: the tokenizer's rule from the model metadata). */
  addBos?: boolean;
  /** Keep generating past end-of-generation tokens (llama.cpp --ignore-eos): they are emitted like any other. */
  ignoreEos?: boolean;
}

export type FinishReason = "eos" | "length" | "stop" | "context";

export interface GenerateResult {
  promptIds: number[];
  generatedIds: number[];
  text: string;
  finish: FinishReason;
  timings: { promptMs: number; generateMs: number; promptTokens: number; generatedTokens: number; tokensPerSecond: number };
}

/** One streamed piece: the token and the text it completes (may be "" while UTF-8 bytes are pending). */
export interface TokenEvent {
  id: number;
  text: string;
}

type Kind = "step" | "hidden";

export class Driver {
  private readonly entries = new Map<string, EntryId>();
  readonly ctx: number;
  private readonly prefillRows: number[];
  private readonly hiddenRows = new Set<number>();

  private constructor(readonly model: ModelHandle, readonly exec: Executor, opts: DriverOptions) {
    this.ctx = checkContext(contextRequest(model, exec, opts));
    this.prefillRows = [...new Set((opts.prefill ?? [32, 8]).filter((r) => r > 1 && r <= this.ctx))].sort((a, b) => b - a);
  }

  /** Loads the model's weights once and prepares the decode step and the prefill shapes. */
  static async open(model: ModelHandle, exec: Executor, opts: DriverOptions = {}): Promise<Driver> {
    const d = new Driver(model, exec, opts);
    await exec.loadWeights(model.store, model.map);
    d.entry("step", 1);
    d.prepareEncode(d.prefillRows);
    return d;
  }

  /**
   * Adds the entries for prompt chunks of these row counts (a step never compiles one later); with
   * `hidden`, also encode entries of these row counts (encode pads a shorter input up to the next one).
   */
  prepareEncode(rows: number[], opts: { hidden?: boolean } = {}): void {
    for (const r of rows) {
      if (r > 1) this.entry("step", r);
      if (opts.hidden && r >= 1 && r <= this.ctx) {
        this.entry("hidden", r);
        this.hiddenRows.add(r);
      }
    }
  }

  private key(kind: Kind, rows: number): string {
    return `${this.model.arch}:${kind}:rows=${rows}:cap=${this.ctx}:${kind === "step" ? "sampler" : "hidden"}`;
  }

  private entry(kind: Kind, rows: number): EntryId {
    const key = this.key(kind, rows);
    let id = this.entries.get(key);
    if (id !== undefined) return id;
    const { tracer, logits, hidden } = this.model.family.trace(this.model.config, { rows, cap: this.ctx }, { dtypeOf: this.dtypeOf });
    if (kind === "step") {
      // Sample from the last row only: a prefill chunk continues from its final position.
      const last = rows === 1 ? logits : tracer.slice(logits, 0, rows - 1, rows);
      appendSampler(tracer, last);
    } else {
      tracer.output("hidden", hidden);
    }
    id = this.exec.addEntry(key, tracer.build());
    this.entries.set(key, id);
    return id;
  }

  private readonly dtypeOf = (role: { role: string; layer?: number }) => {
    const name = this.model.map.get(role.layer === undefined ? role.role : `${role.role}@${role.layer}`);
    const info = name === undefined ? undefined : this.model.store.info(name);
    if (!info) throw new LlmError(`model has no tensor for ${role.role}${role.layer === undefined ? "" : ` of layer ${role.layer}`}`);
    return info.dtype;
  };

  /** Tokenizes a prompt (BOS by the model's rule unless told). */
  tokenize(prompt: string, addBos?: boolean): number[] {
    return this.model.tokenizer.encode(prompt, { addBos });
  }

  /** Runs prompt ids through the prepared shapes from position 0; returns the token sampled after the last. */
  private async prefill(ids: number[], sampler: SamplerParams): Promise<{ token: number; nonFinite: boolean }> {
    let pos = 0;
    let last = { token: -1, nonFinite: false };
    while (pos < ids.length) {
      const left = ids.length - pos;
      const rows = this.prefillRows.find((r) => r <= left) ?? 1;
      const id = this.entry("step", rows);
      last = await this.run(id, ids.slice(pos, pos + rows), pos, sampler);
      pos += rows;
    }
    return last;
  }

  private async run(id: EntryId, tokens: number[], pos: number, sampler: SamplerParams): Promise<{ token: number; nonFinite: boolean }> {
    // The draw's counter is the position it samples at: a seeded generation repeats exactly.
    const r = await this.exec.step(id, {
      token: Int32Array.from(tokens),
      pos: new Int32Array([pos]),
      ...samplerSlots(sampler, pos + tokens.length - 1),
    });
    const s = readSample(r.outputs);
    return { token: s.tokens[0], nonFinite: s.nonFinite[0] === 1 };
  }

  /** Streams generated tokens; the generator's return value is the whole result. */
  async *stream(prompt: string | number[], opts: GenerateOptions = {}): AsyncGenerator<TokenEvent, GenerateResult> {
    const tok = this.model.tokenizer;
    const ids = typeof prompt === "string" ? this.tokenize(prompt, opts.addBos) : [...prompt];
    if (ids.length === 0) throw new LlmError("empty prompt: nothing to condition on (the model adds no BOS)");
    if (ids.length >= this.ctx) throw new ContextOverflowError(ids.length, this.ctx);
    for (const t of ids) if (!(t >= 0 && t < this.model.config.vocab)) throw new LlmError(`token id ${t} is outside the vocabulary of ${this.model.config.vocab}`);
    const maxTokens = opts.maxTokens ?? 256;
    const sampler = opts.sampler ?? GREEDY;
    try {
      validateSampler(sampler);
    } catch (e) {
      throw new LlmError(`sampler: ${(e as Error).message}`);
    }
    const stops = (opts.stop ?? []).filter((s) => s.length > 0);
    this.exec.resetState();

    const t0 = performance.now();
    let next = await this.prefill(ids, sampler);
    const t1 = performance.now();
    const decoder = tok.decoder();
    // Decode the prompt through the streaming decoder so a continuation's leading space is kept.
    for (const t of ids) decoder.push(t);
    const generated: number[] = [];
    let text = "", pending = "";
    let finish: FinishReason = "length";
    let pos = ids.length;
    while (generated.length < maxTokens) {
      if (next.nonFinite) throw new LlmError(`non-finite logits at position ${pos - 1}`);
      if (!opts.ignoreEos && tok.isEog(next.token)) {
        finish = "eos";
        break;
      }
      generated.push(next.token);
      pending += decoder.push(next.token);
      // Hold back text that could still become a stop string.
      const hit = stops.map((s) => (text + pending).indexOf(s, Math.max(0, text.length - s.length))).filter((i) => i >= 0);
      if (hit.length) {
        const cut = Math.min(...hit);
        const piece = (text + pending).slice(text.length, cut);
        if (piece) yield { id: next.token, text: piece };
        text = (text + pending).slice(0, cut);
        pending = "";
        finish = "stop";
        break;
      }
      const hold = Math.max(0, ...stops.map((s) => overlap(text + pending, s)));
      const emit = pending.slice(0, pending.length - hold);
      text += emit;
      pending = pending.slice(emit.length);
      yield { id: next.token, text: emit };
      if (generated.length >= maxTokens) break;
      if (pos >= this.ctx) {
        finish = "context";
        break;
      }
      next = await this.run(this.entry("step", 1), [next.token], pos, sampler);
      pos++;
    }
    if (finish !== "stop") text += pending + decoder.flush();
    const t2 = performance.now();
    return {
      promptIds: ids,
      generatedIds: generated,
      text,
      finish,
      timings: {
        promptMs: t1 - t0,
        generateMs: t2 - t1,
        promptTokens: ids.length,
        generatedTokens: generated.length,
        tokensPerSecond: generated.length > 1 ? (generated.length - 1) / ((t2 - t1) / 1000) : 0,
      },
    };
  }

  /**
   * Streams the assistant's reply to a conversation rendered with the model's chat template (ends at the
   * template's end-of-turn token, which the tokenizer counts as end of generation).
   */
  chatStream(messages: ChatMessage[], opts: GenerateOptions & ChatOptions = {}): AsyncGenerator<TokenEvent, GenerateResult> {
    return this.stream(chatTokens(this.model, messages, opts), opts);
  }

  /** The assistant's whole reply to a conversation (see chatStream). */
  async chat(messages: ChatMessage[], opts: GenerateOptions & ChatOptions = {}): Promise<GenerateResult> {
    const it = this.chatStream(messages, opts);
    for (;;) {
      const r = await it.next();
      if (r.done) return r.value;
    }
  }

  /** Generates to the end and returns the whole result. */
  async generate(prompt: string | number[], opts: GenerateOptions = {}): Promise<GenerateResult> {
    const it = this.stream(prompt, opts);
    for (;;) {
      const r = await it.next();
      if (r.done) return r.value;
    }
  }

  /**
   * Final hidden states (after the output norm) of a sequence of ids from position 0: [ids.length, dim].
   * Runs on the smallest prepared encode shape that fits (rows past the input are padding the causal mask
   * keeps out of the real rows), or compiles the exact shape when none was prepared.
   */
  async encode(ids: number[]): Promise<Float32Array> {
    if (ids.length === 0 || ids.length > this.ctx) throw new ContextOverflowError(ids.length, this.ctx, "input");
    const fits = [...this.hiddenRows].filter((r) => r >= ids.length);
    const shape = fits.length ? Math.min(...fits) : ids.length;
    const id = this.entry("hidden", shape);
    const tokens = new Int32Array(shape).fill(this.model.tokenizer.eos ?? 0);
    tokens.set(ids);
    this.exec.resetState();
    const r = await this.exec.step(id, { token: tokens, pos: new Int32Array([0]) });
    return (r.outputs.hidden as Float32Array).slice(0, ids.length * this.model.config.dim);
  }
}

/**
 * What sizes the context on the device, for checkContext: f32 K and V of every layer per position, plus the
 * attention scores of the widest prefill chunk (rows x heads per position, counted twice for the softmax).
 */
function contextRequest(model: ModelHandle, exec: Executor, opts: DriverOptions): ContextRequest {
  const c = model.config;
  const rows = Math.max(1, ...(opts.prefill ?? [32, 8]));
  let fixed = 0;
  for (const name of model.map.values()) fixed += model.store.info(name)?.byteLength ?? 0;
  return {
    requested: opts.ctx,
    trained: model.contextLength,
    trainedKey: model.format === "gguf" ? `${model.arch}.context_length` : "config.json max_position_embeddings",
    allowLonger: opts.allowLongContext,
    bytesPerPosition: 2 * c.layers * c.kvHeads * c.headDim * 4 + 2 * rows * c.heads * 4,
    bufferBytesPerPosition: c.kvHeads * c.headDim * 4,
    fixedBytes: fixed,
    target: exec.targetSet(),
  };
}

/** Length of the longest suffix of `text` that is a proper prefix of `stop`. */
function overlap(text: string, stop: string): number {
  for (let n = Math.min(stop.length - 1, text.length); n > 0; n--) if (text.endsWith(stop.slice(0, n))) return n;
  return 0;
}
