// Chat templates: a conversation rendered to the prompt text the model was trained on. The model's own Jinja
// template (GGUF `tokenizer.chat_template`) through @huggingface/jinja; ChatML when the model has none.
// (A minimal version for the server; the families work replaces it with the full one, same signature.)
import { Template } from "@huggingface/jinja";
import { LlmError } from "./errors.ts";
import type { ModelHandle } from "./model.ts";

export interface ChatMessage {
  role: string;
  content: string;
}

export interface RenderChatOptions {
  /** End with the header of an assistant turn, so generation writes the reply. */
  addGenerationPrompt?: boolean;
}

/** A chat template that cannot be parsed or rendered. */
export class ChatTemplateError extends LlmError {}

const CHATML = "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

const compiled = new WeakMap<ModelHandle, Template>();

/** The prompt text of `messages` under the model's chat template (ChatML when it has none). */
export function renderChat(model: ModelHandle, messages: readonly ChatMessage[], opts: RenderChatOptions = {}): string {
  let t = compiled.get(model);
  if (!t) {
    try {
      t = new Template(model.chatTemplate ?? CHATML);
    } catch (e) {
      throw new ChatTemplateError(`chat template of ${model.path} does not parse: ${(e as Error).message}`);
    }
    compiled.set(model, t);
  }
  const tok = model.tokenizer;
  const text = (id: number | undefined) => id === undefined ? "" : new TextDecoder().decode(tok.tokenBytes(id, true));
  try {
    return t.render({
      messages: messages.map((m) => ({ role: m.role, content: m.content })),
      add_generation_prompt: opts.addGenerationPrompt ?? false,
      bos_token: text(tok.bos),
      eos_token: text(tok.eos),
    });
  } catch (e) {
    throw new ChatTemplateError(`chat template of ${model.path} failed to render: ${(e as Error).message}`);
  }
}
