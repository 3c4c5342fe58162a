// Tool calls in the chat route: a request's tools checked against themselves and the model's template (a
// RequestError naming the field), the grammar of a `required` or named tool_choice, and each choice's reply read
// back into OpenAI's message, whole or as stream deltas (llm/tools.ts knows the syntaxes).
import type { ModelHandle } from "../model.ts";
import type { ResponseFormat } from "../grammar.ts";
import { allowedTools, callGrammar, callId, parseReply, streamable, syntaxMarkers, type Tool, type ToolCall, type ToolChoice, type ToolSyntax, toolSyntax } from "../tools.ts";
import { TokenType } from "../tokenizer/mod.ts";
import { type ChatRequest, RequestError } from "./schema.ts";

/** What a chat request's tools ask of its job. */
export interface ToolUse {
  /** What the template renders. */
  tools: Tool[];
  /** The syntax replies are read in; undefined (tool_choice none only) = replies stay text. */
  syntax?: ToolSyntax;
  /** The reply constrained to calls (tool_choice required or a named function). */
  format?: ResponseFormat;
  /** The syntax's markers that are control tokens of the vocabulary: shown as text in replies, spelled by `format`. */
  shown?: ReadonlySet<number>;
}

/** A chat request's tools, checked; undefined when it has none. */
export async function toolUse(model: ModelHandle, r: ChatRequest): Promise<ToolUse | undefined> {
  if (r.tools == null) {
    if (r.tool_choice != null && r.tool_choice !== "none") throw new RequestError(400, "tool_choice needs tools", "tool_choice", "invalid_value");
    return undefined;
  }
  const tools = r.tools.map((t) => ({
    type: "function" as const,
    function: {
      name: t.function.name,
      ...(t.function.description != null ? { description: t.function.description } : {}),
      ...(t.function.parameters != null ? { parameters: t.function.parameters } : {}),
    },
  }));
  const seen = new Set<string>();
  tools.forEach((t, i) => {
    if (seen.has(t.function.name)) throw new RequestError(400, `tools[${i}]: a second function named '${t.function.name}'`, `tools[${i}].function.name`, "invalid_value");
    seen.add(t.function.name);
  });
  const choice: ToolChoice = r.tool_choice ?? "auto";
  const allowed = allowedTools(tools, choice);
  if (typeof choice === "object" && allowed.length === 0) {
    throw new RequestError(400, `tool_choice names '${choice.function.name}', which is not among the tools`, "tool_choice.function.name", "invalid_value");
  }
  if (choice === "none") return { tools };
  const syntax = toolSyntax(model.chatTemplate);
  if (!syntax) {
    throw new RequestError(400, `${model.chatTemplate === undefined ? "the model has no chat template" : "the model's chat template teaches no tool-call syntax this server reads"} (Hermes <tool_call> blocks, Llama 3 JSON, Mistral [TOOL_CALLS]): tools need one (tool_choice "none" renders them without reading calls)`, "tools", "unsupported_tools");
  }
  if ((r.response_format != null && r.response_format.type !== "text") || r.grammar != null) {
    throw new RequestError(400, "give tools or a response format (response_format, grammar), not both", r.grammar != null ? "grammar" : "response_format", "invalid_value");
  }
  const tok = model.tokenizer;
  const ids = syntaxMarkers(syntax).map((m) => tok.tokenId(m)).filter((id) => id !== undefined && tok.tokenType(id) === TokenType.control) as number[];
  const shown = ids.length ? { shown: new Set(ids) } : {};
  if (choice === "auto") return { tools, syntax, ...shown };
  try {
    return { tools, syntax, ...shown, format: await callGrammar(syntax, allowed, r.parallel_tool_calls ?? true) };
  } catch (e) {
    throw new RequestError(400, `the tools' parameters do not make a grammar: ${String((e as Error)?.message ?? e).split("\n")[0]}`, "tools", "invalid_value");
  }
}

/** A finished choice's message: text, or its calls (each with a fresh id) and the text around them. */
export function replyMessage(syntax: ToolSyntax | undefined, text: string): { content: string | null; tool_calls?: ToolCall[] } {
  if (!syntax) return { content: text };
  const p = parseReply(syntax, text);
  if (p.calls.length === 0) return { content: text };
  return { content: p.content, tool_calls: p.calls.map((c) => ({ id: callId(syntax), type: "function", function: c })) };
}

/**
 * One streamed choice: content released while it cannot be the start of a call, the rest read at the end. A push
 * reads only the held text and the new piece: what went out cannot start a call (a marker begins in what was held,
 * and a llama3 reply that sent text is text).
 */
export class CallStream {
  #sent: string[] = [];
  #held = "";
  /** A call may have begun: everything from here on is held to the end. */
  #holding = false;

  constructor(private readonly syntax: ToolSyntax) {}

  /** Appends generated text; returns the content that may go out now. */
  push(piece: string): string {
    if (this.#holding) {
      this.#held += piece;
      return "";
    }
    const text = this.#held + piece;
    const s = this.syntax === "llama3" && this.#sent.length ? { upTo: text.length, final: false } : streamable(this.syntax, text);
    const out = text.slice(0, s.upTo);
    this.#held = text.slice(s.upTo);
    this.#holding = s.final;
    if (out) this.#sent.push(out);
    return out;
  }

  /** The reply ended: the content not sent yet and the calls (none when the held text is not calls). */
  end(): { content: string; calls: ToolCall[] } {
    const sent = this.#sent.join(""), held = this.#held;
    this.#sent = [sent + held];
    this.#held = "";
    const m = replyMessage(this.syntax, sent + held);
    if (!m.tool_calls) return { content: held, calls: [] };
    // calls found: what the parse kept as content, less what already went out (a reply's text before its calls)
    const kept = m.content ?? "";
    const sentText = sent.trim();
    const rest = kept.startsWith(sentText) ? kept.slice(sentText.length) : "";
    return { content: rest.trim() === "" ? "" : rest, calls: m.tool_calls };
  }
}
