// A generation request as the scheduler takes it: checked against the model, the context and itself (a Job, or
// a RequestError naming the field), a chat's images turned into prompt rows by the vision tower, and its choices
// submitted as sequences (all or none).
import { ImageError, InvalidArgumentError, LlmError } from "../errors.ts";
import { expandImages, rowInputs, type RowInputs, VisionRunner } from "../vision.ts";
import { imageFromUrl } from "../image.ts";
import type { ModelHandle } from "../model.ts";
import type { SamplerParams } from "../sampling.ts";
import { compileFormat, Constraint, GrammarError, type ResponseFormat, type ThinkGate } from "../grammar.ts";
import type { ReplyReading } from "./reply.ts";
import { type ChatRequest, type CompletionRequest, RequestError, servedName } from "./schema.ts";
import { CancelledError, QueueFullError, type SequenceHandle, ShuttingDownError } from "./scheduler.ts";
import type { HttpOptions } from "./http.ts";

/** What a generation request asks for, after validation and tokenization. */
export interface Job {
  /** The model's name as the request gave it (or the server's first): what the response names. */
  model: string;
  prompts: number[][];
  n: number;
  maxTokens: number[];
  sampler: SamplerParams;
  stop: string[];
  stream: boolean;
  includeUsage: boolean;
  /** response_format json_object / json_schema, or the `grammar` extension. */
  format?: { f: ResponseFormat; field: string };
  /** Logprobs asked: the chosen token's, and `top` more. */
  logprobs?: { top: number };
  /** The prompt's image rows by value (a vision-language model's chat with images). */
  rows?: RowInputs;
  /** A chat's replies: how they are read into reasoning, content and calls (absent: text). */
  reading?: ReplyReading;
  /** A thinking model's think block, free of `format` before it holds the reply (grammar.ts ThinkGate). */
  gate?: ThinkGate;
  /** Control tokens the replies show as text, which `format` may spell (a tool-call syntax's markers). */
  shown?: ReadonlySet<number>;
}

/** A request's Job: checked against the model, the context and itself (a RequestError naming the field). */
export function makeJob(o: HttpOptions, r: ChatRequest | CompletionRequest, prompts: number[][]): Job {
  const name = servedName(o.modelIds, r.model);
  const asked = r.max_completion_tokens ?? r.max_tokens ?? undefined;
  const maxTokens = prompts.map((p, i) => {
    if (p.length === 0) throw new RequestError(400, "the prompt is empty after tokenization", "prompt", "empty_prompt");
    for (const t of p) if (t >= o.model.config.vocab) throw new RequestError(400, `token id ${t} is outside the vocabulary of ${o.model.config.vocab}`, "prompt", "invalid_value");
    if (p.length >= o.ctx) {
      throw new RequestError(400, `prompt${prompts.length > 1 ? ` ${i}` : ""} has ${p.length} tokens; the context is ${o.ctx}, leaving no room to generate`, "messages" in r ? "messages" : "prompt", "context_length_exceeded");
    }
    if (asked !== undefined && p.length + asked > o.ctx) {
      throw new RequestError(400, `prompt of ${p.length} tokens plus ${asked} max tokens exceeds the context of ${o.ctx}`, r.max_completion_tokens != null ? "max_completion_tokens" : "max_tokens", "context_length_exceeded");
    }
    return asked ?? o.ctx - p.length;
  });
  const temperature = r.temperature ?? 1;
  const topK = r.top_k ?? 0;
  const vocab = o.model.config.vocab;
  for (const k of Object.keys(r.logit_bias ?? {})) {
    if (Number(k) >= vocab) throw new RequestError(400, `logit_bias token id ${k} is outside the vocabulary of ${vocab}`, "logit_bias", "invalid_value");
  }
  if (r.response_format && r.response_format.type !== "text" && r.grammar != null) {
    throw new RequestError(400, "give either response_format or grammar, not both", "grammar", "invalid_value");
  }
  const rf = r.response_format;
  const format: Job["format"] = r.grammar != null ? { f: { type: "grammar", grammar: r.grammar }, field: "grammar" }
    : rf?.type === "json_object" ? { f: { type: "json_object" }, field: "response_format" }
    : rf?.type === "json_schema" ? { f: { type: "json_schema", schema: rf.json_schema.schema }, field: "response_format" }
    : undefined;
  // Chat: logprobs (bool) and top_logprobs (0-20, needs logprobs); completions: logprobs N (0-5) = N top.
  let logprobs: Job["logprobs"];
  if ("messages" in r) {
    const cr = r as ChatRequest;
    if (cr.top_logprobs != null && cr.logprobs !== true) throw new RequestError(400, "top_logprobs needs logprobs: true", "top_logprobs", "invalid_value");
    if (cr.logprobs) logprobs = { top: cr.top_logprobs ?? 0 };
  } else if ((r as CompletionRequest).logprobs != null) logprobs = { top: (r as CompletionRequest).logprobs! };
  return {
    model: name,
    prompts,
    n: r.n ?? 1,
    maxTokens,
    format,
    logprobs,
    sampler: {
      temperature, topK: topK < 0 ? 0 : topK, topP: r.top_p ?? 1, minP: r.min_p ?? 0, seed: r.seed ?? undefined,
      logitBias: r.logit_bias ?? undefined, presencePenalty: r.presence_penalty ?? 0, frequencyPenalty: r.frequency_penalty ?? 0,
      repeatPenalty: r.repetition_penalty ?? 1, minTokens: r.min_tokens ?? 0,
      ...(logprobs ? { logprobs: true, topLogprobs: logprobs.top } : {}),
    },
    stop: r.stop == null ? [] : typeof r.stop === "string" ? [r.stop] : r.stop,
    stream: r.stream ?? false,
    includeUsage: r.stream_options?.include_usage ?? false,
  };
}

/** Submits every choice (prompt × n); on a refusal cancels those already queued. */
export async function submitJob(o: HttpOptions, j: Job, signal: AbortSignal): Promise<SequenceHandle[]> {
  const hs: SequenceHandle[] = [];
  let compiled: unknown;
  if (j.format) {
    try {
      compiled = await compileFormat(o.model.tokenizer, o.model.config.vocab, j.format.f, j.shown);
    } catch (e) {
      if (e instanceof GrammarError) throw new RequestError(400, e.message, j.format.field, "invalid_grammar");
      throw e;
    }
  }
  try {
    for (const [pi, p] of j.prompts.entries()) {
      for (let k = 0; k < j.n; k++) {
        // Choices of one request draw differently: seed + choice index (greedy ones are identical anyway).
        const seed = j.sampler.seed ?? (j.n > 1 ? Math.floor(Math.random() * 2 ** 31) : undefined);
        const constraint = j.format ? await Constraint.create(compiled, o.model.config.vocab, j.gate) : undefined;
        try {
          hs.push(o.sched.submit({ promptIds: p, maxTokens: j.maxTokens[pi], sampler: { ...j.sampler, seed: seed === undefined ? undefined : seed + k }, stop: j.stop, constraint, rows: j.rows, shown: j.shown }));
        } catch (e) {
          constraint?.dispose(); // not handed to a sequence
          throw e;
        }
      }
    }
  } catch (e) {
    for (const h of hs) h.cancel();
    if (e instanceof QueueFullError) throw new RequestError(429, e.message, null, "queue_full");
    if (e instanceof ShuttingDownError) throw new RequestError(503, e.message, null, "shutting_down");
    if (e instanceof LlmError) throw new RequestError(400, e.message, null, "invalid_value");
    throw e;
  }
  // A streamed response learns of a gone client from its body's cancel; a plain one from the request signal.
  if (!j.stream) signal.addEventListener("abort", () => hs.forEach((h) => h.cancel()), { once: true });
  return hs;
}

/**
 * A rendered chat with images: its ids (each image marker expanded to the image's rows) and the rows, made by
 * the vision tower on the scheduler's executor between two batch steps (made once: `vision` keeps it).
 */
export async function imagePrompt(o: HttpOptions, vision: { runner?: VisionRunner }, text: string, images: Uint8Array[]): Promise<{ ids: number[]; rows: RowInputs }> {
  const tok = o.model.tokenizer;
  const v = o.model.config.vision!;
  const runner = vision.runner ??= new VisionRunner(o.model, o.sched.runner.exec);
  try {
    // as the Driver's chat and transformers' apply_chat_template: special tokens in the rendered text parsed, none added
    const ids = tok.encode(text, { addBos: false, addEos: false, parseSpecial: true });
    const x = expandImages(ids, v.imageToken, images.length, runner.rowsPerImage);
    const embeds = await o.sched.exclusive(() => runner.embed(images));
    return { ids: x.ids, rows: rowInputs(embeds.map((rows, i) => ({ at: x.at[i], rows })), x.ids.length, o.model.config.dim) };
  } catch (e) {
    if (e instanceof ShuttingDownError) throw new RequestError(503, e.message, null, "shutting_down");
    if (e instanceof ImageError || e instanceof InvalidArgumentError) throw new RequestError(400, e.message, "messages", "invalid_image");
    throw e;
  }
}

/**
 * The images of a chat request's image parts, in order: each must be a data: URL (poot never downloads: a remote
 * URL is a 400), and the model must have a vision tower.
 */
export function chatImages(messages: ChatRequest["messages"], model: ModelHandle): Uint8Array[] {
  const out: Uint8Array[] = [];
  messages.forEach((m, i) => {
    if (!Array.isArray(m.content)) return;
    m.content.forEach((p, j) => {
      if (p.type !== "image_url") return;
      const param = `messages[${i}].content[${j}].image_url`;
      try {
        out.push(imageFromUrl(typeof p.image_url === "string" ? p.image_url : p.image_url.url, param));
      } catch (e) {
        if (e instanceof ImageError) throw new RequestError(400, e.message, param, "invalid_image_url");
        throw e;
      }
    });
  });
  if (out.length && !model.config.vision) throw new RequestError(400, `${model.arch} has no vision tower: it reads text only`, "messages", "model_has_no_vision");
  return out;
}

/** A sequence's failure as the request's error. */
export function failure(e: Error): RequestError {
  if (e instanceof CancelledError) return new RequestError(503, e.message, null, "shutting_down");
  return new RequestError(500, `generation failed: ${e.name}: ${e.message}`, null, "generation_failed");
}
