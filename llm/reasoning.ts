// A thinking model's reasoning told apart from its answer, as llama.cpp's server (--reasoning-format) and vLLM
// (--reasoning-parser) return it: `message.reasoning_content` beside `content`. The tags are found from the chat
// template's text (`<think>` ... `</think>`: Qwen3, QwQ, DeepSeek-R1 and their distills, SmolLM3, Phi-4-reasoning).
// A reply is reasoning where it opens with the open tag, or where the rendered prompt already ends inside one (the
// template wrote the open tag: DeepSeek-R1, QwQ, Qwen3's thinking-only models), up to the close tag; a reply that
// never closes it is all reasoning. Text outside a leading block stays content, and a reply that does not open with
// the tag is all content. Whitespace around the reasoning and before the answer is dropped, as llama.cpp does.

import type { ThinkGate } from "./grammar.ts";
import type { Tokenizer } from "./tokenizer/types.ts";

/** A template's think tags. */
export interface ThinkTags {
  /** The tag that opens the reasoning ("<think>"). */
  open: string;
  /** The tag that closes it ("</think>"). */
  close: string;
}

const KNOWN: ThinkTags[] = [{ open: "<think>", close: "</think>" }];

/** The think tags a chat template writes, or undefined where it has none. */
export function thinkTags(template: string | undefined): ThinkTags | undefined {
  if (!template) return undefined;
  return KNOWN.find((t) => template.includes(t.open) && template.includes(t.close));
}

/** Whether a rendered prompt leaves the reply inside a think block (its last open tag has no close after it). */
export function opensInside(prompt: string, tags: ThinkTags): boolean {
  const i = prompt.lastIndexOf(tags.open);
  return i >= 0 && prompt.indexOf(tags.close, i) < 0 && prompt.slice(i + tags.open.length).trim() === "";
}

/**
 * The gate that leaves a thinking model's think block free of a format's grammar (grammar.ts ThinkGate), for a
 * reply to `prompt`: undefined where the template has no think tags or a tag is not one token of the vocabulary
 * (then the grammar holds the reply from its first token).
 */
export function thinkGate(template: string | undefined, tok: Tokenizer, prompt: string): ThinkGate | undefined {
  const tags = thinkTags(template);
  if (!tags) return undefined;
  const one = (text: string) => {
    const ids = tok.encode(text, { addBos: false, addEos: false, parseSpecial: true });
    return ids.length === 1 ? ids[0] : undefined;
  };
  const open = one(tags.open), close = one(tags.close);
  return open === undefined || close === undefined ? undefined : { open, close, inside: opensInside(prompt, tags) };
}

/** A reply split: its reasoning (null where it has none) and its answer. */
export interface SplitReply {
  /** The text of the think block, trimmed; null where the reply has no block. */
  reasoning: string | null;
  /** The rest of the reply: the answer. */
  content: string;
}

/** Where a reply's parts lie: the reasoning's text span, and where the content starts (-1: not yet known). */
interface Spans {
  /** Start and end of the reasoning in the text (both -1 where there is none). */
  from: number;
  to: number;
  /** Whether the close tag has been seen. */
  closed: boolean;
  /** Start of the content; -1 while it is not known whether the reply opens with a block. */
  content: number;
}

function spans(text: string, tags: ThinkTags, inside: boolean): Spans {
  let from = 0;
  if (!inside) {
    const lead = text.length - text.trimStart().length;
    const rest = text.slice(lead);
    if (rest.length < tags.open.length && tags.open.startsWith(rest)) return { from: -1, to: -1, closed: false, content: -1 };
    if (!rest.startsWith(tags.open)) return { from: -1, to: -1, closed: false, content: 0 };
    from = lead + tags.open.length;
  }
  const end = text.indexOf(tags.close, from);
  if (end < 0) return { from, to: text.length, closed: false, content: -1 };
  let content = end + tags.close.length;
  while (content < text.length && /\s/.test(text[content])) content++;
  return { from, to: end, closed: true, content };
}

/** A whole reply split into reasoning and answer (`inside`: the prompt ended inside a think block). */
export function splitReasoning(text: string, tags: ThinkTags, inside: boolean): SplitReply {
  const s = spans(text, tags, inside);
  if (s.from < 0) return { reasoning: null, content: text };
  // a block that never closed: all of it is reasoning
  return { reasoning: text.slice(s.from, s.to).trim(), content: s.closed ? text.slice(s.content) : "" };
}

/**
 * One streamed reply split as it grows: each push returns the reasoning and the content that may go out now; text
 * that may still turn out to be a tag, or whitespace the whole reply would trim, is held. The pieces joined equal
 * splitReasoning of the whole text. It keeps only what it holds (a push reads that and the new piece, not the
 * reply so far: a server runs it per token of every streamed sequence).
 */
export class ReasoningStream {
  readonly #tags: ThinkTags;
  /** Undecided (the open tag may still come), inside the block, skipping whitespace after it, or content. */
  #phase: "lead" | "reasoning" | "gap" | "content";
  /** Text not yet sent: the lead while undecided, the reasoning's held tail inside the block. */
  #held = "";
  /** Whether reasoning text has gone out (its leading whitespace never does). */
  #begun = false;

  /** A stream of one reply; `inside`: the prompt ended inside a think block. */
  constructor(tags: ThinkTags, inside: boolean) {
    this.#tags = tags;
    this.#phase = inside ? "reasoning" : "lead";
  }

  /** Appends generated text; returns what may be sent now. */
  push(piece: string): { reasoning: string; content: string } {
    return this.#take(piece, false);
  }

  /** The reply ended: what was held. */
  end(): { reasoning: string; content: string } {
    return this.#take("", true);
  }

  #take(piece: string, last: boolean): { reasoning: string; content: string } {
    const { open, close } = this.#tags;
    if (this.#phase === "lead") {
      const text = this.#held + piece, rest = text.trimStart();
      if (rest.length < open.length && open.startsWith(rest)) {
        this.#held = last ? "" : text;
        return { reasoning: "", content: last ? text : "" };
      }
      this.#held = "";
      if (!rest.startsWith(open)) {
        this.#phase = "content";
        return { reasoning: "", content: text };
      }
      this.#phase = "reasoning";
      piece = rest.slice(open.length);
    }
    if (this.#phase === "reasoning") {
      let body = this.#held + piece;
      if (!this.#begun) body = body.trimStart();
      const end = body.indexOf(close);
      if (end >= 0) {
        this.#held = "";
        this.#phase = "gap";
        return { reasoning: this.#send(body.slice(0, end).trimEnd()), content: this.#content(body.slice(end + close.length)) };
      }
      // short of a tail that may start the close tag (kept whole at the end), and of trailing whitespace
      let to = body.length;
      if (!last) for (let n = Math.min(close.length - 1, body.length); n > 0; n--) if (body.endsWith(close.slice(0, n))) { to -= n; break; }
      const upTo = body.slice(0, to).trimEnd().length;
      this.#held = last ? "" : body.slice(upTo);
      return { reasoning: this.#send(body.slice(0, upTo)), content: "" };
    }
    return { reasoning: "", content: this.#content(piece) };
  }

  #send(reasoning: string): string {
    if (reasoning) this.#begun = true;
    return reasoning;
  }

  /** Content after the block: the whitespace that opens it dropped. */
  #content(text: string): string {
    if (this.#phase !== "gap") return text;
    const rest = text.trimStart();
    if (rest) this.#phase = "content";
    return rest;
  }
}
