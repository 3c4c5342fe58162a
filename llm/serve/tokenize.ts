// POST /tokenize and /detokenize, as vLLM's and llama.cpp's servers answer them. Their bodies differ and both are
// read; the answer carries both servers' fields:
//   /tokenize    vLLM: {prompt, add_special_tokens = true, return_token_strs} or {messages, ...the chat fields}
//                (the chat prompt as /v1/chat/completions renders it); llama.cpp: {content, add_special = false,
//                with_pieces}. -> {tokens, count, max_model_len} (+ token_strs; with_pieces: tokens are {id, piece})
//   /detokenize  {tokens} -> {prompt (vLLM), content (llama.cpp)}
// Special-token text in a prompt is parsed to its token, as both do.
import { z } from "zod";
import { toolUse } from "./calls.ts";
import type { HttpOptions } from "./http.ts";
import { chatPrompt } from "./prompt.ts";
import { ChatRequest, parseRequest, RequestError, servedName } from "./schema.ts";

const TextTokenize = z.object({
  model: z.string().nullish(),
  prompt: z.string().optional(),
  content: z.string().optional(),
  add_special_tokens: z.boolean().nullish(),
  add_special: z.boolean().nullish(),
  return_token_strs: z.boolean().nullish(),
  with_pieces: z.boolean().nullish(),
}).refine((b) => (b.prompt === undefined) !== (b.content === undefined), { message: "give one of prompt (or content) or messages", path: ["prompt"] });

const Detokenize = z.object({
  model: z.string().nullish(),
  tokens: z.array(z.number().int().min(0)).max(1 << 20, "at most 2^20 tokens"),
});

/** A chat's prompt ids as the chat route makes them, for text messages (/tokenize, Anthropic's count_tokens). */
export async function chatIds(o: HttpOptions, r: ChatRequest): Promise<number[]> {
  servedName(o.modelIds, r.model);
  if (r.messages.some((m) => Array.isArray(m.content) && m.content.some((p) => p.type === "image_url"))) {
    throw new RequestError(400, "counting tokens takes text messages: an image's tokens are made by the vision tower", "messages", "invalid_value");
  }
  return chatPrompt(o, r, await toolUse(o.model, r), false).ids();
}

/** POST /tokenize's answer. */
export async function tokenize(o: HttpOptions, body: unknown): Promise<unknown> {
  const tok = o.model.tokenizer;
  let ids: number[];
  let pieces = false, strs = false;
  if (body !== null && typeof body === "object" && "messages" in body) {
    ids = await chatIds(o, parseRequest(ChatRequest, body));
    strs = (body as { return_token_strs?: unknown }).return_token_strs === true;
  } else {
    const r = parseRequest(TextTokenize, body);
    servedName(o.modelIds, r.model);
    // vLLM's field adds BOS by default, llama.cpp's does not
    const addSpecial = r.prompt !== undefined ? r.add_special_tokens ?? r.add_special ?? true : r.add_special ?? r.add_special_tokens ?? false;
    ids = tok.encode(r.prompt ?? r.content!, { addBos: addSpecial, addEos: addSpecial ? undefined : false, parseSpecial: true });
    pieces = r.with_pieces === true;
    strs = r.return_token_strs === true;
  }
  const piece = (id: number) => tok.decode([id], { special: true, stripLeadingSpace: false });
  return {
    tokens: pieces ? ids.map((id) => ({ id, piece: piece(id) })) : ids,
    count: ids.length,
    max_model_len: o.ctx,
    ...(strs ? { token_strs: ids.map(piece) } : {}),
  };
}

/** POST /detokenize's answer. */
export function detokenize(o: HttpOptions, body: unknown): unknown {
  const r = parseRequest(Detokenize, body);
  servedName(o.modelIds, r.model);
  const vocab = o.model.config.vocab;
  const bad = r.tokens.findIndex((t) => t >= vocab || t >= o.model.tokenizer.vocabSize);
  if (bad >= 0) throw new RequestError(400, `token id ${r.tokens[bad]} is outside the vocabulary of ${Math.min(vocab, o.model.tokenizer.vocabSize)}`, `tokens[${bad}]`, "invalid_value");
  // as transformers' decode: special tokens as their text, SentencePiece's leading space dropped (a round trip)
  const text = o.model.tokenizer.decode(r.tokens, { special: true });
  return { prompt: text, content: text };
}
