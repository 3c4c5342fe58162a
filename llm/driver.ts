// The Driver runs a model on an Executor: it loads the weights once (one executable through the family's
// weight map), adds one entry per step shape it needs, and generates by writing slots and replaying.
//
// Entries are keyed by (program, step shape, sampling suffix, carried inputs): a token, a position or a
// sampler value is a slot value, never part of a key, so generation never compiles after `open`
// (prepareEncode prepares the prefill row shapes up front).
//
// One driver runs one call at a time: generate, stream and encode are queued in call order (the executor
// holds one KV state). Arguments are checked when the call is made, before it is queued; a bad one is an
// InvalidArgumentError naming it. An AbortSignal stops a generation before its next token (AbortError, with
// the partial result); close() aborts what runs or waits, then frees the device.
import type { EntryId, Executor } from "../backends/executor.ts";
import { setImmediate } from "node:timers";
import type { Caps } from "../kernels/target.ts";
import { tiledAuto } from "../kernels/lower.ts";
import { AbortError, ContextOverflowError, DriverClosedError, InvalidArgumentError, LlmError, ModelKindError } from "./errors.ts";
import { type ChatMessage, chatImages, type ChatOptions, chatTokens } from "./chat.ts";
import type { ModelHandle } from "./model.ts";
import { appendSampler, COUNT_AT_SLOT, COUNT_VALUE_SLOT, countWord, GREEDY, MAX_LOGIT_BIAS, readSample, type RowContext, type RowLogprobs, type SamplerParams, SamplerSlots, TokenHistory, validateSampler } from "./sampling.ts";
import { compileFormat, Constraint, type ResponseFormat } from "./grammar.ts";
import { type StreamSink, type TokenStream, tokenStream } from "./stream.ts";
import { checkContext, type ContextRequest } from "./validate.ts";
import { checkEmbedOptions, checkTexts, embedWithDecoder, type EmbedOptions, EncoderRunner, type EncoderShapes } from "./encoder.ts";
import { expandImages, type ImageInput, type PromptInput, rowInputs, type RowInputs, tokenizeAround, VisionRunner } from "./vision.ts";
import { SLOTS } from "./families/common.ts";

export type { RowLogprobs, SamplerParams } from "./sampling.ts";
export type { ResponseFormat } from "./grammar.ts";
export type { EmbedOptions, EncoderShapes } from "./encoder.ts";
export type { ImageInput, PromptInput } from "./vision.ts";
export type { TokenEvent, TokenStream } from "./stream.ts";

/** Tokens generated when a call does not say: the library's and the CLI's default. */
export const DEFAULT_MAX_TOKENS = 256;

/** Progress of loading and compiling, for a caller that shows it (the CLI prints it on a terminal). */
export type LoadProgress =
  | { phase: "load"; tensors: number; totalTensors: number; bytes: number; totalBytes: number }
  | { phase: "compile"; entries: number; totalEntries: number };

/** How a Driver is set up. */
export interface DriverOptions {
  /**
   * KV capacity in positions (default: the model's context length, at most 2048). Above the trained length
   * it is refused unless `allowLongContext`; one whose KV cache cannot fit the device is always refused.
   */
  ctx?: number;
  /** Allow a `ctx` above the context length the model was trained for (quality may suffer past it). */
  allowLongContext?: boolean;
  /**
   * Prefill row shapes prepared up front (default prefillDefault(): [2048, 512, 64, 16, 8] where the device
   * has tensor-core tiles and shared-memory staging, [512, 64, 16, 8] with tiles only, [512, 32, 8] on other
   * GPUs (the tiled matmul), [32, 8] on the JS device; 1 is always there: the decode step).
   */
  prefill?: number[];
  /** Called as weights go to the device (per tensor) and as step shapes compile (per entry). */
  onProgress?: (p: LoadProgress) => void;
  /** An encoder model's (batch, seq) buckets compiled at open (default batches [1, 8, 32], seqs [32, 128, 512]). */
  encoder?: EncoderShapes;
}

/** Options of one generation. */
export interface GenerateOptions {
  /** Tokens to generate at most (default DEFAULT_MAX_TOKENS; 0 generates nothing). */
  maxTokens?: number;
  /** Generation ends before any of these strings would be emitted. */
  stop?: string[];
  /** Sampling parameters (default greedy). */
  sampler?: SamplerParams;
  /** Prepend BOS (default: the tokenizer's rule from the model metadata). */
  addBos?: boolean;
  /** Aborts the generation before its next token, or while it waits in the queue: AbortError. */
  signal?: AbortSignal;
  /** Keep generating past end-of-generation tokens (llama.cpp --ignore-eos): they are emitted like any other. */
  ignoreEos?: boolean;
  /**
   * Constrain the output: a JSON schema, any JSON object, or a GBNF/EBNF grammar (compiled by xgrammar; a bad
   * one rejects with a GrammarError). Generation ends when the grammar is complete and the model ends it.
   */
  format?: ResponseFormat;
  /**
   * Images of a vision-language model's prompt, in order: one per image placeholder token (`<image>`) in the
   * prompt, which expands to the image's rows (LLaVA layout). Decoded, resized and normalized as the model's
   * preprocessor config says; the projected rows replace the placeholders' embedding rows.
   */
  images?: ImageInput[];
  /** Embedding rows given by value in place of some prompt tokens' rows (generateWithInputs). */
  inputs?: PromptInput[];
}

/** Why generation ended. */
export type FinishReason = "eos" | "length" | "stop" | "context";

/** The whole result of one generation. */
export interface GenerateResult {
  /** The prompt's token ids (BOS included when added). */
  promptIds: number[];
  /** The generated ids (an end-of-generation token is not included). */
  generatedIds: number[];
  /** The generated text (equal to all streamed events' text joined). */
  text: string;
  /** Why generation ended. */
  finish: FinishReason;
  /** Per generated token, when the sampler asked for logprobs (SamplerParams.logprobs / topLogprobs). */
  logprobs?: RowLogprobs[];
  /** Wall times (ms) of the prompt and of generation, token counts, and decode tokens per second. */
  timings: { promptMs: number; generateMs: number; promptTokens: number; generatedTokens: number; tokensPerSecond: number };
}

type Kind = "step" | "hidden";

function isInt(x: unknown): x is number {
  return typeof x === "number" && Number.isInteger(x);
}

/** Runs one model on one executor; see the top of llm/driver.ts for the queue, abort and close rules. */
export class Driver {
  private readonly entries = new Map<string, EntryId>();
  /** KV capacity in positions. */
  readonly ctx: number;
  private readonly prefillRows: number[];
  private readonly hiddenRows = new Set<number>();
  /** The sampler's slots (one row), rewritten every step. */
  private readonly sampling: SamplerSlots;
  private tail: Promise<unknown> = Promise.resolve();
  private closed = false;
  /** Aborted by close(): every queued or running call listens to it. */
  private readonly closing = new AbortController();

  /** @ignore The loaded model (engine-level). */
  readonly model: ModelHandle;
  /** @ignore The executor it runs on (engine-level). */
  readonly exec: Executor;
  /** An encoder model's runner (embed, rerank); undefined for a generative model. */
  private encoder?: EncoderRunner;
  /** A vision-language model's tower runner; undefined for a text-only model. */
  private vision?: VisionRunner;

  private constructor(model: ModelHandle, exec: Executor, opts: DriverOptions) {
    this.model = model;
    this.exec = exec;
    if (opts.ctx !== undefined && (!isInt(opts.ctx) || opts.ctx < 2)) {
      throw new InvalidArgumentError("ctx", `${String(opts.ctx)} is not an integer >= 2`);
    }
    const prefill = opts.prefill ?? prefillDefault(exec.targetSet().caps);
    if (!Array.isArray(prefill) || !prefill.every((r) => isInt(r) && r >= 1)) {
      throw new InvalidArgumentError("prefill", "must be an array of positive integers");
    }
    // The trained limit (with its override) and the device's memory, before anything is allocated.
    this.ctx = checkContext(contextRequest(model, exec, opts));
    this.prefillRows = [...new Set(prefill.filter((r) => r > 1 && r <= this.ctx))].sort((a, b) => b - a);
    // Entries for the bias and the min_tokens bans; the penalties read token counts in device State.
    this.sampling = new SamplerSlots(1, model.config.vocab, MAX_LOGIT_BIAS + model.tokenizer.eog.size);
  }

  /**
   * Loads the model's weights once and prepares the decode step and the prefill shapes. The driver owns
   * `exec` from here on: close() unloads it. (open() does this for you; this is the engine-level door.)
   * @ignore
   */
  static async open(model: ModelHandle, exec: Executor, opts: DriverOptions = {}): Promise<Driver> {
    const d = new Driver(model, exec, opts);
    const progress = opts.onProgress;
    await exec.loadWeights(model.store, model.map, {
      onTensor: progress && ((tensors, totalTensors, bytes, totalBytes) =>
        progress({ phase: "load", tensors, totalTensors, bytes, totalBytes })),
    });
    if (model.config.encoder) {
      d.encoder = new EncoderRunner(model, exec, opts.encoder);
      d.encoder.prepare((entries, totalEntries) => progress?.({ phase: "compile", entries, totalEntries }));
      return d;
    }
    if (model.config.vision) d.vision = new VisionRunner(model, exec);
    const shapes = [1, ...d.prefillRows];
    // A vision-language model's prompt chunks that hold image rows run steps that take rows by value: prepared
    // too, so a generation compiles nothing but the tower (at its first image).
    const byValue = model.config.vision ? shapes : [];
    const total = shapes.length + byValue.length;
    shapes.forEach((rows, i) => {
      d.entry("step", rows);
      progress?.({ phase: "compile", entries: i + 1, totalEntries: total });
    });
    byValue.forEach((rows, i) => {
      d.entry("step", rows, false, true);
      progress?.({ phase: "compile", entries: shapes.length + i + 1, totalEntries: total });
    });
    // A decoder-based embedder: hidden-state entries for its texts, padded up to these row counts.
    if (model.encoder) {
      for (const r of [32, 128, 512].filter((r) => r <= d.ctx)) {
        d.entry("hidden", r);
        d.hiddenRows.add(r);
      }
    }
    return d;
  }

  /** Aborts what runs or waits in the queue, then unloads the executor (frees the device). Idempotent. */
  async close(): Promise<void> {
    if (!this.closed) {
      this.closed = true;
      this.closing.abort();
      this.tail = this.tail.then(() => {}, () => {}).then(() => this.exec.unload());
    }
    await this.tail;
  }

  /** `await using driver = await open(...)` closes it at the end of the scope. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /** Runs `job` after every call made before it; refused once closed, skipped if aborted while waiting. */
  private enqueue<T>(signal: AbortSignal, job: () => Promise<T>): Promise<T> {
    if (this.closed) return Promise.reject(new DriverClosedError());
    const run = this.tail.then(() => {
      if (this.closed) throw new DriverClosedError();
      if (signal.aborted) throw new AbortError("aborted while waiting in the driver's queue");
      return job();
    });
    this.tail = run.then(() => {}, () => {});
    return run;
  }

  /** Adds the entries for prompt chunks of these row counts (a step never compiles one later); with
   * `hidden`, also encode entries of these row counts (encode pads a shorter input up to the next one).
   */
  prepareEncode(rows: number[], opts: { hidden?: boolean } = {}): void {
    if (this.closed) throw new DriverClosedError();
    if (!Array.isArray(rows) || !rows.every((r) => isInt(r) && r >= 1)) throw new InvalidArgumentError("rows", "must be an array of positive integers");
    for (const r of rows) {
      if (r > 1) this.entry("step", r);
      if (opts.hidden && r >= 1 && r <= this.ctx) {
        this.entry("hidden", r);
        this.hiddenRows.add(r);
      }
    }
  }

  /** The entry key of a step shape. */
  private key(kind: Kind, rows: number, full: boolean, inputs: boolean): string {
    const tail = kind === "step" ? (full ? "sampler+full" : "sampler") : "hidden";
    return `${this.model.arch}:${kind}:rows=${rows}:cap=${this.ctx}:${tail}${inputs ? ":input_rows" : ""}`;
  }

  /**
   * The entry of a step shape, added (compiled) the first time. `full` adds the whole sampler (logits_process
   * with token counts in State, logprobs): a generation that asks for none of it runs the plain draw, which
   * is ~5% faster per step at the 1B shape (bench/sampler.ts) and uploads less per step.
   */
  private entry(kind: Kind, rows: number, full = false, inputs = false): EntryId {
    if (this.encoder) throw new ModelKindError(this.model.arch, "is an encoder: it embeds and reranks (poot embed, poot rerank); it cannot generate text");
    const key = this.key(kind, rows, full, inputs);
    let id = this.entries.get(key);
    if (id !== undefined) return id;
    // A step that takes rows by value (an image's, generateWithInputs' rows) is its own entry (open prepares it for a VLM).
    const { tracer, logits, hidden } = this.model.family.trace(this.model.config, { rows, cap: this.ctx, inputRows: inputs }, { dtypeOf: this.dtypeOf });
    if (kind === "step") {
      // Sample from the last row only: a prefill chunk continues from its final position. Where the logits
      // are a plain matmul of the final hidden rows, only the last row goes through the vocabulary matmul (a
      // 256-row chunk would otherwise spend a quarter of a 1B model's prefill on logits nobody reads).
      const lm = tracer.nodes[logits.id];
      const x = lm.op === "matmul" ? tracer.nodes[lm.inputs[0]] : undefined;
      const last = rows === 1 ? logits
        : x && x.shape.length === 2 && x.shape[0] === rows
        ? tracer.label(tracer.matmul(tracer.slice(x, 0, rows - 1, rows), tracer.nodes[lm.inputs[1]]), "logits.last")
        : tracer.slice(logits, 0, rows - 1, rows);
      // Token counts live in device State (one counts row); each step writes the words of its input tokens
      // (run below): a prefill chunk's prompt marks, a decode step's input token (the previous draw) counted.
      // One scatter planned in place, where counting on the device took a dozen small kernels and three copies
      // of the State per step.
      appendSampler(tracer, last, full ? { process: { entries: this.sampling.entries, rows: { rows: 1, writes: rows } }, logprobs: true } : {});
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
    if (typeof prompt !== "string") throw new InvalidArgumentError("prompt", `must be a string, got ${describe(prompt)}`);
    return this.model.tokenizer.encode(prompt, { addBos });
  }

  /** Checks token ids: integers inside the vocabulary. */
  private checkIds(ids: unknown, what: string): number[] {
    if (!Array.isArray(ids)) throw new InvalidArgumentError(what, `must be a string or an array of token ids, got ${describe(ids)}`);
    const vocab = this.model.config.vocab;
    ids.forEach((t, i) => {
      if (!isInt(t) || t < 0 || t >= vocab) throw new InvalidArgumentError(`${what}[${i}]`, `${describe(t)} is not a token id of this model (0 to ${vocab - 1})`);
    });
    return [...ids];
  }

  /** Runs prompt ids through the prepared shapes from position 0; returns the token sampled after the last. */
  private async prefill(ids: number[], sampler: SamplerParams, ctx: RowContext, full: boolean, given?: RowInputs): Promise<Next> {
    let pos = 0;
    let last: Next = { token: -1, nonFinite: false };
    const D = this.model.config.dim;
    while (pos < ids.length) {
      const left = ids.length - pos;
      const rows = this.prefillRows.find((r) => r <= left) ?? 1;
      const use = given?.use.subarray(pos, pos + rows);
      const byValue = use !== undefined && use.some((u) => u === 1);
      const id = this.entry("step", rows, full, byValue);
      const extra = byValue ? { [SLOTS.inputRows]: given!.rows.subarray(pos * D, (pos + rows) * D), [SLOTS.inputUse]: use } : undefined;
      // every chunk writes its tokens' prompt marks; only the last one's draw is a generated token
      last = await this.run(id, ids.slice(pos, pos + rows), pos, sampler, ctx, extra);
      pos += rows;
    }
    return last;
  }

  /** One step: writes the slots, replays, reads back the sampled token (and its logprobs when asked). */
  private async run(
    id: EntryId, tokens: number[], pos: number, sampler: SamplerParams, ctx: RowContext, extra?: Record<string, ArrayBufferView>,
  ): Promise<Next> {
    // The draw's counter is the position it samples at: a seeded generation repeats exactly.
    this.sampling.set(0, sampler, pos + tokens.length - 1, { ...ctx, countsRow: 0 });
    // The counts row's words of this step's tokens, from the history (which already holds a decode step's
    // input token): the State was zeroed when the generation began, and every token it holds came in as one.
    const h = ctx.history;
    const at = Int32Array.from(tokens, (t) => (h ? t : this.model.config.vocab));
    const value = Uint32Array.from(tokens, (t) => (h ? countWord(h, t) : 0));
    const r = await this.exec.step(id, {
      token: Int32Array.from(tokens),
      pos: new Int32Array([pos]),
      ...this.sampling.uploads(), // the mask slot only for a constrained row
      [COUNT_AT_SLOT]: at,
      [COUNT_VALUE_SLOT]: value,
      ...extra,
    });
    const s = readSample(r.outputs, undefined, this.sampling.words);
    return { token: s.tokens[0], nonFinite: s.nonFinite[0] === 1, logprobs: s.logprobs?.[0] };
  }

  /**
   * Streams a generation: iterate it with `for await` for the tokens as they come, and await `.result` for
   * the whole result (also after the loop). Queued behind earlier calls; leaving the loop early aborts it.
   */
  stream(prompt: string | number[], opts: GenerateOptions = {}): TokenStream<GenerateResult> {
    if (this.closed) throw new DriverClosedError();
    if (opts === null || typeof opts !== "object") throw new InvalidArgumentError("options", `must be an object, got ${describe(opts)}`);
    // A text prompt's image placeholders are the placeholder token wherever its text appears (special or not).
    const image = opts.images !== undefined && typeof prompt === "string" ? this.model.config.vision?.imageToken : undefined;
    let ids = image !== undefined ? tokenizeAround(this.model.tokenizer, prompt as string, image, opts.addBos)
      : typeof prompt === "string" ? this.tokenize(prompt, opts.addBos) : this.checkIds(prompt, "prompt");
    if (ids.length === 0) throw new InvalidArgumentError("prompt", "is empty: nothing to condition on (the model adds no BOS)");
    let given: (() => Promise<RowInputs>) | undefined;
    if (opts.images !== undefined) [ids, given] = this.withImages(ids, opts.images);
    if (opts.inputs !== undefined) {
      if (given) throw new InvalidArgumentError("inputs", "cannot be given with images (images make their own rows)");
      const rows = rowInputs(opts.inputs, ids.length, this.model.config.dim);
      given = () => Promise.resolve(rows);
    }
    if (ids.length >= this.ctx) throw new ContextOverflowError(ids.length, this.ctx);
    const maxTokens = opts.maxTokens ?? DEFAULT_MAX_TOKENS;
    if (!isInt(maxTokens) || maxTokens < 0) throw new InvalidArgumentError("maxTokens", `${describe(maxTokens)} is not an integer >= 0`);
    const sampler = opts.sampler ?? GREEDY;
    try {
      validateSampler(sampler);
    } catch (e) {
      throw new InvalidArgumentError("sampler", (e as Error).message);
    }
    const vocab = this.model.config.vocab;
    const bias = sampler.logitBias instanceof Map ? [...sampler.logitBias.keys()] : Object.keys(sampler.logitBias ?? {}).map(Number);
    const outside = bias.find((t) => t >= vocab);
    if (outside !== undefined) throw new InvalidArgumentError("sampler", `logitBias token id ${outside} is outside the vocabulary (0 to ${vocab - 1})`);
    const format = opts.format;
    if (format !== undefined && (format === null || typeof format !== "object")) throw new InvalidArgumentError("format", `must be an object, got ${describe(format)}`);
    const stop = opts.stop ?? [];
    if (!Array.isArray(stop) || !stop.every((s) => typeof s === "string")) throw new InvalidArgumentError("stop", "must be an array of strings");
    if (opts.signal !== undefined && !(opts.signal instanceof AbortSignal)) throw new InvalidArgumentError("signal", "must be an AbortSignal");
    const mine = new AbortController();
    const signal = AbortSignal.any([mine.signal, this.closing.signal, ...(opts.signal ? [opts.signal] : [])]);
    return tokenStream(
      (sink) => this.enqueue(signal, () => this.generateNow(ids, maxTokens, sampler, stop.filter((s) => s.length > 0), signal, sink, opts.ignoreEos === true, format, given)),
      () => mine.abort(),
    );
  }

  /** The prompt with its image placeholders expanded, and the images' rows (made when the generation runs). */
  private withImages(ids: number[], images: unknown): [number[], () => Promise<RowInputs>] {
    if (!this.vision) throw new ModelKindError(this.model.arch, "has no vision tower: it reads text only (images need a vision-language model such as LLaVA)");
    if (!Array.isArray(images)) throw new InvalidArgumentError("images", "must be an array of images");
    const vision = this.vision, v = this.model.config.vision!;
    const x = expandImages(ids, v.imageToken, images.length, vision.rowsPerImage);
    return [x.ids, async () => {
      const rows = await vision.embed(images);
      return rowInputs(rows.map((r, i) => ({ at: x.at[i], rows: r })), x.ids.length, this.model.config.dim);
    }];
  }

  /**
   * Generates from a prompt in which some tokens' embedding rows are given by value (`inputs`: rows [n·dim]
   * from prompt index `at`), the rest embedded as usual: the vision-language caption path's low-level door.
   */
  generateWithInputs(prompt: string | number[], inputs: PromptInput[], opts: GenerateOptions = {}): Promise<GenerateResult> {
    return this.generate(prompt, { ...opts, inputs });
  }

  /** A vision-language model's projected rows of each image ([rows·dim] each, in order); queued like generate. */
  imageEmbeddings(images: ImageInput[], opts: { signal?: AbortSignal } = {}): Promise<Float32Array[]> {
    try {
      if (this.closed) throw new DriverClosedError();
      if (!this.vision) throw new ModelKindError(this.model.arch, "has no vision tower: it reads text only");
      if (!Array.isArray(images) || images.length === 0) throw new InvalidArgumentError("images", "must be a non-empty array of images");
      const vision = this.vision;
      const signal = AbortSignal.any([this.closing.signal, ...(opts.signal ? [opts.signal] : [])]);
      return this.enqueue(signal, () => vision.embed(images));
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** Generates to the end and returns the whole result (queued behind earlier calls). */
  generate(prompt: string | number[], opts: GenerateOptions = {}): Promise<GenerateResult> {
    try {
      return this.stream(prompt, opts).result;
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /**
   * Streams the assistant's reply to a conversation rendered with the model's chat template (ends at the
   * template's end-of-turn token, which the tokenizer counts as end of generation).
   */
  chatStream(messages: ChatMessage[], opts: GenerateOptions & ChatOptions = {}): TokenStream<GenerateResult> {
    if (this.closed) throw new DriverClosedError();
    // Image parts render as the template's image markers; their bytes go in as the generation's images.
    const images = chatImages(messages);
    return this.stream(chatTokens(this.model, messages, opts), images.length ? { ...opts, images: [...images, ...(opts.images ?? [])] } : opts);
  }

  /** The assistant's whole reply to a conversation (see chatStream). */
  chat(messages: ChatMessage[], opts: GenerateOptions & ChatOptions = {}): Promise<GenerateResult> {
    try {
      return this.chatStream(messages, opts).result;
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** The generation itself, run from the queue. */
  private async generateNow(
    ids: number[], maxTokens: number, sampler: SamplerParams, stops: string[], signal: AbortSignal, sink: StreamSink,
    ignoreEos: boolean, format: ResponseFormat | undefined, given?: () => Promise<RowInputs>,
  ): Promise<GenerateResult> {
    const tok = this.model.tokenizer;
    const generated: number[] = [];
    const logprobs: RowLogprobs[] = [];
    let text = "", pending = "";
    let finish: FinishReason = "length";
    const t0 = performance.now();
    let t1 = t0;
    const result = (): GenerateResult => {
      const t2 = performance.now();
      return {
        promptIds: ids,
        generatedIds: [...generated],
        text,
        finish,
        ...(sampler.logprobs || sampler.topLogprobs ? { logprobs: [...logprobs] } : {}),
        timings: {
          promptMs: t1 - t0,
          generateMs: t2 - t1,
          promptTokens: ids.length,
          generatedTokens: generated.length,
          tokensPerSecond: generated.length > 1 ? (generated.length - 1) / ((t2 - t1) / 1000) : 0,
        },
      };
    };
    const aborted = () => {
      if (signal.aborted) throw new AbortError(this.closed ? "aborted: the driver was closed" : "generation aborted", result());
    };
    if (maxTokens === 0) return result();
    // Penalties count the prompt and what is generated; a format's matcher masks every draw (grammar.ts).
    const history = new TokenHistory(ids);
    const constraint = format ? await Constraint.create(await compileFormat(tok, this.model.config.vocab, format), this.model.config.vocab) : undefined;
    const ctx = async (): Promise<RowContext> => ({ history, eog: tok.eog, mask: constraint ? await constraint.mask() : undefined });
    try {
      // Images are decoded and run through the tower first: a bad one fails before the KV state is touched.
      const rows = given && await given();
      this.exec.resetState();
      const full = needsFullSampler(sampler, format);
      let next = await this.prefill(ids, sampler, await ctx(), full, rows);
      t1 = performance.now();
      const decoder = tok.decoder();
      // Decode the prompt through the streaming decoder so a continuation's leading space is kept.
      for (const t of ids) decoder.push(t);
      let pos = ids.length;
      // Releases `pending` (all of it when `last`, else what cannot start a stop string); true at a stop string.
      const release = (id: number, last: boolean): boolean => {
        if (stops.length === 0) { // the common case, per token: everything decoded so far is final
          const emit = pending;
          text += emit;
          pending = "";
          if (emit || !last || generated.at(-1) === id) sink.push({ id, text: emit, ...lp(id) });
          return false;
        }
        const all = text + pending;
        const hits = stops.map((s) => all.indexOf(s, Math.max(0, text.length - s.length + 1))).filter((i) => i >= 0);
        if (hits.length) {
          const cut = Math.min(...hits);
          const piece = all.slice(text.length, cut);
          text = all.slice(0, cut);
          pending = "";
          if (piece) sink.push({ id, text: piece, ...lp(id) });
          return true;
        }
        const hold = last ? 0 : Math.max(0, ...stops.map((s) => overlap(all, s)));
        const emit = pending.slice(0, pending.length - hold);
        text += emit;
        pending = pending.slice(emit.length);
        if (emit || !last || generated.at(-1) === id) sink.push({ id, text: emit, ...lp(id) });
        return false;
      };
      // A token's logprobs ride on its event (not on the end-of-generation event that flushes held text).
      const lp = (id: number) => next.logprobs && generated.at(-1) === id ? { logprob: next.logprobs.logprob, topLogprobs: next.logprobs.top } : {};
      let yielded = performance.now(), polled = yielded;
      const step = this.entry("step", 1, full); // looked up once, not per token
      for (;;) {
        // A step may finish without ever returning to the event loop (a CPU device, a GPU wait that spins); let
        // timers (AbortSignal.timeout) run at least every 25 ms and I/O and signal handlers (Ctrl-C) every 250 ms
        // so that they can abort. setImmediate runs due timers; only a timer turn polls I/O in Deno, and Deno
        // rounds setTimeout(0) up to 1-2 ms: every 25 ms that was 5% of a GPU generation's time.
        const now = performance.now();
        if (now - yielded > 25) {
          if (now - polled > 250) {
            await new Promise((r) => setTimeout(r, 0));
            polled = performance.now();
          } else await new Promise((r) => setImmediate(r));
          yielded = performance.now();
        }
        aborted();
        if (next.nonFinite) throw new LlmError(`non-finite logits at position ${pos - 1}`);
        if (!ignoreEos && tok.isEog(next.token)) {
          // Text held back as a possible stop-string prefix, and the decoder's last bytes, still belong to the output.
          pending += decoder.flush();
          finish = release(next.token, true) ? "stop" : "eos";
          break;
        }
        if (constraint && !constraint.accept(next.token)) throw new LlmError(`token ${next.token} at position ${pos} is outside the grammar`);
        generated.push(next.token);
        history.add(next.token);
        if (next.logprobs) logprobs.push(next.logprobs);
        pending += decoder.push(next.token);
        const last = generated.length >= maxTokens || pos >= this.ctx;
        if (last) pending += decoder.flush();
        if (release(next.token, last)) {
          finish = "stop";
          break;
        }
        if (last) {
          finish = generated.length >= maxTokens ? "length" : "context";
          break;
        }
        next = await this.run(step, [next.token], pos, sampler, await ctx());
        pos++;
      }
      return result();
    } finally {
      constraint?.dispose();
    }
  }

  /**
   * Final hidden states (after the output norm) of a sequence of ids from position 0: [ids.length, dim].
   * Runs on the smallest prepared encode shape that fits (rows past the input are padding the causal mask
   * keeps out of the real rows), or compiles the exact shape when none was prepared. Queued like generate.
   */
  encode(ids: number[], opts: { signal?: AbortSignal } = {}): Promise<Float32Array> {
    try {
      if (this.closed) throw new DriverClosedError();
      const checked = this.checkIds(ids, "ids");
      if (checked.length === 0) throw new InvalidArgumentError("ids", "is empty: nothing to encode");
      if (checked.length > this.ctx) throw new ContextOverflowError(checked.length, this.ctx, "input");
      const signal = AbortSignal.any([this.closing.signal, ...(opts.signal ? [opts.signal] : [])]);
      return this.enqueue(signal, () => this.encodeNow(checked));
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /**
   * Embeddings of `texts` (one Float32Array of the model's width each, in order), pooled and L2-normalized as
   * the model's sentence-transformers config says (mean + L2 without one) unless `opts` says otherwise. Many
   * texts run per step, padded to the prepared buckets. A text longer than the model's positions is refused
   * (ContextOverflowError naming it) unless `opts.truncate`.
   */
  embed(texts: string[], opts: EmbedOptions & { signal?: AbortSignal } = {}): Promise<Float32Array[]> {
    try {
      if (this.closed) throw new DriverClosedError();
      const list = checkTexts(texts, "texts");
      const o = checkEmbedOptions(opts ?? {});
      const signal = AbortSignal.any([this.closing.signal, ...(opts?.signal ? [opts.signal] : [])]);
      if (!this.encoder && this.model.encoder) {
        return this.enqueue(signal, () => embedWithDecoder(this.model, this.ctx, list, o, (ids) => this.encodeNow(ids)));
      }
      const enc = this.encoderOf("embed");
      return this.enqueue(signal, () => enc.embed(list, o));
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /**
   * Relevance scores of `documents` for `query` by a cross-encoder (raw logits of its one-label head, in
   * document order; higher is more relevant). Over-long pairs are cut, the longer text first.
   */
  rerank(query: string, documents: string[], opts: { signal?: AbortSignal } = {}): Promise<number[]> {
    try {
      if (this.closed) throw new DriverClosedError();
      const enc = this.encoderOf("rerank");
      if (typeof query !== "string" || query === "") throw new InvalidArgumentError("query", `must be a non-empty string, got ${describe(query)}`);
      const docs = checkTexts(documents, "documents");
      const signal = AbortSignal.any([this.closing.signal, ...(opts?.signal ? [opts.signal] : [])]);
      return this.enqueue(signal, () => enc.rerank(query, docs));
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** Whether the model is an encoder (embed, rerank) rather than a generative model. */
  get isEncoder(): boolean {
    return this.encoder !== undefined;
  }

  /** The encoder runner, or a ModelKindError naming `call` for a generative model. */
  private encoderOf(call: string): EncoderRunner {
    if (!this.encoder) {
      throw new ModelKindError(this.model.arch, `is a generative model: ${call} needs an encoder (a BERT-style embedding model${call === "rerank" ? " with a one-label classification head" : ""})`);
    }
    return this.encoder;
  }

  /** The encode itself, run from the queue. */
  private async encodeNow(ids: number[]): Promise<Float32Array> {
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

/** A sampled token as the driver reads it back. */
interface Next {
  token: number;
  nonFinite: boolean;
  logprobs?: RowLogprobs;
}

/** A value for an error message: its type, or the value itself when short. */
function describe(v: unknown): string {
  if (typeof v === "number") return String(v);
  if (typeof v === "string") return JSON.stringify(v.length > 40 ? v.slice(0, 40) + "..." : v);
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  return typeof v === "object" ? "an object" : typeof v;
}

/**
 * Prefill chunk rows: wide chunks where matmuls run on tensor-core tiles (kernels/lib/mma_matmul.ts: a chunk of
 * 512 rows reads each weight once for 512 tokens; on the H200 a 2048-token prompt of the 1B took 56.6 ms in
 * 512-row chunks, 64.9 ms in 256-row ones) or on the shared-memory tiled matmul (kernels/lib/tiled_matmul.ts,
 * GPU targets without MMA: a 512-token prompt of the 1B on Vulkan on the H200 took 58 ms in one 512-row chunk,
 * 175 ms in 32-row chunks), the FMA kernel's sizes elsewhere (the JS device). With shared-memory staging
 * (kernels/lib/mma_staged.ts, flash_staged.ts) 2048-row chunks first: the 1B's 2048-token prompt took 38.8 ms in
 * one 2048-row chunk, 65.8 ms in 512-row ones (H200, session 6: the staged matmul reaches its speed at 2048 rows).
 */
export function prefillDefault(caps: Caps): number[] {
  return caps.mma ? (caps.staging ? [2048, 512, 64, 16, 8] : [512, 64, 16, 8]) : tiledAuto(caps) ? [512, 32, 8] : [32, 8];
}

/**
 * What sizes the context on the device, for checkContext: f32 K and V of every layer per position, plus the
 * attention scores of the widest prefill chunk (rows x heads per position, counted twice for the softmax).
 */
function contextRequest(model: ModelHandle, exec: Executor, opts: DriverOptions): ContextRequest {
  const c = model.config;
  // Chunks of >= 16 rows on MMA tiles run the flash attention, which keeps no per-position scores: its wide
  // default chunks are counted as the 32 rows of the FMA path (so a context that fit before still fits).
  const caps = exec.targetSet().caps;
  const rows = Math.max(1, ...(opts.prefill ?? prefillDefault(caps)).map((r) => caps.mma && r >= 16 ? Math.min(r, 32) : r));
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

/** Whether a generation needs the full sampler entry (bias, bans, penalties, a format's mask, logprobs). */
function needsFullSampler(p: SamplerParams, format: ResponseFormat | undefined): boolean {
  const bias = p.logitBias instanceof Map ? p.logitBias.size : p.logitBias ? Object.keys(p.logitBias).length : 0;
  return format !== undefined || bias > 0 || (p.repeatPenalty ?? 1) !== 1 || (p.frequencyPenalty ?? 0) !== 0 ||
    (p.presencePenalty ?? 0) !== 0 || (p.minTokens ?? 0) > 0 || p.logprobs === true || (p.topLogprobs ?? 0) > 0;
}
