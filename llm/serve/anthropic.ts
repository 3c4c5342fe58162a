// Anthropic's Messages API on the same model (POST /v1/messages, /v1/messages/count_tokens), as llama.cpp's server
// offers it, for clients built on Anthropic's SDK. A request is read into the chat route's own request (system,
// content blocks: text, image, tool_use, tool_result, thinking; tools with input_schema; tool_choice auto / any / tool /
// none; thinking enabled or disabled as the template's enable_thinking) and runs as any chat does (prompt.ts,
// reply.ts); the answer is Anthropic's message (thinking, text and tool_use blocks, stop_reason, usage) or its event
// stream (message_start, content_block_start / _delta / _stop, message_delta, message_stop). Errors are Anthropic's
// {type: "error", error: {type, message}}.
import { z } from "zod";
import { randomId, type ToolCall } from "../tools.ts";
import { type ReplyReading, ReplyStream } from "./reply.ts";
import { ChatRequest, parseRequest, type RequestError } from "./schema.ts";
import { CancelledError, type SequenceHandle } from "./scheduler.ts";
import { failure } from "./jobs.ts";

const text = z.object({ type: z.literal("text"), text: z.string() }).loose();
const image = z.object({
  type: z.literal("image"),
  source: z.discriminatedUnion("type", [
    z.object({ type: z.literal("base64"), media_type: z.string(), data: z.string() }),
    z.object({ type: z.literal("url"), url: z.string() }),
  ]),
}).loose();
const block = z.discriminatedUnion("type", [
  text,
  image,
  z.object({ type: z.literal("tool_use"), id: z.string().min(1, "is empty"), name: z.string().min(1, "is empty"), input: z.record(z.string(), z.unknown()) }).loose(),
  z.object({
    type: z.literal("tool_result"),
    tool_use_id: z.string().min(1, "is empty"),
    content: z.union([z.string(), z.array(z.union([text, image]))]).optional(),
    is_error: z.boolean().optional(),
  }).loose(),
  z.object({ type: z.literal("thinking"), thinking: z.string() }).loose(),
  z.object({ type: z.literal("redacted_thinking") }).loose(),
]);
type Block = z.infer<typeof block>;

const parallel = { disable_parallel_tool_use: z.boolean().optional() };

/** POST /v1/messages. */
export const MessagesRequest = z.object({
  model: z.string().min(1, "is empty"),
  max_tokens: z.number().int().min(1),
  messages: z.array(z.object({ role: z.enum(["user", "assistant"]), content: z.union([z.string(), z.array(block).min(1, "is an empty list")]) })).min(1, "needs at least one message"),
  system: z.union([z.string(), z.array(text)]).optional(),
  stop_sequences: z.array(z.string()).max(4, "at most 4 stop sequences").optional(),
  temperature: z.number().min(0).max(1).optional(),
  top_p: z.number().gt(0).max(1).optional(),
  top_k: z.number().int().min(0).optional(),
  stream: z.boolean().optional(),
  tools: z.array(z.object({
    name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, "must be 1-64 letters, digits, '_' or '-'"),
    description: z.string().optional(),
    input_schema: z.record(z.string(), z.unknown()),
  }).loose()).optional(),
  tool_choice: z.discriminatedUnion("type", [
    z.object({ type: z.literal("auto"), ...parallel }),
    z.object({ type: z.literal("any"), ...parallel }),
    z.object({ type: z.literal("tool"), name: z.string().min(1), ...parallel }),
    z.object({ type: z.literal("none") }),
  ]).optional(),
  thinking: z.discriminatedUnion("type", [
    z.object({ type: z.literal("enabled"), budget_tokens: z.number().int().min(1) }),
    z.object({ type: z.literal("disabled") }),
  ]).optional(),
  metadata: z.object({ user_id: z.string().nullish() }).loose().optional(),
});
type MessagesRequest = z.infer<typeof MessagesRequest>;

/** POST /v1/messages/count_tokens: the prompt fields of a message request. */
export const CountRequest = MessagesRequest.omit({ max_tokens: true, stop_sequences: true, temperature: true, top_p: true, top_k: true, stream: true, metadata: true });

/** A block's text (text blocks joined; an image has none). */
function blockText(c: string | Block[] | undefined): string {
  if (c === undefined) return "";
  if (typeof c === "string") return c;
  return c.map((b) => (b.type === "text" ? b.text : "")).join("");
}

/** An image block as the chat route's image part. */
function imagePart(b: Extract<Block, { type: "image" }>): { type: "image_url"; image_url: { url: string } } {
  return { type: "image_url", image_url: { url: b.source.type === "base64" ? `data:${b.source.media_type};base64,${b.source.data}` : b.source.url } };
}

/**
 * A message request read into the chat route's request (then checked by its schema, as any chat is); its
 * max_tokens stays out (the route caps it by the context the prompt leaves).
 */
export function chatRequestOf(r: Omit<MessagesRequest, "max_tokens">): ChatRequest {
  const messages: Record<string, unknown>[] = [];
  if (r.system !== undefined) messages.push({ role: "system", content: blockText(r.system) });
  r.messages.forEach((m) => {
    const blocks: Block[] = typeof m.content === "string" ? [{ type: "text", text: m.content }] : m.content;
    if (m.role === "assistant") {
      const calls = blocks.filter((b) => b.type === "tool_use").map((b) => ({ id: b.id, type: "function", function: { name: b.name, arguments: JSON.stringify(b.input) } }));
      const thinking = blocks.filter((b) => b.type === "thinking").map((b) => b.thinking).join("");
      messages.push({
        role: "assistant", content: blockText(blocks),
        ...(calls.length ? { tool_calls: calls } : {}), ...(thinking ? { reasoning_content: thinking } : {}),
      });
      return;
    }
    // a user turn: its tool results first (each a tool message, as the chat templates take them), then its text
    for (const b of blocks) {
      if (b.type === "tool_result") messages.push({ role: "tool", tool_call_id: b.tool_use_id, content: (b.is_error ? "Error: " : "") + blockText(b.content) });
    }
    const parts = blocks.filter((b) => b.type === "text" || b.type === "image");
    if (parts.length) messages.push({ role: "user", content: parts.map((b) => (b.type === "text" ? { type: "text", text: b.text } : imagePart(b))) });
  });
  const c = r.tool_choice;
  const body = {
    model: r.model, messages,
    ...("stop_sequences" in r && r.stop_sequences ? { stop: r.stop_sequences } : {}),
    ...("temperature" in r ? { temperature: r.temperature } : {}),
    ...("top_p" in r ? { top_p: r.top_p } : {}),
    ...("top_k" in r ? { top_k: r.top_k } : {}),
    ...(r.tools?.length ? { tools: r.tools.map((t) => ({ type: "function", function: { name: t.name, description: t.description, parameters: t.input_schema } })) } : {}),
    ...(c ? { tool_choice: c.type === "auto" ? "auto" : c.type === "any" ? "required" : c.type === "none" ? "none" : { type: "function", function: { name: c.name } } } : {}),
    ...(c && c.type !== "none" && c.disable_parallel_tool_use ? { parallel_tool_calls: false } : {}),
    ...(r.thinking ? { chat_template_kwargs: { enable_thinking: r.thinking.type === "enabled" } } : {}),
  };
  return parseRequest(ChatRequest, body);
}

/** Anthropic's error body for a refused request. */
export function anthropicError(e: RequestError): unknown {
  const type = e.status === 413 ? "request_too_large" : e.status === 503 ? "overloaded_error" : e.status >= 500 ? "api_error" : e.type;
  return { type: "error", error: { type, message: e.message } };
}

type StopReason = "end_turn" | "max_tokens" | "stop_sequence" | "tool_use";

function stopReason(finish: string, stop: string | undefined, calls: boolean): StopReason {
  return calls ? "tool_use" : stop !== undefined ? "stop_sequence" : finish === "length" ? "max_tokens" : "end_turn";
}

/** A call as a tool_use block (its arguments parsed back to the object they are). */
function toolUse(c: ToolCall) {
  return { type: "tool_use", id: randomId("toolu_", 24), name: c.function.name, input: JSON.parse(c.function.arguments) };
}

/** What the answer needs of the request: the model id, the prompt's length, how replies are read. */
export interface AnthropicJob {
  modelId: string;
  promptTokens: number;
  reading: ReplyReading;
}

/** The one choice's sequence answered as Anthropic's message, whole or streamed. */
export async function anthropicResponse(job: AnthropicJob, h: SequenceHandle, stream: boolean): Promise<Response> {
  const id = randomId("msg_", 24);
  const usage = (output: number) => ({ input_tokens: job.promptTokens, output_tokens: output });
  const reply = new ReplyStream(job.reading);
  if (!stream) {
    let reasoning = "", content = "";
    for await (const e of h) {
      if (e.type === "error") throw failure(e.error);
      if (e.type === "token") {
        const p = reply.push(e.text);
        reasoning += p.reasoning, content += p.content;
      }
      if (e.type === "done") {
        const t = reply.push(e.tail), end = reply.end();
        reasoning += t.reasoning + end.reasoning, content += t.content + end.content;
        const blocks = [
          ...(reasoning ? [{ type: "thinking", thinking: reasoning, signature: "" }] : []),
          ...(content ? [{ type: "text", text: content }] : []),
          ...end.calls.map(toolUse),
        ];
        return new Response(JSON.stringify({
          id, type: "message", role: "assistant", model: job.modelId, content: blocks,
          stop_reason: stopReason(e.finish, e.stop, end.calls.length > 0), stop_sequence: e.stop ?? null, usage: usage(e.completionTokens),
        }), { headers: { "content-type": "application/json" } });
      }
    }
    throw failure(new CancelledError("the request was cancelled"));
  }
  const enc = new TextEncoder();
  const event = (type: string, data: Record<string, unknown>) => enc.encode(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`);
  async function* events(): AsyncGenerator<Uint8Array> {
    yield event("message_start", { message: { id, type: "message", role: "assistant", model: job.modelId, content: [], stop_reason: null, stop_sequence: null, usage: usage(0) } });
    let index = -1, open: "thinking" | "text" | undefined;
    // a block opens with its first piece and closes when a block of another kind starts
    function* piece(kind: "thinking" | "text", s: string): Generator<Uint8Array> {
      if (!s) return;
      if (open !== kind) {
        if (open) yield event("content_block_stop", { index });
        open = kind, index++;
        yield event("content_block_start", { index, content_block: kind === "thinking" ? { type: "thinking", thinking: "" } : { type: "text", text: "" } });
      }
      yield event("content_block_delta", { index, delta: kind === "thinking" ? { type: "thinking_delta", thinking: s } : { type: "text_delta", text: s } });
    }
    for await (const e of h) {
      if (e.type === "error") {
        const f = failure(e.error);
        yield event("error", { error: (anthropicError(f) as { error: unknown }).error });
        return;
      }
      if (e.type === "token") {
        const p = reply.push(e.text);
        yield* piece("thinking", p.reasoning);
        yield* piece("text", p.content);
        continue;
      }
      const t = reply.push(e.tail), end = reply.end();
      yield* piece("thinking", t.reasoning + end.reasoning);
      yield* piece("text", t.content + end.content);
      if (open) yield event("content_block_stop", { index });
      const calls = end.calls;
      for (const c of calls) {
        const b = toolUse(c);
        yield event("content_block_start", { index: ++index, content_block: { ...b, input: {} } });
        yield event("content_block_delta", { index, delta: { type: "input_json_delta", partial_json: JSON.stringify(b.input) } });
        yield event("content_block_stop", { index });
      }
      yield event("message_delta", { delta: { stop_reason: stopReason(e.finish, e.stop, calls.length > 0), stop_sequence: e.stop ?? null }, usage: { output_tokens: e.completionTokens } });
      yield event("message_stop", {});
      return;
    }
  }
  const gen = events();
  const body = new ReadableStream<Uint8Array>({
    async pull(c) {
      const r = await gen.next();
      if (r.done) c.close();
      else c.enqueue(r.value);
    },
    cancel() {
      h.cancel();
      void gen.return(undefined);
    },
  });
  return new Response(body, { status: 200, headers: { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" } });
}
