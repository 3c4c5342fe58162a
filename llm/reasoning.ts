// A thinking model's reasoning told apart from its answer, as llama.cpp's server (--reasoning-format) and vLLM
// (--reasoning-parser) return it: `message.reasoning_content` beside `content`. The tags are found from the chat
// template's text (`<think>` ... `</think>`: Qwen3, QwQ, DeepSeek-R1 and their distills, SmolLM3, Phi-4-reasoning).
// A reply is reasoning where it opens with the open tag, or where the rendered prompt already ends inside one (the
// template wrote the open tag: DeepSeek-R1, QwQ, Qwen3's thinking-only models), up to the close tag; a reply that
// never closes it is all reasoning. Text outside a leading block stays content, and a reply that does not open with
// the tag is all content. Whitespace around the reasoning and before the answer is dropped, as llama.cpp does.

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
 * splitReasoning of the whole text.
 */
export class ReasoningStream {
  #text = "";
  #sentReasoning = 0;
  #sentContent = 0;
  readonly #tags: ThinkTags;
  readonly #inside: boolean;

  /** A stream of one reply; `inside`: the prompt ended inside a think block. */
  constructor(tags: ThinkTags, inside: boolean) {
    this.#tags = tags;
    this.#inside = inside;
  }

  /** Appends generated text; returns what may be sent now. */
  push(piece: string): { reasoning: string; content: string } {
    this.#text += piece;
    return this.#take(false);
  }

  /** The reply ended: what was held. */
  end(): { reasoning: string; content: string } {
    return this.#take(true);
  }

  #take(last: boolean): { reasoning: string; content: string } {
    const s = spans(this.#text, this.#tags, this.#inside);
    if (s.from < 0 && s.content < 0) return last ? this.#content(0) : { reasoning: "", content: "" };
    if (s.from < 0) return this.#content(0);
    let to = s.to;
    if (!s.closed && !last) to = heldBack(this.#text, s.from, to, this.#tags.close);
    // the reasoning trimmed: its leading whitespace never goes out, its trailing whitespace only before more text
    const body = this.#text.slice(s.from, to);
    const start = s.from + (body.length - body.trimStart().length);
    const upTo = Math.max(start, s.from + body.trimEnd().length);
    const skip = Math.max(this.#sentReasoning, start);
    const reasoning = this.#text.slice(skip, Math.max(skip, upTo));
    this.#sentReasoning = Math.max(skip, upTo);
    if (!s.closed) return { reasoning, content: "" };
    return { reasoning, content: this.#content(s.content).content };
  }

  #content(from: number): { reasoning: string; content: string } {
    const start = Math.max(this.#sentContent, from);
    this.#sentContent = this.#text.length;
    return { reasoning: "", content: this.#text.slice(start) };
  }
}

/** The end of the text that may go out while a tag is unclosed: short of a tail that may start the close tag. */
function heldBack(text: string, from: number, to: number, close: string): number {
  for (let n = Math.min(close.length - 1, to - from); n > 0; n--) if (text.endsWith(close.slice(0, n))) return to - n;
  return to;
}
