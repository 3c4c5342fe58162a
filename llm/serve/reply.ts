// A chat choice's text as OpenAI's message: a thinking model's think block split off as `reasoning_content`
// (llm/reasoning.ts), then the rest read for tool calls (calls.ts). Whole, or as a stream's deltas whose pieces
// join to the whole message.
import type { ThinkGate } from "../grammar.ts";
import type { ModelHandle } from "../model.ts";
import { opensInside, ReasoningStream, splitReasoning, thinkGate, thinkTags, type ThinkTags } from "../reasoning.ts";
import type { ToolCall, ToolSyntax } from "../tools.ts";
import { CallStream, replyMessage } from "./calls.ts";

/** How a chat job's replies are read. */
export interface ReplyReading {
  /** The think tags, and whether the prompt ends inside a block; undefined: reasoning stays in the content. */
  reasoning?: { tags: ThinkTags; inside: boolean };
  /** The tool-call syntax; undefined: the content stays text. */
  syntax?: ToolSyntax;
}

/** A finished choice's message (less its role). */
export interface ReplyMessage {
  /** The answer; null where the reply is only calls. */
  content: string | null;
  /** The think block's text, where the reply has one. */
  reasoning_content?: string;
  /** The calls the answer makes. */
  tool_calls?: ToolCall[];
}

/** A finished choice's text read into its message. */
export function replyOf(r: ReplyReading, text: string): ReplyMessage {
  const split = r.reasoning ? splitReasoning(text, r.reasoning.tags, r.reasoning.inside) : { reasoning: null, content: text };
  const m = replyMessage(r.syntax, split.content);
  return split.reasoning === null ? m : { content: m.content, reasoning_content: split.reasoning, ...(m.tool_calls ? { tool_calls: m.tool_calls } : {}) };
}

/** One streamed choice: reasoning and content released as they may go, calls read at the end. */
export class ReplyStream {
  private readonly think?: ReasoningStream;
  private readonly calls?: CallStream;

  constructor(r: ReplyReading) {
    if (r.reasoning) this.think = new ReasoningStream(r.reasoning.tags, r.reasoning.inside);
    if (r.syntax) this.calls = new CallStream(r.syntax);
  }

  /** Appends generated text; returns the reasoning and the content that may go out now. */
  push(piece: string): { reasoning: string; content: string } {
    const p = this.think ? this.think.push(piece) : { reasoning: "", content: piece };
    return { reasoning: p.reasoning, content: this.calls ? this.calls.push(p.content) : p.content };
  }

  /** The reply ended: what was held, and the calls (none where the held text is not calls). */
  end(): { reasoning: string; content: string; calls: ToolCall[] } {
    const p = this.think ? this.think.end() : { reasoning: "", content: "" };
    if (!this.calls) return { reasoning: p.reasoning, content: p.content, calls: [] };
    const now = this.calls.push(p.content);
    const e = this.calls.end();
    return { reasoning: p.reasoning, content: now + e.content, calls: e.calls };
  }
}

/**
 * How a chat's replies are read, from its rendered prompt: reasoning split off where `reasoning` is on and the
 * template has think tags; and for a reply a format constrains, the gate that leaves its think block free (each
 * tag one token: llm/reasoning.ts thinkGate), whether or not the reasoning is split off. Where the tags are not
 * single tokens a constrained reply is held from its first token and read as all answer.
 */
export function chatReading(model: ModelHandle, prompt: string, reasoning: boolean, syntax: ToolSyntax | undefined, constrained: boolean): { reading: ReplyReading; gate?: ThinkGate } {
  const tags = thinkTags(model.chatTemplate);
  if (!tags) return { reading: { syntax } };
  const split = { reading: reasoning ? { reasoning: { tags, inside: opensInside(prompt, tags) }, syntax } : { syntax } };
  if (!constrained) return split;
  const gate = thinkGate(model.chatTemplate, model.tokenizer, prompt);
  return gate ? { ...split, gate } : { reading: { syntax } };
}
