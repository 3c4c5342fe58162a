// Chat templates: OpenAI-style messages rendered with the model's own Jinja template (GGUF
// tokenizer.chat_template, or tokenizer_config.json `chat_template` / chat_template.jinja of a Hugging Face
// folder) by @huggingface/jinja, with the variables transformers' apply_chat_template passes: messages,
// bos_token, eos_token, add_generation_prompt, tools where a request has them, and the caller's own variables
// (chat_template_kwargs: Qwen3's enable_thinking); raise_exception is @huggingface/jinja's own. An assistant turn's tool_calls reach the template with their arguments as objects, as
// transformers and vLLM pass them (templates write them with `tojson`). The rendered text is tokenized as
// transformers does (special tokens in the text are parsed, none added).
import { Template } from "@huggingface/jinja";
import { z } from "zod";
import { ChatTemplateError, InvalidArgumentError } from "./errors.ts";
import { imageFromUrl } from "./image.ts";
import type { ModelHandle } from "./model.ts";
import type { Tool, ToolCall } from "./tools.ts";

/** An image part of a message: OpenAI's `image_url` (a data: URL; remote URLs are refused), or image bytes. */
export type ImagePart = { type: "image_url"; image_url: { url: string } | string } | { type: "image"; image: Uint8Array };
/** A message's content as OpenAI sends it: text, null, or parts (text, and images for a vision-language model). */
export type ChatContent = string | null | ({ type: "text"; text: string } | ImagePart)[];
/** One OpenAI-style chat message. */
export interface ChatMessage {
  /** "system", "user", "assistant" (or any role the template knows). */
  role: string;
  /** The message text. */
  content: ChatContent;
  /** An optional participant name, passed to the template. */
  name?: string;
  /** An assistant turn's calls (arguments a JSON text, as OpenAI sends them). */
  tool_calls?: ToolCall[];
  /** A "tool" turn: the call it answers. */
  tool_call_id?: string;
  /** An assistant turn's reasoning (a thinking model's think block), for templates that write it back. */
  reasoning_content?: string;
}

/** How a conversation is rendered. */
export interface ChatOptions {
  /** End with the header of an assistant turn (default true). */
  addGenerationPrompt?: boolean;
  /** A template for a model that has none (default: none, a ChatTemplateError); the server passes CHATML. */
  fallback?: string;
  /** Functions the model may call: the template's `tools` (absent when not given, as templates test for it). */
  tools?: Tool[];
  /**
   * More variables for the template (transformers' apply_chat_template keyword arguments, the servers'
   * chat_template_kwargs), e.g. `{ enable_thinking: false }` for Qwen3. They may not name the ones set here
   * (TEMPLATE_VARIABLES).
   */
  templateVars?: Record<string, unknown>;
}

/** The variables renderChat sets itself, which templateVars may not replace. */
export const TEMPLATE_VARIABLES = ["messages", "tools", "bos_token", "eos_token", "unk_token", "pad_token", "add_generation_prompt"];

/** ChatML, the template llama.cpp's server uses for a model that brings none. */
export const CHATML =
  "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>' + '\\n' }}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/** zod schema of an OpenAI-style messages array (for --messages files and server requests). */
export const ChatMessagesSchema = z.array(z.object({
  role: z.string().min(1),
  content: z.union([z.string(), z.null(), z.array(z.union([
    z.object({ type: z.literal("text"), text: z.string() }).loose(),
    z.object({ type: z.literal("image_url"), image_url: z.union([z.string(), z.object({ url: z.string() }).loose()]) }).loose(),
  ]))]),
  name: z.string().optional(),
}).loose()).min(1);

const compiled = new WeakMap<ModelHandle, { src: string; t: Template }>();

function templateOf(model: ModelHandle, fallback?: string): Template {
  const src = model.chatTemplate ?? fallback;
  if (!src) throw new ChatTemplateError(`${model.path}: the model has no chat template (GGUF tokenizer.chat_template, tokenizer_config.json chat_template or chat_template.jinja)`);
  const known = compiled.get(model);
  if (known && known.src === src) return known.t;
  const t = parseTemplate(src, model.path);
  compiled.set(model, { src, t });
  return t;
}

/** A chat template's source parsed (a ChatTemplateError naming `where` when it does not parse). */
export function parseTemplate(src: string, where: string): Template {
  try {
    return new Template(src);
  } catch (e) {
    throw new ChatTemplateError(`${where}: chat template does not parse: ${oneLine(e)}`);
  }
}

function oneLine(e: unknown): string {
  return String((e as Error)?.message ?? e).split("\n")[0];
}

/** Text parts joined; null content is empty (an assistant turn that only called tools). */
function text(c: ChatContent): string {
  if (c === null) return "";
  if (typeof c === "string") return c;
  return c.map((p) => (p.type === "text" ? p.text : "")).join("");
}

/**
 * Content as the template sees it: a string, or for a message with images the parts list that vision-language
 * templates iterate (`{type: "image"}` where each image goes, as transformers' processors pass it).
 */
function templateContent(c: ChatContent): string | { type: string; text?: string }[] {
  if (!Array.isArray(c) || c.every((p) => p.type === "text")) return text(c);
  return c.map((p) => (p.type === "text" ? { type: "text", text: p.text } : { type: "image" }));
}

/** The images of a conversation's messages, in order: bytes, or the bytes of data: URLs. */
export function chatImages(messages: ChatMessage[]): Uint8Array[] {
  const out: Uint8Array[] = [];
  messages.forEach((m, i) => {
    if (!Array.isArray(m.content)) return;
    m.content.forEach((p, j) => {
      if (p.type === "image") out.push(p.image);
      else if (p.type === "image_url") out.push(imageFromUrl(typeof p.image_url === "string" ? p.image_url : p.image_url?.url, `messages[${i}].content[${j}].image_url`));
    });
  });
  return out;
}

/** A call as templates read it: the arguments an object where the JSON text holds one (else the text as sent). */
function templateCall(c: ToolCall): unknown {
  let args: unknown = c.function.arguments;
  try {
    const v = JSON.parse(c.function.arguments);
    if (v !== null && typeof v === "object" && !Array.isArray(v)) args = v;
  } catch { /* kept as text */ }
  return { ...c, function: { ...c.function, arguments: args } };
}

/** The conversation as the model's template renders it (a string ready to tokenize). */
export function renderChat(model: ModelHandle, messages: ChatMessage[], opts: ChatOptions = {}): string {
  const t = templateOf(model, opts.fallback);
  const tok = model.tokenizer;
  const name = (id: number | undefined) => (id === undefined ? "" : tok.tokenText(id));
  const taken = Object.keys(opts.templateVars ?? {}).find((k) => TEMPLATE_VARIABLES.includes(k));
  if (taken !== undefined) throw new InvalidArgumentError("templateVars", `'${taken}' is set by the chat renderer itself`);
  try {
    return t.render({
      ...opts.templateVars,
      // tool_calls only where a turn has them: templates test `'tool_calls' in message`
      messages: messages.map(({ tool_calls, ...m }) => ({
        ...m,
        content: templateContent(m.content),
        ...(tool_calls ? { tool_calls: tool_calls.map(templateCall) } : {}),
      })),
      ...(opts.tools ? { tools: opts.tools } : {}),
      bos_token: name(tok.bos),
      eos_token: name(tok.eos),
      unk_token: name(tok.unk),
      pad_token: name(tok.pad),
      add_generation_prompt: opts.addGenerationPrompt ?? true,
    });
  } catch (e) {
    throw new ChatTemplateError(`${model.path}: chat template failed to render: ${oneLine(e)}`);
  }
}

/** Token ids of a rendered conversation, as transformers' apply_chat_template(tokenize=True) gives them. */
export function chatTokens(model: ModelHandle, messages: ChatMessage[], opts: ChatOptions = {}): number[] {
  return model.tokenizer.encode(renderChat(model, messages, opts), { addBos: false, addEos: false, parseSpecial: true });
}
