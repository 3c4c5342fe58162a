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
//
// Here: the queue and the public calls. options.ts holds what a call is told and answers (and checks it),
// steps.ts the entries, the step and the chunked prefill, generate.ts the per-token decode loop.
import { STAGED_MIN_ROWS } from "../kernels/lower.ts";
import { type Executor, MAX_INSTANCES } from "../backends/executor.ts";
import { AbortError, ContextOverflowError, DriverClosedError, InvalidArgumentError, ModelKindError } from "./errors.ts";
import { type ChatMessage, chatImages, type ChatOptions, renderChat } from "./chat.ts";
import type { ThinkGate } from "./grammar.ts";
import { thinkGate } from "./reasoning.ts";
import type { ModelHandle } from "./model.ts";
import { type TokenStream, tokenStream } from "./stream.ts";
import { checkContext } from "./validate.ts";
import { checkEmbedOptions, checkTexts, embedWithDecoder, type EmbedOptions, EncoderRunner } from "./encoder.ts";
import { expandImages, type ImageInput, type PromptInput, rowInputs, type RowInputs, tokenizeAround, VisionRunner } from "./vision.ts";
import { checkGenerate, describe, type DriverOptions, type GenerateOptions, type GenerateResult, isInt } from "./options.ts";
import { contextRequest, kvDtypeOf, prefillDefault, Steps } from "./steps.ts";
import { generateTokens } from "./generate.ts";

export type { RowLogprobs, SamplerParams } from "./sampling.ts";
export type { ResponseFormat } from "./grammar.ts";
export type { EmbedOptions, EncoderShapes } from "./encoder.ts";
export type { ImageInput, PromptInput } from "./vision.ts";
export type { TokenEvent, TokenStream } from "./stream.ts";
export {
  DEFAULT_MAX_TOKENS, type DriverOptions, type FinishReason, type GenerateOptions, type GenerateResult, type LoadProgress,
} from "./options.ts";
export { prefillDefault } from "./steps.ts";

/** Runs one model on one executor; see the top of llm/driver.ts for the queue, abort and close rules. */
export class Driver {
  /** KV capacity in positions. */
  readonly ctx: number;
  /** Element type of the K/V cache (DriverOptions.kvDtype resolved). */
  readonly kvDtype: "f32" | "f16";
  /** The step entries and the steps that run them. */
  private readonly steps: Steps;
  private readonly hiddenRows = new Set<number>();
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
    const caps = exec.targetSet().caps;
    const prefill = opts.prefill ?? prefillDefault(caps);
    const stepRows = opts.prefillStepRows ?? (caps.mma || caps.coop ? 128 : 0);
    if (!(typeof stepRows === "number" && Number.isFinite(stepRows) && stepRows >= 0)) {
      throw new InvalidArgumentError("prefillStepRows", `${String(stepRows)} is not a number >= 0`);
    }
    if (!Array.isArray(prefill) || !prefill.every((r) => isInt(r) && r >= 1)) {
      throw new InvalidArgumentError("prefill", "must be an array of positive integers");
    }
    if (opts.kvDtype !== undefined && !["f32", "f16", "auto"].includes(opts.kvDtype)) {
      throw new InvalidArgumentError("kvDtype", `${JSON.stringify(opts.kvDtype)} is not f32, f16 or auto`);
    }
    if (opts.stepsAhead !== undefined && !(isInt(opts.stepsAhead) && opts.stepsAhead >= 1 && opts.stepsAhead <= MAX_INSTANCES)) {
      throw new InvalidArgumentError("stepsAhead", `${String(opts.stepsAhead)} is not an integer from 1 to ${MAX_INSTANCES}`);
    }
    const sd = opts.shortDecode;
    if (sd !== undefined && typeof sd !== "boolean" && !(isInt(sd) && sd >= 1)) throw new InvalidArgumentError("shortDecode", `${String(sd)} is not a boolean or a positive integer`);
    // An executor without stepsAhead (a tensor-parallel group) runs an entry's steps one at a time.
    const ahead = exec.stepsAhead ? opts.stepsAhead ?? exec.stepsAhead() : 1;
    this.kvDtype = kvDtypeOf(model, opts);
    // The trained limit (with its override) and the device's memory (the cache at its element type), before
    // anything is allocated.
    this.ctx = checkContext(contextRequest(model, exec, opts, this.kvDtype));
    const prefillRows = [...new Set(prefill.filter((r) => r > 1 && r <= this.ctx))].sort((a, b) => b - a);
    this.steps = new Steps(model, exec, this.ctx, prefillRows, () => {
      if (this.encoder) throw new ModelKindError(this.model.arch, "is an encoder: it embeds and reranks (poot embed, poot rerank); it cannot generate text");
    }, this.kvDtype, stepRows, caps.staging ? STAGED_MIN_ROWS : 0, ahead, opts.shortDecode ?? true);
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
    const shapes = [1, ...d.steps.prefillRows];
    // A vision-language model's prompt chunks that hold image rows run steps that take rows by value: prepared
    // too, so a generation compiles nothing but the tower (at its first image).
    const byValue = model.config.vision ? shapes : [];
    const total = shapes.length + byValue.length;
    shapes.forEach((rows, i) => {
      d.steps.entry("step", rows);
      progress?.({ phase: "compile", entries: i + 1, totalEntries: total });
    });
    byValue.forEach((rows, i) => {
      d.steps.entry("step", rows, false, true);
      progress?.({ phase: "compile", entries: shapes.length + i + 1, totalEntries: total });
    });
    // A decoder-based embedder: hidden-state entries for its texts, padded up to these row counts.
    if (model.encoder) {
      for (const r of [32, 128, 512].filter((r) => r <= d.ctx)) {
        d.steps.entry("hidden", r);
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
      if (r > 1) this.steps.entry("step", r);
      if (opts.hidden && r >= 1 && r <= this.ctx) {
        this.steps.entry("hidden", r);
        this.hiddenRows.add(r);
      }
    }
  }

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

  /**
   * Streams a generation: iterate it with `for await` for the tokens as they come, and await `.result` for
   * the whole result (also after the loop). Queued behind earlier calls; leaving the loop early aborts it.
   */
  stream(prompt: string | number[], opts: GenerateOptions = {}): TokenStream<GenerateResult> {
    return this.streamGated(prompt, opts, undefined);
  }

  /** stream, with a think block the format's grammar leaves free (chatStream: a thinking model's template). */
  private streamGated(prompt: string | number[], opts: GenerateOptions, gate: ThinkGate | undefined): TokenStream<GenerateResult> {
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
    const { maxTokens, sampler, format, stop } = checkGenerate(opts, this.model.config.vocab);
    const shown = this.shownTokens(opts.shownTokens);
    const mine = new AbortController();
    const signal = AbortSignal.any([mine.signal, this.closing.signal, ...(opts.signal ? [opts.signal] : [])]);
    return tokenStream(
      (sink) => this.enqueue(signal, () => generateTokens(this.steps, () => this.closed, { ids, maxTokens, sampler, stops: stop, signal, sink, ignoreEos: opts.ignoreEos === true, format, given, shown, gate })),
      () => mine.abort(),
    );
  }

  /** GenerateOptions.shownTokens as ids (each a token of the vocabulary). */
  private shownTokens(names: unknown): Set<number> | undefined {
    if (names === undefined) return undefined;
    if (!Array.isArray(names)) throw new InvalidArgumentError("shownTokens", "must be an array of token texts");
    return new Set(names.map((n) => {
      const id = typeof n === "string" ? this.model.tokenizer.tokenId(n) : undefined;
      if (id === undefined) throw new InvalidArgumentError("shownTokens", `${describe(n)} is not a token of the vocabulary`);
      return id;
    }));
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
    const text = renderChat(this.model, messages, opts);
    const ids = this.model.tokenizer.encode(text, { addBos: false, addEos: false, parseSpecial: true });
    // A thinking model's think block is free of a format's grammar, which holds the answer after it (as the server).
    const gate = opts !== null && typeof opts === "object" && opts.format !== undefined ? thinkGate(this.model.chatTemplate, this.model.tokenizer, text) : undefined;
    return this.streamGated(ids, images.length ? { ...opts, images: [...images, ...(opts.images ?? [])] } : opts, gate);
  }

  /**
   * The text a conversation renders to with the model's chat template (what chat and chatStream tokenize): to see
   * the prompt, or whether it ends inside a think block (llm/reasoning.ts opensInside).
   */
  chatPrompt(messages: ChatMessage[], opts: ChatOptions = {}): string {
    return renderChat(this.model, messages, opts);
  }

  /** The assistant's whole reply to a conversation (see chatStream). */
  chat(messages: ChatMessage[], opts: GenerateOptions & ChatOptions = {}): Promise<GenerateResult> {
    try {
      return this.chatStream(messages, opts).result;
    } catch (e) {
      return Promise.reject(e);
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
    const id = this.steps.entry("hidden", shape);
    const tokens = new Int32Array(shape).fill(this.model.tokenizer.eos ?? 0);
    tokens.set(ids);
    this.exec.resetState();
    const r = await this.exec.step(id, { token: tokens, pos: new Int32Array([0]) });
    return (r.outputs.hidden as Float32Array).slice(0, ids.length * this.model.config.dim);
  }
}
