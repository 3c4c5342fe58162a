// Structured output: a JSON schema, any JSON object, or a GBNF/EBNF grammar, compiled by xgrammar (the engine
// vLLM, SGLang and WebLLM use) in its WASM build, @mlc-ai/web-xgrammar. Per step the host asks the matcher for
// the token bitmask (ceil(vocab/32) words, bit set = allowed), the device sampler applies it
// (graph/logits.ts `logits_process`), and the host advances the matcher with the sampled token.
//
// Loading: the package ships one UMD file under "type": "module", so `import` works under Bun but not under
// Deno or Node (the file calls `require`). It is evaluated here as the CommonJS module it is, with a real
// `require` from node:module, which works under Deno, Bun and Node (also from the npm bundle, where the
// package stays external). The WASM inside is compiled once per process, on first use.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { dirname } from "node:path";
import { LlmError } from "./errors.ts";
import { TokenType, type Tokenizer } from "./tokenizer/mod.ts";
import { BYTE_TO_CHAR } from "./tokenizer/byte-level.ts";

/** What the output must be. */
export type ResponseFormat =
  | { type: "json_schema"; schema: unknown }
  | { type: "json_object" }
  | { type: "grammar"; grammar: string; root?: string };

/** A format that cannot be compiled (bad schema, bad grammar) or an engine that cannot load. */
export class GrammarError extends LlmError {
  /** The class name, as the other typed errors carry it. */
  override name = "GrammarError";
}

// deno-lint-ignore no-explicit-any
type XG = any;
let engine: Promise<XG> | undefined;

/** The xgrammar module, loaded once (its WASM compiles on the first call that needs it). */
export function xgrammar(): Promise<XG> {
  engine ??= new Promise<XG>((resolve, reject) => {
    let file = "@mlc-ai/web-xgrammar";
    try {
      const url = import.meta.resolve("@mlc-ai/web-xgrammar");
      file = fileURLToPath(url);
      const mod = { exports: {} as Record<string, unknown> };
      new Function("exports", "module", "require", "__filename", "__dirname", readFileSync(file, "utf8"))(
        mod.exports, mod, createRequire(url), file, dirname(file),
      );
      resolve(mod.exports);
    } catch (e) {
      reject(new GrammarError(`cannot load @mlc-ai/web-xgrammar from ${file}: ${(e as Error).message}`));
    }
  });
  return engine;
}

interface ModelGrammars {
  compiler: Promise<XG>;
  compiled: Map<string, Promise<XG>>;
}
const perTokenizer = new WeakMap<Tokenizer, Map<string, ModelGrammars>>();

/**
 * xgrammar's view of a vocabulary: each token's bytes (what it decodes to) in GPT-2's byte-to-unicode spelling,
 * so one encoding serves SentencePiece byte-fallback, byte-level BPE and any other tokenizer exactly. Control,
 * unknown and unused tokens, and embedding rows past the tokenizer, are never text (""), but for the control tokens
 * `shown` (a tool-call syntax's markers, which its grammar spells).
 */
function tokenizerInfo(xg: XG, tok: Tokenizer, vocab: number, shown?: ReadonlySet<number>): Promise<XG> {
  const encoded: string[] = [];
  for (let id = 0; id < vocab; id++) {
    const ty = id < tok.vocabSize ? tok.tokenType(id) : TokenType.unused;
    const show = ty === TokenType.control && (shown?.has(id) ?? false);
    if (!show && (ty === TokenType.control || ty === TokenType.unknown || ty === TokenType.unused)) {
      encoded.push("");
      continue;
    }
    let s = "";
    for (const byte of tok.tokenBytes(id, show)) s += BYTE_TO_CHAR[byte];
    encoded.push(s);
  }
  return xg.TokenizerInfo.createTokenizerInfo(encoded, "byte_level", false, vocab, [...tok.eog].filter((t) => t < vocab));
}

/** A format's cache key and checks (a GrammarError names what is wrong). */
function formatKey(f: ResponseFormat): string {
  if (f === null || typeof f !== "object") throw new GrammarError("response format must be an object");
  switch (f.type) {
    case "json_object": return "json";
    case "json_schema":
      if (f.schema === null || typeof f.schema !== "object") throw new GrammarError("json_schema: the schema must be a JSON object");
      return `schema:${JSON.stringify(f.schema)}`;
    case "grammar":
      if (typeof f.grammar !== "string" || f.grammar.trim() === "") throw new GrammarError("grammar: must be a non-empty GBNF/EBNF string");
      return `grammar:${f.root ?? "root"}:${f.grammar}`;
  }
  throw new GrammarError(`response format type ${JSON.stringify((f as { type?: unknown }).type)} is not json_schema, json_object or grammar`);
}

/**
 * Compiles a format for a model's vocabulary (cached per tokenizer, vocabulary size, shown control tokens and
 * format); `shown`: control tokens the grammar may spell by their text.
 */
export async function compileFormat(tok: Tokenizer, vocab: number, f: ResponseFormat, shown?: ReadonlySet<number>): Promise<XG> {
  const key = formatKey(f);
  const xg = await xgrammar();
  let byVocab = perTokenizer.get(tok);
  if (!byVocab) perTokenizer.set(tok, byVocab = new Map());
  const vocabKey = `${vocab}:${[...shown ?? []].sort((a, b) => a - b).join(",")}`;
  let m = byVocab.get(vocabKey);
  if (!m) {
    const compiler = tokenizerInfo(xg, tok, vocab, shown).then((ti) => xg.GrammarCompiler.createGrammarCompiler(ti));
    byVocab.set(vocabKey, m = { compiler, compiled: new Map() });
  }
  let c = m.compiled.get(key);
  if (!c) {
    c = (async () => {
      const gc = await m.compiler;
      try {
        if (f.type !== "grammar") return await gc.compileGrammar(await schemaGrammar(xg, f.type === "json_object" ? { type: "object" } : f.schema));
        return await gc.compileGrammar(f.grammar, f.root ?? "root");
      } catch (e) {
        throw new GrammarError(`${f.type === "grammar" ? "grammar" : "json_schema"}: ${(e as Error)?.message ?? String(e)}`);
      }
    })();
    m.compiled.set(key, c);
    c.catch(() => m.compiled.delete(key));
  }
  return await c;
}

/**
 * A JSON schema as xgrammar EBNF (start rule `root`; `indent` -1: compact JSON), its length-limited string class
 * (minLength/maxLength, `[^"\\\r\n]{m,n}`) narrowed to exclude raw control characters, which xgrammar 0.1.27
 * admits there and JSON.parse rejects. (Known limit, not fixed here: its string classes also admit UTF-16 surrogate
 * code points, U+D800-DFFF, which a byte-level vocabulary can spell byte by byte; they decode as U+FFFD. xgrammar
 * warns and clamps when a negated class names code points above 127, so the class cannot exclude them.)
 */
export async function schemaEbnf(schema: unknown, indent?: number): Promise<string> {
  const xg = await xgrammar();
  const ebnf: string = await xg.Testings._jsonSchemaToEBNF(JSON.stringify(schema), false, indent);
  return ebnf.replaceAll(String.raw`[^"\\\r\n]`, String.raw`[^"\\\0-\x1f]`);
}

async function schemaGrammar(xg: XG, schema: unknown): Promise<XG> {
  return await xg.Grammar.fromEBNF(await schemaEbnf(schema), "root");
}

/**
 * Where a thinking model's reply is free before the grammar holds it: the think tags' token ids (each tag one token
 * of the vocabulary) and whether the prompt already opened the block. Free while inside the block (up to its close);
 * with the block not opened, the first token may be the open tag (then free to the close) or the grammar's.
 */
export interface ThinkGate {
  /** The open tag's token id. */
  open: number;
  /** The close tag's token id. */
  close: number;
  /** The rendered prompt ends inside a think block. */
  inside: boolean;
}

/** One generation's grammar state: the mask for the next token, and the tokens accepted so far. */
export class Constraint {
  /** "think": inside a think block (no mask); "first": the open tag or the grammar's first token; "grammar". */
  private state: "think" | "first" | "grammar";

  private constructor(private readonly matcher: XG, readonly words: number, private readonly gate?: ThinkGate) {
    this.state = !gate ? "grammar" : gate.inside ? "think" : "first";
  }

  /** A matcher for a compiled format, for a vocabulary of `vocab` tokens (after a think block where `gate` says). */
  static async create(compiled: XG, vocab: number, gate?: ThinkGate): Promise<Constraint> {
    const xg = await xgrammar();
    return new Constraint(await xg.GrammarMatcher.createGrammarMatcher(compiled), Math.ceil(vocab / 32), gate);
  }

  /** The allowed next tokens: bit (id & 31) of word id >> 5; none (any token) inside a think block. */
  async mask(): Promise<Uint32Array | undefined> {
    if (this.state === "think") return undefined;
    const m: Int32Array = await this.matcher.getNextTokenBitmask();
    const words = new Uint32Array(m.buffer, m.byteOffset, this.words);
    if (this.state === "grammar") return words;
    const open = this.gate!.open, out = words.slice();
    out[open >>> 5] |= 1 << (open & 31);
    return out;
  }

  /** Advances the matcher; false when the grammar does not admit the token (a sampler that ignored the mask). */
  accept(token: number): boolean {
    if (this.state === "think") {
      if (token === this.gate!.close) this.state = "grammar";
      return true;
    }
    if (this.state === "first") {
      this.state = token === this.gate!.open ? "think" : "grammar";
      if (this.state === "think") return true;
    }
    return this.matcher.acceptToken(token);
  }

  /** True once the grammar has accepted its end (a stop token). */
  get done(): boolean {
    return this.matcher.isTerminated();
  }

  dispose(): void {
    this.matcher.dispose();
  }
}
