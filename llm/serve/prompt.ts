// A chat request's prompt: its messages as the model's template renders them (tools, template variables, a
// reasoning turn, call ids a Mistral template takes), and their token ids. The chat route and /tokenize share it.
import { type ChatMessage, CHATML, renderChat } from "../chat.ts";
import { InvalidArgumentError } from "../errors.ts";
import { isMistral, mistralId, toolSyntax } from "../tools.ts";
import type { ToolUse } from "./calls.ts";
import type { HttpOptions } from "./http.ts";
import { type ChatRequest, RequestError } from "./schema.ts";

/**
 * A chat request's prompt: its messages rendered with the model's template (tools, template variables), as text and
 * as the token ids of a prompt without images.
 */
export function chatPrompt(o: HttpOptions, r: ChatRequest, tools: ToolUse | undefined, images: boolean): { text: string; ids: () => number[] } {
  // Mistral's templates refuse call ids that are not 9 letters and digits: others (a client's own) are mapped
  const callIdFor = isMistral(toolSyntax(o.model.chatTemplate)) ? mistralId : (id: string) => id;
  const messages: ChatMessage[] = r.messages.map((m) => ({
    role: m.role,
    // image parts stay parts: the template renders its image marker where each one is
    content: m.content == null ? "" : typeof m.content === "string" ? m.content
      : images ? m.content.map((p) => (p.type === "text" ? p : { type: "image_url", image_url: p.image_url }))
      : m.content.map((p) => (p.type === "text" ? p.text : "")).join(""),
    ...(m.name != null ? { name: m.name } : {}),
    ...(m.tool_calls != null ? { tool_calls: m.tool_calls.map((c) => ({ ...c, id: callIdFor(c.id) })) } : {}),
    ...(m.tool_call_id != null ? { tool_call_id: callIdFor(m.tool_call_id) } : {}),
    ...(m.reasoning_content != null ? { reasoning_content: m.reasoning_content } : {}),
  }));
  let text: string;
  try {
    // A model without a template is served with ChatML, as llama.cpp's server does.
    const templateVars = { ...o.templateVars, ...r.chat_template_kwargs };
    text = renderChat(o.model, messages, { addGenerationPrompt: true, fallback: CHATML, tools: tools?.tools, templateVars });
  } catch (e) {
    if (e instanceof InvalidArgumentError) throw new RequestError(400, `chat_template_kwargs: ${e.message.replace(/^templateVars: /, "")}`, "chat_template_kwargs", "invalid_value");
    throw new RequestError(400, (e as Error).message, "messages", "chat_template_failed");
  }
  // The model's own template writes its special tokens (BOS included) as text: they are parsed and none is
  // added, as transformers' apply_chat_template and Driver.chat do. The ChatML fallback adds what the
  // tokenizer adds to any prompt.
  const chatEncode = o.model.chatTemplate !== undefined ? { addBos: false, addEos: false, parseSpecial: true } : { parseSpecial: true };
  return { text, ids: () => o.model.tokenizer.encode(text, chatEncode) };
}
