// Pre-tokenizers of byte-level BPE: regexes that split text into words before merging. Named presets follow
// llama.cpp's tokenizer.ggml.pre table; tokenizer.json patterns are translated to JS (Unicode White_Space for
// \s as llama.cpp defines it, (?i:...) groups expanded, possessive quantifiers made greedy as llama.cpp does).

// Unicode White_Space, the set llama.cpp's unicode tables call whitespace (JS's \s differs: it has U+FEFF and
// lacks U+0085).
const WS = "\\t-\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";

const CONTRACTIONS = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";
const GPT2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const LLAMA3 = CONTRACTIONS +
  "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2 = CONTRACTIONS +
  "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const UPPERISH = "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]";
const LOWERISH = "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]";
const TEKKEN = `[^\\r\\n\\p{L}\\p{N}]?${UPPERISH}*${LOWERISH}+|[^\\r\\n\\p{L}\\p{N}]?${UPPERISH}+${LOWERISH}*` +
  "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const GPT4O = `[^\\r\\n\\p{L}\\p{N}]?${UPPERISH}*${LOWERISH}+${CONTRACTIONS}?` +
  `|[^\\r\\n\\p{L}\\p{N}]?${UPPERISH}+${LOWERISH}*${CONTRACTIONS}?` +
  "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

interface Preset {
  regexes: string[];
  ignoreMerges?: boolean;
  addBos?: boolean;
}

const PRESETS: [names: string[], preset: Preset][] = [
  [["default"], { regexes: ["[\\p{P}\\$\\+<=>\\^~\\|]+", GPT2, "\\p{N}+", "[0-9][0-9][0-9]"] }],
  [
    [
      "gpt-2", "gpt2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
      "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais", "trillion",
      "granite-docling", "exaone4",
    ],
    { regexes: [GPT2] },
  ],
  [
    ["llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"],
    { regexes: [LLAMA3], ignoreMerges: true, addBos: true },
  ],
  [["dbrx", "smaug-bpe", "chatglm-bpe", "glm4"], { regexes: [LLAMA3] }],
  [
    ["qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "stablelm2", "megrez", "hunyuan", "solar-open", "grok-2"],
    { regexes: [QWEN2] },
  ],
  [
    ["starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"],
    { regexes: ["\\p{N}", GPT2] },
  ],
  [["falcon"], { regexes: ["[\\p{P}\\$\\+<=>\\^~\\|`]+", GPT2, "[0-9][0-9][0-9]"] }],
  [["tekken"], { regexes: [TEKKEN], ignoreMerges: true, addBos: true }],
  [["gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"], { regexes: [GPT4O] }],
];

const BY_NAME = new Map<string, Preset>(PRESETS.flatMap(([names, p]) => names.map((n) => [n, p] as [string, Preset])));

/** The names tokenizer.ggml.pre may take that this runtime knows. */
export const PRE_TOKENIZER_NAMES: readonly string[] = [...BY_NAME.keys()];

/** A compiled pre-tokenizer. */
export interface PreTokenizer {
  regexes: RegExp[];
  /** Defaults the preset implies (llama3: ignore_merges and add BOS). */
  ignoreMerges: boolean;
  addBos?: boolean;
}

/** The preset for a tokenizer.ggml.pre name, or undefined when unknown. */
export function preTokenizerByName(name: string): PreTokenizer | undefined {
  const p = BY_NAME.get(name);
  if (p === undefined) return undefined;
  return { regexes: p.regexes.map(compilePattern), ignoreMerges: p.ignoreMerges ?? false, addBos: p.addBos };
}

/** Compiles a regex source in the Oniguruma / Rust-regex dialect of tokenizer.json into a global JS RegExp. */
export function compilePattern(src: string): RegExp {
  return new RegExp(translatePattern(src), "gu");
}

/** Rewrites \s, \S, (?i:...) and possessive quantifiers into what a JS Unicode regex means the same by. */
export function translatePattern(src: string): string {
  let out = "";
  let inClass = false;
  let ci = 0; // depth inside (?i: ... ) groups; > 0 makes ASCII letters case-insensitive
  const groups: boolean[] = []; // per open group: was it a (?i: group
  let quantified = false; // the previous element was a quantifier, so a "+" now makes it possessive
  for (let i = 0; i < src.length; i++) {
    const c = src[i];
    const wasQuantified = quantified;
    quantified = false;
    if (c === "\\") {
      const n = src[i + 1];
      if (n === "s") out += inClass ? WS : `[${WS}]`;
      else if (n === "S") out += inClass ? "\\S" : `[^${WS}]`;
      else if (n === "p" || n === "P") {
        // Keep \p{...} whole so that its letters are not case-expanded.
        const end = src.indexOf("}", i);
        out += src.slice(i, end + 1);
        i = end;
        continue;
      } else out += c + n;
      i++;
      continue;
    }
    if (inClass) {
      if (c === "]") inClass = false;
      out += c;
      continue;
    }
    if (c === "[") {
      inClass = true;
      out += c;
      continue;
    }
    if (c === "(") {
      if (src.startsWith("(?i:", i)) {
        groups.push(true);
        ci++;
        out += "(?:";
        i += 3;
        continue;
      }
      groups.push(false);
      out += c;
      continue;
    }
    if (c === ")") {
      if (groups.pop()) ci--;
      out += c;
      continue;
    }
    if (c === "+" && wasQuantified) continue; // possessive: JS has none; llama.cpp also falls back to greedy
    if (c === "?" || c === "*" || c === "+" || c === "}") {
      quantified = !(c === "?" && src[i - 1] === "(");
      out += c;
      continue;
    }
    if (ci > 0 && /[a-zA-Z]/.test(c)) {
      out += `[${c.toLowerCase()}${c.toUpperCase()}]`;
      continue;
    }
    out += c;
  }
  return out;
}

/**
 * Splits text by each regex in turn (each applies within the pieces of the previous one). Text between
 * matches is kept as its own piece, as llama.cpp's unicode_regex_split does.
 */
export function preTokenize(text: string, regexes: readonly RegExp[]): string[] {
  let pieces = [text];
  for (const re of regexes) {
    const next: string[] = [];
    for (const s of pieces) splitBy(re, s, next);
    pieces = next;
  }
  return pieces;
}

function splitBy(re: RegExp, s: string, out: string[]): void {
  re.lastIndex = 0;
  let last = 0;
  for (let m = re.exec(s); m !== null; m = re.exec(s)) {
    const len = m[0].length;
    if (len === 0) {
      re.lastIndex = m.index + ((s.codePointAt(m.index) ?? 0) > 0xffff ? 2 : 1);
      continue;
    }
    if (m.index > last) out.push(s.slice(last, m.index));
    out.push(m[0]);
    last = m.index + len;
  }
  if (last < s.length) out.push(s.slice(last));
}
