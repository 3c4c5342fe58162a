// The HTTP face of the server: one fetch handler (Request -> Response) that Deno.serve and Bun.serve both run.
// Routes: POST /v1/chat/completions and /v1/completions (JSON, or SSE ending in `data: [DONE]`), GET /v1/models,
// /health and /metrics (Prometheus text). Every error is OpenAI's error JSON {error: {message, type, param,
// code}}; the handler never throws, so one bad request never touches another.
import { type ChatMessage, CHATML, renderChat } from "../chat.ts";
import { ImageError, InvalidArgumentError, LlmError } from "../errors.ts";
import { expandImages, rowInputs, type RowInputs, VisionRunner } from "../vision.ts";
import { imageFromUrl } from "../image.ts";
import type { ModelHandle } from "../model.ts";
import type { RowLogprobs, SamplerParams } from "../sampling.ts";
import { compileFormat, Constraint, GrammarError, type ResponseFormat } from "../grammar.ts";
import type { Metrics } from "./metrics.ts";
import type { BlockPool } from "./pool.ts";
import { ChatRequest, CompletionRequest, parseRequest, RequestError } from "./schema.ts";
import { CancelledError, QueueFullError, type Scheduler, type SeqEvent, type SequenceHandle, ShuttingDownError } from "./scheduler.ts";

export interface HttpOptions {
  model: ModelHandle;
  /** The id /v1/models lists and requests may name. */
  modelId: string;
  sched: Scheduler;
  pool: BlockPool;
  metrics: Metrics;
  ctx: number;
  /** Requests must carry `Authorization: Bearer <apiKey>` (all routes but /health). */
  apiKey?: string;
  /** Largest request body in bytes. */
  bodyLimit: number;
  /** Time the whole body may take to arrive, ms (default 30 s). */
  bodyTimeoutMs?: number;
}

type Handler = (req: Request) => Promise<Response>;

/** The encoder routes (llm/serve/encode.ts serves them); a generative model answers them with a 400. */
export const ENCODER_ROUTES: Record<string, string> = { "/v1/embeddings": "POST", "/v1/rerank": "POST", "/rerank": "POST", "/v1/reranking": "POST" };

const JSON_HEADERS = { "content-type": "application/json" };

export function json(status: number, body: unknown, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), { status, headers: { ...JSON_HEADERS, ...headers } });
}

export function errorResponse(e: RequestError, headers: Record<string, string> = {}): Response {
  return json(e.status, { error: { message: e.message, type: e.type, param: e.param, code: e.code } }, headers);
}

/** Constant-time string comparison (the API key). */
export function sameSecret(a: string, b: string): boolean {
  let d = a.length ^ b.length;
  for (let i = 0; i < Math.max(a.length, b.length); i++) d |= (a.charCodeAt(i) | 0) ^ (b.charCodeAt(i) | 0);
  return d === 0;
}

/** The whole body as JSON: at most `limit` bytes, all of it within `timeoutMs` (a trickling client is cut off). */
export async function readBody(req: Request, limit: number, timeoutMs: number): Promise<unknown> {
  const declared = Number(req.headers.get("content-length") ?? "NaN");
  if (declared > limit) throw new RequestError(413, `request body of ${declared} bytes exceeds the limit of ${limit}`, "body", "body_too_large");
  const parts: Uint8Array[] = [];
  let size = 0;
  if (req.body) {
    const reader = req.body.getReader();
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const late = new Promise<never>((_, rej) => {
        timer = setTimeout(() => rej(new RequestError(408, `the request body did not arrive within ${timeoutMs / 1000} s`, "body", "body_timeout")), Math.max(0, deadline - performance.now()));
      });
      let r: Awaited<ReturnType<typeof reader.read>>;
      try {
        r = await Promise.race([reader.read(), late]);
      } catch (e) {
        await reader.cancel().catch(() => {});
        throw e;
      } finally {
        clearTimeout(timer);
      }
      const { value, done } = r;
      if (done) break;
      size += value.byteLength;
      if (size > limit) {
        await reader.cancel().catch(() => {});
        throw new RequestError(413, `request body exceeds the limit of ${limit} bytes`, "body", "body_too_large");
      }
      parts.push(value);
    }
  }
  const bytes = new Uint8Array(size);
  let off = 0;
  for (const p of parts) bytes.set(p, off), off += p.byteLength;
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw new RequestError(400, "the request body is not valid UTF-8", "body", "invalid_json");
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new RequestError(400, `the request body is not valid JSON: ${(e as Error).message}`, "body", "invalid_json");
  }
}

/** What a generation request asks for, after validation and tokenization. */
interface Job {
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
}

export function createHandler(o: HttpOptions): Handler {
  const created = Math.floor(Date.now() / 1000);
  const tok = o.model.tokenizer;
  let seq = 0;
  const newId = (prefix: string) => `${prefix}-${Date.now().toString(36)}${(seq++).toString(36).padStart(4, "0")}`;

  function job(
    r: ChatRequest | CompletionRequest,
    prompts: number[][],
  ): Job {
    if (r.model != null && r.model !== o.modelId) throw new RequestError(404, `the model '${r.model}' does not exist (this server serves '${o.modelId}')`, "model", "model_not_found");
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
  async function submit(j: Job, signal: AbortSignal): Promise<SequenceHandle[]> {
    const hs: SequenceHandle[] = [];
    let compiled: unknown;
    if (j.format) {
      try {
        compiled = await compileFormat(tok, o.model.config.vocab, j.format.f);
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
          const constraint = j.format ? await Constraint.create(compiled, o.model.config.vocab) : undefined;
          try {
            hs.push(o.sched.submit({ promptIds: p, maxTokens: j.maxTokens[pi], sampler: { ...j.sampler, seed: seed === undefined ? undefined : seed + k }, stop: j.stop, constraint, rows: j.rows }));
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

  let vision: VisionRunner | undefined;
  /**
   * A rendered chat with images: its ids (each image marker expanded to the image's rows) and the rows, made by
   * the vision tower on the scheduler's executor between two batch steps.
   */
  async function imagePrompt(text: string, images: Uint8Array[]): Promise<{ ids: number[]; rows: RowInputs }> {
    const v = o.model.config.vision!;
    vision ??= new VisionRunner(o.model, o.sched.runner.exec);
    const runner = vision;
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

  function failure(e: Error): RequestError {
    if (e instanceof CancelledError) return new RequestError(503, e.message, null, "shutting_down");
    return new RequestError(500, `generation failed: ${e.name}: ${e.message}`, null, "generation_failed");
  }

  async function generate(kind: "chat" | "text", j: Job, signal: AbortSignal): Promise<Response> {
    const hs = await submit(j, signal);
    const lp = j.logprobs ? logprobsFormat(kind) : undefined;
    const id = newId(kind === "chat" ? "chatcmpl" : "cmpl");
    const object = kind === "chat" ? "chat.completion" : "text_completion";
    const promptTokens = j.prompts.reduce((a, p) => a + p.length * j.n, 0);
    if (!j.stream) {
      const results = await Promise.all(hs.map(async (h) => {
        const toks: { id: number; lp: RowLogprobs }[] = [];
        for await (const e of h) {
          if (e.type === "error") return e.error;
          if (e.type === "token" && e.logprobs) toks.push({ id: e.id, lp: e.logprobs });
          if (e.type === "done") return { text: e.text, finish: e.finish, completion: e.completionTokens, logprobs: lp ? lp(toks) : null };
        }
        return new CancelledError("the request was cancelled");
      }));
      const bad = results.find((r) => r instanceof Error);
      if (bad) throw failure(bad as Error);
      const ok = results as { text: string; finish: string; completion: number; logprobs: unknown }[];
      const completionTokens = ok.reduce((a, r) => a + r.completion, 0);
      return json(200, {
        id, object, created: Math.floor(Date.now() / 1000), model: o.modelId,
        choices: ok.map((r, index) => kind === "chat"
          ? { index, message: { role: "assistant", content: r.text }, logprobs: r.logprobs, finish_reason: r.finish }
          : { index, text: r.text, logprobs: r.logprobs, finish_reason: r.finish }),
        usage: { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens },
      });
    }
    // SSE: events of every choice merged in arrival order.
    const chunkObject = kind === "chat" ? "chat.completion.chunk" : "text_completion";
    const enc = new TextEncoder();
    const events = merge(hs);
    let completionTokens = 0;
    const chunk = (index: number, piece: { text?: string; role?: boolean; lp?: unknown }, finish: string | null) => ({
      id, object: chunkObject, created: Math.floor(Date.now() / 1000), model: o.modelId,
      choices: [kind === "chat"
        ? { index, delta: finish !== null ? {} : { ...(piece.role ? { role: "assistant" } : {}), content: piece.text ?? "" }, logprobs: piece.lp ?? null, finish_reason: finish }
        : { index, text: piece.text ?? "", logprobs: piece.lp ?? null, finish_reason: finish }],
      ...(j.includeUsage ? { usage: null } : {}),
    });
    async function* sse(): AsyncGenerator<string> {
      if (kind === "chat") for (let i = 0; i < hs.length; i++) yield `data: ${JSON.stringify(chunk(i, { role: true, text: "" }, null))}\n\n`;
      for await (const { index, e } of events) {
        if (e.type === "token") {
          if (lp && e.logprobs) yield `data: ${JSON.stringify(chunk(index, { text: e.text, lp: lp([{ id: e.id, lp: e.logprobs }]) }, null))}\n\n`;
          else if (e.text) yield `data: ${JSON.stringify(chunk(index, { text: e.text }, null))}\n\n`;
        } else if (e.type === "done") {
          completionTokens += e.completionTokens;
          if (e.tail) yield `data: ${JSON.stringify(chunk(index, { text: e.tail }, null))}\n\n`;
          yield `data: ${JSON.stringify(chunk(index, {}, e.finish))}\n\n`;
        } else {
          const f = failure(e.error);
          yield `data: ${JSON.stringify({ error: { message: f.message, type: f.type, param: null, code: f.code } })}\n\n`;
          hs.forEach((h) => h.cancel());
          return;
        }
      }
      if (j.includeUsage) {
        yield `data: ${JSON.stringify({
          id, object: chunkObject, created: Math.floor(Date.now() / 1000), model: o.modelId, choices: [],
          usage: { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens },
        })}\n\n`;
      }
      yield "data: [DONE]\n\n";
    }
    const gen = sse();
    const body = new ReadableStream<Uint8Array>({
      async pull(c) {
        const r = await gen.next();
        if (r.done) c.close();
        else c.enqueue(enc.encode(r.value));
      },
      cancel() {
        hs.forEach((h) => h.cancel()); // the client went away: drop its sequences within one step
        void gen.return(undefined);
      },
    });
    return new Response(body, { status: 200, headers: { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" } });
  }

  /** OpenAI's logprobs object of a choice (or of a stream chunk) from its tokens' logprobs. */
  function logprobsFormat(kind: "chat" | "text"): (toks: { id: number; lp: RowLogprobs }[]) => unknown {
    const text = (id: number) => tok.decode([id], { stripLeadingSpace: false });
    const bytes = (id: number) => [...tok.tokenBytes(id)];
    if (kind === "chat") {
      return (toks) => ({
        content: toks.map(({ id, lp }) => ({
          token: text(id), logprob: lp.logprob, bytes: bytes(id),
          top_logprobs: lp.top.map((t) => ({ token: text(t.id), logprob: t.logprob, bytes: bytes(t.id) })),
        })),
      });
    }
    return (toks) => {
      let offset = 0;
      const text_offset = toks.map(({ id }) => {
        const at = offset;
        offset += text(id).length;
        return at;
      });
      return {
        tokens: toks.map(({ id }) => text(id)),
        token_logprobs: toks.map(({ lp }) => lp.logprob),
        top_logprobs: toks.map(({ lp }) => Object.fromEntries(lp.top.map((t) => [text(t.id), t.logprob]))),
        text_offset,
      };
    };
  }

  async function route(req: Request): Promise<Response> {
    const url = new URL(req.url);
    const path = url.pathname.replace(/\/+$/, "") || "/";
    const known: Record<string, string> = {
      "/health": "GET", "/metrics": "GET", "/v1/models": "GET", "/v1/chat/completions": "POST", "/v1/completions": "POST",
      ...ENCODER_ROUTES,
    };
    const method = known[path];
    if (!method) throw new RequestError(404, `no route ${req.method} ${path}`, null, "not_found");
    if (req.method !== method) throw new RequestError(405, `${path} takes ${method}, not ${req.method}`, null, "method_not_allowed");
    if (path === "/health") {
      return o.sched.isAccepting ? json(200, { status: "ok" }) : json(503, { status: "shutting down" });
    }
    if (o.apiKey !== undefined) {
      const auth = req.headers.get("authorization") ?? "";
      if (!sameSecret(auth, `Bearer ${o.apiKey}`)) throw new RequestError(401, "missing or wrong API key (Authorization: Bearer <key>)", null, "invalid_api_key");
    }
    if (path in ENCODER_ROUTES) {
      throw new RequestError(400, `${o.modelId} is a generative model: ${path} needs an encoder (an embedding model or a reranker)`, "model", "model_kind");
    }
    switch (path) {
      case "/metrics":
        return new Response(o.metrics.render({ queue: o.sched.queueDepth, running: o.sched.runningCount, kvUsed: o.pool.used, kvFree: o.pool.free }), {
          headers: { "content-type": "text/plain; version=0.0.4" },
        });
      case "/v1/models":
        return json(200, {
          object: "list",
          data: [{ id: o.modelId, object: "model", created, owned_by: "poot", max_model_len: o.ctx }],
        });
      case "/v1/chat/completions": {
        const r = parseRequest(ChatRequest, await readBody(req, o.bodyLimit, o.bodyTimeoutMs ?? 30_000));
        const images = chatImages(r.messages, o.model);
        const messages: ChatMessage[] = r.messages.map((m) => ({
          role: m.role,
          // image parts stay parts: the template renders its image marker where each one is
          content: m.content === null ? "" : typeof m.content === "string" ? m.content
            : images.length ? m.content.map((p) => (p.type === "text" ? p : { type: "image_url", image_url: p.image_url }))
            : m.content.map((p) => (p.type === "text" ? p.text : "")).join(""),
        }));
        let text: string;
        try {
          // A model without a template is served with ChatML, as llama.cpp's server does.
          text = renderChat(o.model, messages, { addGenerationPrompt: true, fallback: CHATML });
        } catch (e) {
          throw new RequestError(400, (e as Error).message, "messages", "chat_template_failed");
        }
        // The model's own template writes its special tokens (BOS included) as text: they are parsed and none is
        // added, as transformers' apply_chat_template and Driver.chat do. The ChatML fallback adds what the
        // tokenizer adds to any prompt.
        const chatEncode = o.model.chatTemplate !== undefined ? { addBos: false, addEos: false, parseSpecial: true } : { parseSpecial: true };
        if (images.length === 0) return await generate("chat", job(r, [tok.encode(text, chatEncode)]), req.signal);
        const { ids, rows } = await imagePrompt(text, images);
        return await generate("chat", { ...job(r, [ids]), rows }, req.signal);
      }
      case "/v1/completions": {
        const r = parseRequest(CompletionRequest, await readBody(req, o.bodyLimit, o.bodyTimeoutMs ?? 30_000));
        const p = r.prompt;
        const prompts = typeof p === "string" ? [tok.encode(p)]
          : typeof p[0] === "string" ? (p as string[]).map((s) => tok.encode(s))
          : typeof p[0] === "number" ? [p as number[]]
          : p as number[][];
        return await generate("text", job(r, prompts), req.signal);
      }
    }
    throw new RequestError(404, `no route ${path}`);
  }

  return async (req: Request): Promise<Response> => {
    let res: Response;
    try {
      res = await route(req);
    } catch (e) {
      if (e instanceof RequestError) {
        const headers: Record<string, string> = {};
        if (e.status === 429) headers["retry-after"] = String(Math.max(1, Math.ceil(o.sched.queueDepth / Math.max(1, o.sched.runningCount))));
        if (e.status === 405) headers.allow = e.message.split(" takes ")[1]?.split(",")[0] ?? "GET";
        res = errorResponse(e, headers);
      } else res = errorResponse(new RequestError(500, `internal error: ${(e as Error).name}: ${(e as Error).message}`, null, "internal_error"));
    }
    o.metrics.request(res.status);
    return res;
  };
}

/** The events of several sequences as one stream, each tagged with its choice index. */
async function* merge(hs: SequenceHandle[]): AsyncGenerator<{ index: number; e: SeqEvent }> {
  const its = hs.map((h) => h[Symbol.asyncIterator]());
  const next = (i: number) => its[i].next().then((r) => ({ i, r }));
  const pending = new Map(its.map((_, i) => [i, next(i)]));
  try {
    while (pending.size) {
      const { i, r } = await Promise.race(pending.values());
      if (r.done) {
        pending.delete(i);
        continue;
      }
      pending.set(i, next(i));
      yield { index: i, e: r.value };
      if (r.value.type !== "token") pending.delete(i);
    }
  } finally {
    for (const it of its) await it.return?.();
  }
}

/**
 * The images of a chat request's image parts, in order: each must be a data: URL (poot never downloads: a remote
 * URL is a 400), and the model must have a vision tower.
 */
function chatImages(messages: ChatRequest["messages"], model: ModelHandle): Uint8Array[] {
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
