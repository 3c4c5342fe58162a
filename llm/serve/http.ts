// The HTTP face of the server: one fetch handler (Request -> Response) that Deno.serve and Bun.serve both run.
// Routes: POST /v1/chat/completions and /v1/completions (JSON, or SSE ending in `data: [DONE]`), GET /v1/models,
// /health and /metrics (Prometheus text), POST /tokenize and /detokenize (tokenize.ts). Every error is OpenAI's
// error JSON {error: {message, type, param, code}}; the handler never throws, so one bad request never touches
// another. A generation request becomes a Job and its sequences in jobs.ts, a chat's prompt is rendered in
// prompt.ts and its replies read in reply.ts; this module routes, reads bodies and writes the responses.
import type { VisionRunner } from "../vision.ts";
import type { ModelHandle } from "../model.ts";
import type { RowLogprobs } from "../sampling.ts";
import type { ToolCall } from "../tools.ts";
import type { Tokenizer } from "../tokenizer/types.ts";
import type { Metrics } from "./metrics.ts";
import type { BlockPool } from "./pool.ts";
import { ChatRequest, CompletionRequest, parseRequest, RequestError } from "./schema.ts";
import { CancelledError, type Scheduler, type SeqEvent, type SequenceHandle } from "./scheduler.ts";
import { chatImages, failure, imagePrompt, type Job, makeJob, submitJob } from "./jobs.ts";
import { toolUse } from "./calls.ts";
import { chatPrompt } from "./prompt.ts";
import { chatIds, detokenize, tokenize } from "./tokenize.ts";
import { chatReading, replyOf, ReplyStream } from "./reply.ts";
import { anthropicError, anthropicResponse, chatRequestOf, CountRequest, MessagesRequest } from "./anthropic.ts";

export interface HttpOptions {
  model: ModelHandle;
  /** The names /v1/models lists and requests may give (the first the server's own; a response names the one asked). */
  modelIds: readonly string[];
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
  /** Where a thinking model's reasoning goes unless a request says (default "auto": reasoning_content). */
  reasoningFormat?: "auto" | "deepseek" | "none";
  /** Chat template variables every chat request renders with (a request's chat_template_kwargs win). */
  templateVars?: Record<string, unknown>;
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

/** Submits a job's choices and answers with their completion (JSON) or their events as they come (SSE). */
async function generate(sv: Served, kind: "chat" | "text", j: Job, signal: AbortSignal): Promise<Response> {
  const o = sv.o;
  const hs = await submitJob(o, j, signal);
  const lp = j.logprobs ? logprobsFormat(o.model.tokenizer, kind) : undefined;
  const id = sv.newId(kind === "chat" ? "chatcmpl" : "cmpl");
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
      id, object, created: Math.floor(Date.now() / 1000), model: j.model,
      choices: ok.map((r, index) => {
        if (kind !== "chat") return { index, text: r.text, logprobs: r.logprobs, finish_reason: r.finish };
        const message = replyOf(j.reading ?? {}, r.text);
        return { index, message: { role: "assistant", ...message }, logprobs: r.logprobs, finish_reason: message.tool_calls ? "tool_calls" : r.finish };
      }),
      usage: { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens },
    });
  }
  // SSE: events of every choice merged in arrival order.
  const chunkObject = kind === "chat" ? "chat.completion.chunk" : "text_completion";
  const enc = new TextEncoder();
  const events = merge(hs);
  let completionTokens = 0;
  const chunk = (index: number, piece: { text?: string; reasoning?: string; role?: boolean; lp?: unknown; calls?: ToolCall[] }, finish: string | null) => ({
    id, object: chunkObject, created: Math.floor(Date.now() / 1000), model: j.model,
    choices: [kind === "chat"
      ? {
        index,
        delta: finish !== null ? {} : piece.calls
          ? { tool_calls: piece.calls.map((c, i) => ({ index: i, ...c })) }
          : piece.reasoning
          ? { reasoning_content: piece.reasoning, ...(piece.text ? { content: piece.text } : {}) }
          : { ...(piece.role ? { role: "assistant" } : {}), content: piece.text ?? "" },
        logprobs: piece.lp ?? null, finish_reason: finish,
      }
      : { index, text: piece.text ?? "", logprobs: piece.lp ?? null, finish_reason: finish }],
    ...(j.includeUsage ? { usage: null } : {}),
  });
  // a chat's choices: reasoning split off, text held while it may be a call, calls read when the choice ends
  const replies = kind === "chat" ? hs.map(() => new ReplyStream(j.reading ?? {})) : undefined;
  const piece = (index: number, text: string) => replies ? replies[index].push(text) : { reasoning: "", content: text };
  async function* sse(): AsyncGenerator<string> {
    if (kind === "chat") for (let i = 0; i < hs.length; i++) yield `data: ${JSON.stringify(chunk(i, { role: true, text: "" }, null))}\n\n`;
    for await (const { index, e } of events) {
      if (e.type === "token") {
        const p = piece(index, e.text);
        if (lp && e.logprobs) yield `data: ${JSON.stringify(chunk(index, { text: p.content, reasoning: p.reasoning, lp: lp([{ id: e.id, lp: e.logprobs }]) }, null))}\n\n`;
        else if (p.content || p.reasoning) yield `data: ${JSON.stringify(chunk(index, { text: p.content, reasoning: p.reasoning }, null))}\n\n`;
      } else if (e.type === "done") {
        completionTokens += e.completionTokens;
        const tail = piece(index, e.tail ?? "");
        if (tail.content || tail.reasoning) yield `data: ${JSON.stringify(chunk(index, { text: tail.content, reasoning: tail.reasoning }, null))}\n\n`;
        const end = replies?.[index].end();
        if (end?.content || end?.reasoning) yield `data: ${JSON.stringify(chunk(index, { text: end.content, reasoning: end.reasoning }, null))}\n\n`;
        if (end?.calls.length) yield `data: ${JSON.stringify(chunk(index, { calls: end.calls }, null))}\n\n`;
        yield `data: ${JSON.stringify(chunk(index, {}, end?.calls.length ? "tool_calls" : e.finish))}\n\n`;
      } else {
        const f = failure(e.error);
        yield `data: ${JSON.stringify({ error: { message: f.message, type: f.type, param: null, code: f.code } })}\n\n`;
        hs.forEach((h) => h.cancel());
        return;
      }
    }
    if (j.includeUsage) {
      yield `data: ${JSON.stringify({
        id, object: chunkObject, created: Math.floor(Date.now() / 1000), model: j.model, choices: [],
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
function logprobsFormat(tok: Tokenizer, kind: "chat" | "text"): (toks: { id: number; lp: RowLogprobs }[]) => unknown {
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

/** A chat request's Job: its prompt (a vision-language model's images through the tower), how replies are read. */
async function chatJob(sv: Served, r: ChatRequest): Promise<Job> {
  const o = sv.o;
  const images = chatImages(r.messages, o.model);
  const tools = await toolUse(o.model, r);
  const p = chatPrompt(o, r, tools, images.length > 0);
  const { ids, rows } = images.length ? await imagePrompt(o, sv.vision, p.text, images) : { ids: p.ids(), rows: undefined };
  let j = makeJob(o, r, [ids]);
  if (rows) j = { ...j, rows };
  if (tools?.format) j = { ...j, format: { f: tools.format, field: "tools" } };
  if (tools?.shown) j = { ...j, shown: tools.shown };
  const reasoning = (r.reasoning_format ?? o.reasoningFormat ?? "auto") !== "none";
  const { reading, gate } = chatReading(o.model, p.text, reasoning, tools?.syntax, j.format !== undefined);
  return { ...j, reading, ...(gate ? { gate } : {}) };
}

/** What a handler keeps between requests. */
interface Served {
  o: HttpOptions;
  /** A fresh response id with the given prefix. */
  newId: (prefix: string) => string;
  /** The vision tower's runner, made by the first request with an image. */
  vision: { runner?: VisionRunner };
}

export function createHandler(o: HttpOptions): Handler {
  const created = Math.floor(Date.now() / 1000);
  const tok = o.model.tokenizer;
  let seq = 0;
  const sv: Served = { o, newId: (prefix) => `${prefix}-${Date.now().toString(36)}${(seq++).toString(36).padStart(4, "0")}`, vision: {} };

  async function route(req: Request): Promise<Response> {
    const url = new URL(req.url);
    const path = url.pathname.replace(/\/+$/, "") || "/";
    const known: Record<string, string> = {
      "/health": "GET", "/metrics": "GET", "/v1/models": "GET", "/v1/chat/completions": "POST", "/v1/completions": "POST",
      "/tokenize": "POST", "/detokenize": "POST", "/v1/messages": "POST", "/v1/messages/count_tokens": "POST", ...ENCODER_ROUTES,
    };
    const method = known[path];
    if (!method) throw new RequestError(404, `no route ${req.method} ${path}`, null, "not_found");
    if (req.method !== method) throw new RequestError(405, `${path} takes ${method}, not ${req.method}`, null, "method_not_allowed");
    if (path === "/health") {
      return o.sched.isAccepting ? json(200, { status: "ok" }) : json(503, { status: "shutting down" });
    }
    if (o.apiKey !== undefined) {
      // OpenAI's clients send the key as a bearer token, Anthropic's as x-api-key
      const auth = req.headers.get("authorization") ?? `Bearer ${req.headers.get("x-api-key") ?? ""}`;
      if (!sameSecret(auth, `Bearer ${o.apiKey}`)) throw new RequestError(401, "missing or wrong API key (Authorization: Bearer <key>)", null, "invalid_api_key");
    }
    if (path in ENCODER_ROUTES) {
      throw new RequestError(400, `${o.modelIds[0]} is a generative model: ${path} needs an encoder (an embedding model or a reranker)`, "model", "model_kind");
    }
    switch (path) {
      case "/metrics":
        return new Response(o.metrics.render({ queue: o.sched.queueDepth, running: o.sched.runningCount, kvUsed: o.pool.used, kvFree: o.pool.free }), {
          headers: { "content-type": "text/plain; version=0.0.4" },
        });
      case "/v1/models":
        return json(200, {
          object: "list",
          data: o.modelIds.map((id) => ({ id, object: "model", created, owned_by: "poot", max_model_len: o.ctx })),
        });
      case "/tokenize":
        return json(200, await tokenize(o, await readBody(req, o.bodyLimit, o.bodyTimeoutMs ?? 30_000)));
      case "/detokenize":
        return json(200, detokenize(o, await readBody(req, o.bodyLimit, o.bodyTimeoutMs ?? 30_000)));
      case "/v1/messages": {
        const r = parseRequest(MessagesRequest, await readBody(req, o.bodyLimit, o.bodyTimeoutMs ?? 30_000));
        // Anthropic's max_tokens is a required bound clients set high: the context left caps it (as llama.cpp does)
        const open = await chatJob(sv, chatRequestOf(r));
        const j = { ...open, maxTokens: open.maxTokens.map((m) => Math.min(m, r.max_tokens)) };
        const [h] = await submitJob(o, j, req.signal);
        return await anthropicResponse({ modelId: j.model, promptTokens: j.prompts[0].length, reading: j.reading ?? {} }, h, r.stream === true);
      }
      case "/v1/messages/count_tokens": {
        const r = chatRequestOf(parseRequest(CountRequest, await readBody(req, o.bodyLimit, o.bodyTimeoutMs ?? 30_000)));
        return json(200, { input_tokens: (await chatIds(o, r)).length });
      }
      case "/v1/chat/completions": {
        const r = parseRequest(ChatRequest, await readBody(req, o.bodyLimit, o.bodyTimeoutMs ?? 30_000));
        return await generate(sv, "chat", await chatJob(sv, r), req.signal);
      }
      case "/v1/completions": {
        const r = parseRequest(CompletionRequest, await readBody(req, o.bodyLimit, o.bodyTimeoutMs ?? 30_000));
        const p = r.prompt;
        const prompts = typeof p === "string" ? [tok.encode(p)]
          : typeof p[0] === "string" ? (p as string[]).map((s) => tok.encode(s))
          : typeof p[0] === "number" ? [p as number[]]
          : p as number[][];
        return await generate(sv, "text", makeJob(o, r, prompts), req.signal);
      }
    }
    throw new RequestError(404, `no route ${path}`);
  }

  return async (req: Request): Promise<Response> => {
    let res: Response;
    try {
      res = await route(req);
    } catch (e) {
      const err = e instanceof RequestError ? e : new RequestError(500, `internal error: ${(e as Error).name}: ${(e as Error).message}`, null, "internal_error");
      const headers: Record<string, string> = {};
      if (err.status === 429) headers["retry-after"] = String(Math.max(1, Math.ceil(o.sched.queueDepth / Math.max(1, o.sched.runningCount))));
      if (err.status === 405) headers.allow = err.message.split(" takes ")[1]?.split(",")[0] ?? "GET";
      // Anthropic's routes answer in Anthropic's error shape
      res = new URL(req.url).pathname.startsWith("/v1/messages") ? json(err.status, anthropicError(err), headers) : errorResponse(err, headers);
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
