// Tool calling, as OpenAI's `tools` / `tool_choice` and the servers users know (vLLM, llama.cpp --jinja) do it:
// the tools go to the model's own chat template (the `tools` variable transformers' apply_chat_template passes),
// and the reply is read back into `tool_calls` in the syntax that template teaches the model. The syntax is found
// from the template's text; four are known:
//   hermes        `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, one block a call (Qwen 2.5 / 3,
//                 Hermes, and the templates written after them)
//   llama3        the whole reply one JSON object `{"name": ..., "parameters": {...}}` (Llama 3.1-3.3's JSON tool use)
//   mistral       `[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]` (Mistral 7B v0.3, Nemo, Ministral 8B)
//   mistral-args  `[TOOL_CALLS]name[ARGS]{...}`, once a call (Mistral Small 3.1+, the v11 tokenizers' templates)
// Mistral's markers are control tokens, which decoding drops: a reply read in their syntax shows them as text
// (syntaxMarkers; DecodeOptions.shown), and its grammar may spell them. `tool_choice: "required"` or a named function
// constrains the reply to that syntax, with each tool's parameters schema, through xgrammar (llm/grammar.ts). `auto`
// leaves the model free and parses what it wrote: a reply that does not parse as calls stays text.
import { shown } from "./errors.ts";
import { schemaEbnf } from "./grammar.ts";

/** A function the model may call: its name, what it does and its arguments' JSON schema. */
export interface ToolFunction {
  /** The function's name (OpenAI: letters, digits, _ and -). */
  name: string;
  /** What it does, for the model. */
  description?: string;
  /** Its arguments' JSON schema (none: it takes no arguments). */
  parameters?: Record<string, unknown>;
}
/** One entry of a request's `tools`. */
export interface Tool {
  /** Always "function". */
  type: "function";
  /** The function. */
  function: ToolFunction;
}
/** `tool_choice`: no calls, the model's choice, at least one call, or this function. */
export type ToolChoice = "none" | "auto" | "required" | { type: "function"; function: { name: string } };
/** A call as OpenAI returns it: arguments are a JSON text. */
export interface ToolCall {
  /** The call's id, which a "tool" message's tool_call_id answers. */
  id: string;
  /** Always "function". */
  type: "function";
  /** The function's name and its arguments as a JSON text. */
  function: { name: string; arguments: string };
}
/** The call syntaxes a template can teach (see the top of this file). */
export type ToolSyntax = "hermes" | "llama3" | "mistral" | "mistral-args";

const TOOL_CALLS = "[TOOL_CALLS]", ARGS = "[ARGS]", CALL_ID = "[CALL_ID]";

/** The call syntax a chat template teaches, or undefined where it teaches none poot reads. */
export function toolSyntax(template: string | undefined): ToolSyntax | undefined {
  if (!template) return undefined;
  if (template.includes("<tool_call>")) return "hermes";
  if (template.includes(TOOL_CALLS)) return template.includes(ARGS) ? "mistral-args" : "mistral";
  if (template.includes("<|start_header_id|>") && template.includes("tools") && template.includes('"parameters"')) return "llama3";
  return undefined;
}

/** Whether a syntax is one of Mistral's. */
export function isMistral(syntax: ToolSyntax | undefined): boolean {
  return syntax === "mistral" || syntax === "mistral-args";
}

/** The markers a syntax writes as control tokens: shown as text in its replies, spelled by its grammar. */
export function syntaxMarkers(syntax: ToolSyntax): string[] {
  return syntax === "mistral" ? [TOOL_CALLS] : syntax === "mistral-args" ? [TOOL_CALLS, ARGS, CALL_ID] : [];
}

/** A reply read back: the text outside the calls (null when there is none) and the calls. */
export interface ParsedReply {
  /** The reply's text outside its calls, trimmed; null when there is none. */
  content: string | null;
  /** The calls in order: each function's name and arguments (a JSON text of an object). */
  calls: { name: string; arguments: string }[];
}

const OPEN = "<tool_call>", CLOSE = "</tool_call>", PYTHON_TAG = "<|python_tag|>";

/** One call's JSON (`{"name", "arguments"|"parameters"}`), or undefined where it is not one. */
function callOf(v: unknown): { name: string; arguments: string } | undefined {
  if (v === null || typeof v !== "object" || Array.isArray(v)) return undefined;
  const o = v as Record<string, unknown>;
  if (typeof o.name !== "string" || o.name === "") return undefined;
  const args = "arguments" in o ? o.arguments : "parameters" in o ? o.parameters : {};
  // a model that writes the arguments as a JSON text: kept as the text it wrote when that text is an object
  const obj = typeof args === "string" ? parseJson(args) : args;
  if (obj === null || typeof obj !== "object" || Array.isArray(obj)) return undefined;
  return { name: o.name, arguments: JSON.stringify(obj) };
}

function parseJson(s: string): unknown {
  try {
    return JSON.parse(s);
  } catch {
    return undefined;
  }
}

/**
 * Mistral's calls after the first `[TOOL_CALLS]`: each marker followed by a JSON list (or object) of calls, or by
 * `name[ARGS]{...}` (`name[CALL_ID]id[ARGS]{...}`); either form in either syntax, as models mix them. Undefined
 * where any part is not a call.
 */
function mistralCalls(rest: string): ParsedReply["calls"] | undefined {
  const calls: ParsedReply["calls"] = [];
  for (const seg of rest.split(TOOL_CALLS).slice(1)) {
    const body = seg.trim();
    if (body.startsWith("[") || body.startsWith("{")) {
      const v = parseJson(body);
      for (const c of Array.isArray(v) ? v : [v]) {
        const call = callOf(c);
        if (!call) return undefined;
        calls.push(call);
      }
      continue;
    }
    const a = body.indexOf(ARGS);
    if (a < 0) return undefined;
    const head = body.slice(0, a), id = head.indexOf(CALL_ID);
    const call = callOf({ name: (id < 0 ? head : head.slice(0, id)).trim(), arguments: parseJson(body.slice(a + ARGS.length).trim()) });
    if (!call) return undefined;
    calls.push(call);
  }
  return calls.length ? calls : undefined;
}

/** The calls in a reply, read by the template's syntax; a reply that does not read as calls is all content. */
export function parseReply(syntax: ToolSyntax, text: string): ParsedReply {
  const plain: ParsedReply = { content: text, calls: [] };
  if (isMistral(syntax)) {
    const i = text.indexOf(TOOL_CALLS);
    const calls = i < 0 ? undefined : mistralCalls(text.slice(i));
    if (!calls) return plain;
    const before = text.slice(0, i).trim();
    return { content: before === "" ? null : before, calls };
  }
  if (syntax === "hermes") {
    const calls: ParsedReply["calls"] = [];
    let rest = "", at = 0;
    for (;;) {
      const i = text.indexOf(OPEN, at);
      if (i < 0) break;
      rest += text.slice(at, i);
      const j = text.indexOf(CLOSE, i + OPEN.length);
      // the last block may lack its close where generation stopped right after the JSON (an end token)
      const body = text.slice(i + OPEN.length, j < 0 ? text.length : j);
      const c = callOf(parseJson(body.trim()));
      if (!c) return plain;
      calls.push(c);
      at = j < 0 ? text.length : j + CLOSE.length;
    }
    if (calls.length === 0) return plain;
    rest += text.slice(at);
    return { content: rest.trim() === "" ? null : rest.trim(), calls };
  }
  // llama3: the reply is the call(s): one object, an array of them, or objects separated by ";"
  let body = text.trim();
  if (body.startsWith(PYTHON_TAG)) body = body.slice(PYTHON_TAG.length).trim();
  if (!body.startsWith("{") && !body.startsWith("[")) return plain;
  const whole = parseJson(body);
  const parts = whole !== undefined ? (Array.isArray(whole) ? whole : [whole]) : body.split(/;\s*(?=\{)/).map((p) => parseJson(p.trim()));
  const calls = parts.map(callOf);
  if (calls.length === 0 || calls.some((c) => c === undefined)) return plain;
  return { content: null, calls: calls as ParsedReply["calls"] };
}

/**
 * How much of a reply may be streamed as content now: the text before anything that may start a call (a
 * hermes block, Mistral's marker, or for llama3 a reply that opens with JSON). The rest is held until the reply ends.
 * `final`: a call may have begun at `upTo`, so whatever follows is held too.
 */
export function streamable(syntax: ToolSyntax, text: string): { upTo: number; final: boolean } {
  if (syntax !== "llama3") {
    const mark = syntax === "hermes" ? OPEN : TOOL_CALLS;
    const i = text.indexOf(mark);
    if (i >= 0) return { upTo: i, final: true };
    for (let n = Math.min(mark.length - 1, text.length); n > 0; n--) if (text.endsWith(mark.slice(0, n))) return { upTo: text.length - n, final: false };
    return { upTo: text.length, final: false };
  }
  const lead = text.trimStart();
  if (lead === "") return { upTo: 0, final: false }; // undecided until the first visible character
  if (lead.startsWith("{") || lead.startsWith("[")) return { upTo: 0, final: true };
  if (PYTHON_TAG.startsWith(lead.slice(0, PYTHON_TAG.length))) return { upTo: 0, final: lead.length >= PYTHON_TAG.length };
  return { upTo: text.length, final: false };
}

/**
 * A fresh call id: OpenAI's shape (`call_` and 24 letters and digits), or for Mistral's syntaxes the 9 letters and
 * digits their templates insist on when the call comes back in the conversation.
 */
export function callId(syntax?: ToolSyntax): string {
  return isMistral(syntax) ? randomId("", 9) : randomId("call_", 24);
}

const ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/** `prefix` and `n` random letters and digits (the ids of calls, messages and tool uses). */
export function randomId(prefix: string, n: number): string {
  let s = prefix;
  for (const b of crypto.getRandomValues(new Uint8Array(n))) s += ALNUM[b % ALNUM.length];
  return s;
}

/**
 * A call id as Mistral's templates take it (9 letters and digits, else they raise): kept where it is one, else
 * derived from it (FNV-1a, so a call and the result that names it still match).
 */
export function mistralId(id: string): string {
  if (/^[A-Za-z0-9]{9}$/.test(id)) return id;
  let h = 0xcbf29ce484222325n;
  for (const b of new TextEncoder().encode(id)) h = ((h ^ BigInt(b)) * 0x100000001b3n) & 0xffffffffffffffffn;
  let s = "";
  for (let i = 0; i < 9; i++, h /= 62n) s += ALNUM[Number(h % 62n)];
  return s;
}

/** The tools a choice allows: all, the one it names (none where no tool has that name), none for "none". */
export function allowedTools(tools: Tool[], choice: ToolChoice): Tool[] {
  if (typeof choice === "string") return choice === "none" ? [] : tools;
  return tools.filter((t) => t.function.name === choice.function.name);
}

const NO_PARAMETERS = { type: "object", properties: {}, additionalProperties: false };

/** A JSON string literal of EBNF (xgrammar's escapes: \n, \", \\). */
function lit(s: string): string {
  return JSON.stringify(s);
}

/**
 * EBNF rules with every rule name prefixed (so several schemas' rules can share one grammar): the names at the
 * rules' heads, and where they are referenced, outside string literals and character classes.
 */
export function prefixRules(ebnf: string, prefix: string): string {
  const lines = ebnf.split("\n").filter((l) => l.trim() !== "");
  const names = new Set(lines.map((l) => l.slice(0, l.indexOf("::=")).trim()));
  return lines.map((l) => {
    const at = l.indexOf("::=");
    const body = l.slice(at + 3);
    let out = "";
    for (let i = 0; i < body.length;) {
      const c = body[i];
      if (c === '"' || c === "[") {
        // a literal or a class: copied to its unescaped end
        const end = c === '"' ? '"' : "]";
        let j = i + 1;
        while (j < body.length && body[j] !== end) j += body[j] === "\\" ? 2 : 1;
        out += body.slice(i, j + 1);
        i = j + 1;
        continue;
      }
      const m = /^[A-Za-z_][A-Za-z0-9_]*/.exec(body.slice(i));
      if (m) {
        out += names.has(m[0]) ? prefix + m[0] : m[0];
        i += m[0].length;
        continue;
      }
      out += c;
      i++;
    }
    return `${prefix}${l.slice(0, at).trim()} ::=${out}`;
  }).join("\n") + "\n";
}

/**
 * The grammar (xgrammar EBNF, its start rule `tool_reply`) of a reply that is only calls of `tools` in `syntax`:
 * each call's name one of theirs and its arguments valid against that tool's parameters schema (`{}` where it has
 * none: OpenAI's function without parameters). Hermes and Mistral take one or more calls (`parallel`), llama3 one.
 * Mistral's markers are spelled as text: its replies' grammars are compiled with them shown (syntaxMarkers).
 */
export async function callGrammar(syntax: ToolSyntax, tools: Tool[], parallel: boolean): Promise<{ type: "grammar"; grammar: string; root: string }> {
  const more = (one: string, sep: string) => parallel ? `${one} (${sep}${one})*` : one;
  if (syntax === "mistral-args") {
    // the name outside the JSON: one rule set per tool, each schema's rules prefixed apart
    const calls = await Promise.all(tools.map(async (t, i) => {
      const rules = prefixRules(await schemaEbnf(t.function.parameters ?? NO_PARAMETERS, -1), `t${i}_`);
      return { rule: `tool_call_${i} ::= ${lit(TOOL_CALLS + t.function.name + ARGS)} t${i}_root\n`, rules };
    }));
    const one = `tool_call ::= ${tools.map((_, i) => `tool_call_${i}`).join(" | ")}\n`;
    return { type: "grammar", grammar: `tool_reply ::= ${more("tool_call", "")}\n${one}${calls.map((c) => c.rule + c.rules).join("")}`, root: "tool_reply" };
  }
  const key = syntax === "llama3" ? "parameters" : "arguments";
  const schema = {
    anyOf: tools.map((t) => ({
      type: "object",
      properties: { name: { const: t.function.name }, [key]: t.function.parameters ?? NO_PARAMETERS },
      required: ["name", key],
      additionalProperties: false,
    })),
  };
  // compact JSON (indent -1: none), as the templates show calls; the schema's rules keep their names (its start
  // rule is `root`), the reply's own rules are named apart from them
  const rules = await schemaEbnf(schema, -1);
  const top = syntax === "hermes"
    ? `tool_reply ::= ${more("tool_block", lit("\n") + " ")}\ntool_block ::= ${lit(OPEN + "\n")} root ${lit("\n" + CLOSE)}\n`
    : syntax === "mistral"
    ? `tool_reply ::= ${lit(TOOL_CALLS)} " "? "[" ${more("root", lit(", ") + " ")} "]"\n`
    : `tool_reply ::= root\n`;
  return { type: "grammar", grammar: top + rules, root: "tool_reply" };
}

/** The tools' names, for an error message. */
export function toolNames(tools: Tool[]): string {
  return tools.map((t) => shown(t.function.name, 40)).join(", ");
}
