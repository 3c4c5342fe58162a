// Request bodies of the OpenAI routes, validated with zod. A failure names the field (`messages[0].content`)
// in the 400. The sampler's fields: logit_bias, presence/frequency penalties, logprobs / top_logprobs (chat) and
// logprobs N (completions), response_format (text, json_object, json_schema), and the extensions of vLLM and
// llama.cpp's server: repetition_penalty, min_tokens, grammar (GBNF/EBNF); chat's tools, tool_choice and
// parallel_tool_calls (llm/tools.ts), chat_template_kwargs, reasoning_format and an assistant turn's
// reasoning_content (llm/reasoning.ts). The parameters this server does not implement are refused with a 400 naming
// them, never silently ignored; unknown fields are ignored, as OpenAI's own API does.
import { z } from "zod";

/**
 * Where a thinking model's reasoning goes (llama.cpp's --reasoning-format): "auto" (and its alias "deepseek") into
 * `reasoning_content`, "none" left in content.
 */
export const REASONING_FORMATS = ["auto", "deepseek", "none"] as const;

const stop = z.union([z.string(), z.array(z.string()).max(4, "at most 4 stop sequences")]).nullish();

/** Fields every generation request shares. */
const common = {
  model: z.string().nullish(),
  max_tokens: z.number().int().min(1).nullish(),
  max_completion_tokens: z.number().int().min(1).nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  top_k: z.number().int().min(-1).nullish(),
  min_p: z.number().min(0).max(1).nullish(),
  seed: z.number().int().nullish(),
  stop,
  n: z.number().int().min(1).max(16).nullish(),
  user: z.string().nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.object({ include_usage: z.boolean().nullish() }).nullish(),
  logit_bias: z.record(z.string().regex(/^\d+$/, "keys must be token ids"), z.number().min(-100).max(100))
    .refine((b) => Object.keys(b).length <= 300, "at most 300 entries").nullish(),
  presence_penalty: z.number().min(-2).max(2).nullish(),
  frequency_penalty: z.number().min(-2).max(2).nullish(),
  repetition_penalty: z.number().gt(0).max(10).nullish(),
  min_tokens: z.number().int().min(0).nullish(),
  response_format: z.discriminatedUnion("type", [
    z.object({ type: z.literal("text") }),
    z.object({ type: z.literal("json_object") }),
    z.object({
      type: z.literal("json_schema"),
      json_schema: z.object({ name: z.string().nullish(), schema: z.record(z.string(), z.unknown()), strict: z.boolean().nullish() }),
    }),
  ]).nullish(),
  grammar: z.string().min(1).nullish(),
};

const textPart = z.object({ type: z.literal("text"), text: z.string() });
const imagePart = z.object({ type: z.literal("image_url"), image_url: z.union([z.string(), z.object({ url: z.string(), detail: z.string().nullish() })]) });
const toolCall = z.object({
  id: z.string().min(1, "is empty"),
  type: z.literal("function"),
  function: z.object({ name: z.string().min(1, "is empty"), arguments: z.string() }),
});
const message = z.object({
  role: z.enum(["system", "developer", "user", "assistant", "tool"]),
  content: z.union([z.string(), z.array(z.union([textPart, imagePart])).min(1)]).nullish(),
  name: z.string().nullish(),
  tool_calls: z.array(toolCall).min(1, "is an empty list").nullish(),
  tool_call_id: z.string().min(1, "is empty").nullish(),
  reasoning_content: z.string().nullish(),
}).superRefine((m, ctx) => {
  if (m.tool_calls != null && m.role !== "assistant") ctx.addIssue({ code: "custom", path: ["tool_calls"], message: "only an assistant message carries tool_calls" });
  if (m.reasoning_content != null && m.role !== "assistant") ctx.addIssue({ code: "custom", path: ["reasoning_content"], message: "only an assistant message carries reasoning_content" });
  if (m.role === "tool" && m.tool_call_id == null) ctx.addIssue({ code: "custom", path: ["tool_call_id"], message: "a tool message needs the id of the call it answers" });
  if (m.content == null && m.role !== "assistant") ctx.addIssue({ code: "custom", path: ["content"], message: "is missing (only an assistant message may leave it out)" });
});
/** OpenAI's function names: letters, digits, _ and -, 1 to 64 of them. */
const functionName = z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, "must be 1-64 letters, digits, '_' or '-'");
const tool = z.object({
  type: z.literal("function"),
  function: z.object({
    name: functionName,
    description: z.string().nullish(),
    parameters: z.record(z.string(), z.unknown()).nullish(),
    strict: z.boolean().nullish(),
  }),
});

export const ChatRequest = z.object({
  ...common,
  messages: z.array(message).min(1, "needs at least one message"),
  logprobs: z.boolean().nullish(),
  top_logprobs: z.number().int().min(0).max(20).nullish(),
  tools: z.array(tool).min(1, "is an empty list").max(128, "at most 128 tools").nullish(),
  tool_choice: z.union([
    z.enum(["none", "auto", "required"]),
    z.object({ type: z.literal("function"), function: z.object({ name: functionName }) }),
  ]).nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  chat_template_kwargs: z.record(z.string(), z.unknown()).nullish(),
  reasoning_format: z.enum(REASONING_FORMATS).nullish(),
});
export type ChatRequest = z.infer<typeof ChatRequest>;

export const CompletionRequest = z.object({
  ...common,
  prompt: z.union([
    z.string(),
    z.array(z.string()).min(1).max(16),
    z.array(z.number().int().min(0)).min(1),
    z.array(z.array(z.number().int().min(0)).min(1)).min(1).max(16),
  ]),
  logprobs: z.number().int().min(0).max(5).nullish(),
});
export type CompletionRequest = z.infer<typeof CompletionRequest>;

/** A request the server refuses: HTTP status, OpenAI error type and code, and the field it is about. */
export class RequestError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly param: string | null = null,
    readonly code: string | null = null,
    readonly type = status === 401 ? "authentication_error" : status === 404 ? "not_found_error" : status === 429
      ? "rate_limit_error" : status >= 500 ? "server_error" : "invalid_request_error",
  ) {
    super(message);
    this.name = "RequestError";
  }
}

/** A server's model names: its own id first, then the aliases (--served-model-name given more than once). */
export function servedNames(id: string, aliases: readonly string[] = []): string[] {
  return [...new Set([id, ...aliases])];
}

/**
 * The name a request's `model` serves under: the name it asked for where it is one of `ids` (the server's names, the
 * first its own: vLLM's --served-model-name with several, whose responses echo the name asked), the first where
 * it names none; a 404 otherwise.
 */
export function servedName(ids: readonly string[], asked: string | null | undefined): string {
  if (asked == null) return ids[0];
  if (!ids.includes(asked)) {
    throw new RequestError(404, `the model '${asked}' does not exist (this server serves ${ids.map((n) => `'${n}'`).join(", ")})`, "model", "model_not_found");
  }
  return asked;
}

/** `messages[0].content` from a zod issue path. */
function fieldOf(path: readonly PropertyKey[]): string {
  let s = "";
  for (const p of path) s += typeof p === "number" ? `[${p}]` : `${s ? "." : ""}${String(p)}`;
  return s || "body";
}

/** Parameters not supported yet: present with a non-default value is a 400 naming them. */
const NOT_YET: [string, (v: unknown) => boolean][] = [
  ["functions", () => true],
  ["function_call", () => true],
  ["echo", (v) => v !== false],
  ["best_of", (v) => v !== 1],
  ["suffix", () => true],
];

/** POST /v1/embeddings (OpenAI): `input` is one text or a list of texts. */
export const EmbeddingsRequest = z.object({
  model: z.string().nullish(),
  input: z.union([z.string().min(1, "is empty"), z.array(z.string().min(1, "is empty")).min(1, "is an empty list").max(2048, "at most 2048 texts")]),
  encoding_format: z.enum(["float", "base64"]).nullish(),
  dimensions: z.number().int().min(1).nullish(),
  user: z.string().nullish(),
  // Extensions (as vLLM / llama.cpp): pooling and normalization overrides, truncation.
  pooling: z.enum(["mean", "cls", "last"]).nullish(),
  normalize: z.boolean().nullish(),
  truncate: z.boolean().nullish(),
});

/** POST /v1/rerank (llama.cpp's server and Jina): documents are strings or {text}. */
export const RerankRequest = z.object({
  model: z.string().nullish(),
  query: z.string().min(1, "is empty"),
  documents: z.array(z.union([z.string().min(1, "is empty"), z.object({ text: z.string().min(1, "is empty") })])).min(1, "is an empty list").max(2048, "at most 2048 documents"),
  top_n: z.number().int().min(1).nullish(),
  return_documents: z.boolean().nullish(),
});

/** Validates a parsed JSON body against a schema; throws a RequestError naming the first bad field. */
export function parseRequest<T>(schema: z.ZodType<T>, body: unknown): T {
  if (typeof body !== "object" || body === null || Array.isArray(body)) throw new RequestError(400, "the request body must be a JSON object", "body");
  for (const [name, bad] of NOT_YET) {
    const v = (body as Record<string, unknown>)[name];
    if (v !== undefined && v !== null && bad(v)) {
      throw new RequestError(400, `'${name}' is not supported by this server yet`, name, "unsupported_parameter");
    }
  }
  const r = schema.safeParse(body);
  if (!r.success) {
    const issue = r.error.issues[0];
    const field = fieldOf(issue.path);
    throw new RequestError(400, `invalid '${field}': ${issue.message}`, field, "invalid_value");
  }
  return r.data;
}
