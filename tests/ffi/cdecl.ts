// A small reader of preprocessed C headers: function prototypes and typedefs, enough to tell each parameter's
// ABI class (a 64-bit integer/pointer, a 32-bit-or-narrower integer, float, double). Used to check the FFI
// symbol tables against cuda.h, vulkan_core.h and hsa.h without a GPU.

/** W: pointer-sized integer (pointers, 64-bit ints, one-u64 handle structs); N: <= 32-bit integer/enum/bool. */
export type AbiClass = "W" | "N" | "F4" | "F8" | "V" | `?${string}`;
export interface Prototype {
  result: AbiClass;
  params: AbiClass[];
}

function stripAttributes(src: string): string {
  let out = "";
  for (let i = 0; i < src.length;) {
    const m = /^__attribute__\s*\(/.exec(src.slice(i, i + 40)) ?? /^__declspec\s*\(/.exec(src.slice(i, i + 40));
    if (!m) {
      out += src[i++];
      continue;
    }
    i += m[0].length;
    for (let depth = 1; depth > 0 && i < src.length; i++) depth += src[i] === "(" ? 1 : src[i] === ")" ? -1 : 0;
  }
  return out.replace(/\b(__extension__|__restrict|__inline|extern|static|inline)\b/g, " ");
}

function splitTop(s: string, sep: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let cur = "";
  for (const ch of s) {
    if (ch === "(" || ch === "{" || ch === "[") depth++;
    if (ch === ")" || ch === "}" || ch === "]") depth--;
    if (ch === sep && depth === 0) {
      out.push(cur);
      cur = "";
    } else cur += ch;
  }
  if (cur.trim()) out.push(cur);
  return out;
}

const BUILTIN: Record<string, AbiClass> = {
  "void": "V", "char": "N", "signed char": "N", "unsigned char": "N", "short": "N", "short int": "N",
  "unsigned short": "N", "unsigned short int": "N", "int": "N", "signed int": "N", "signed": "N", "unsigned int": "N",
  "unsigned": "N", "long": "W", "long int": "W", "unsigned long": "W", "unsigned long int": "W", "long long": "W",
  "long long int": "W", "unsigned long long": "W", "unsigned long long int": "W", "float": "F4", "double": "F8",
  "_Bool": "N", "bool": "N",
};

const BUILTIN_WORDS = new Set(["unsigned", "signed", "long", "short", "int", "char", "float", "double", "void", "_Bool", "bool"]);

/** Reads prototypes and typedefs out of preprocessed C. */
export class Header {
  readonly protos = new Map<string, { result: string; params: string[] }>();
  readonly typedefs = new Map<string, string>();
  readonly structs = new Map<string, string>(); // tag or typedef name -> body

  constructor(preprocessed: string) {
    const src = stripAttributes(preprocessed.replace(/^#.*$/gm, ""));
    for (const raw of splitTop(src, ";")) {
      const st = raw.replace(/\s+/g, " ").trim();
      if (!st) continue;
      if (st.startsWith("typedef ")) this.#typedef(st.slice(8).trim());
      else {
        // A struct/enum definition without typedef, or a prototype.
        const sd = /^(struct|union|enum) (\w+) ?\{(.*)\}$/.exec(st);
        if (sd) {
          this.structs.set(`${sd[1]} ${sd[2]}`, sd[1] === "enum" ? "enum" : sd[3]);
          continue;
        }
        const m = /^(.*?)\b(\w+) ?\((.*)\)$/.exec(st);
        if (m && !m[1].includes("(")) this.protos.set(m[2], { result: m[1].trim(), params: this.#params(m[3]) });
      }
    }
  }
  #typedef(t: string): void {
    const agg = /^(struct|union|enum) ?(\w+)? ?\{(.*)\} ?(\w+)$/.exec(t);
    if (agg) {
      const body = agg[1] === "enum" ? "enum" : agg[1] === "union" ? "union" : agg[3];
      this.structs.set(agg[4], body);
      if (agg[2]) this.structs.set(`${agg[1]} ${agg[2]}`, body);
      this.typedefs.set(agg[4], `${agg[1]} ${agg[2] ?? agg[4]}`);
      if (!agg[2]) this.structs.set(`${agg[1]} ${agg[4]}`, body);
      return;
    }
    if (/\(\s*\*\s*\w+\s*\)\s*\(/.test(t)) {
      const name = /\(\s*\*\s*(\w+)\s*\)/.exec(t)![1];
      this.typedefs.set(name, "void *");
      return;
    }
    const m = /^(.*?)(\w+)((?: ?\[\w*\])*)$/.exec(t);
    if (m) this.typedefs.set(m[2], m[3] ? `${m[1]} *` : m[1].trim());
  }
  #params(p: string): string[] {
    const list = splitTop(p, ",").map((x) => x.trim());
    if (list.length === 0 || (list.length === 1 && (list[0] === "void" || list[0] === ""))) return [];
    return list.map((x) => {
      if (/\( ?\*/.test(x) || /\[\w*\]$/.test(x)) return "void *"; // function pointer or array parameter
      const m = /^(.*[\s*])(\w+)$/.exec(x);
      // Drop the parameter name unless what is left is only qualifiers.
      if (m && m[1].replace(/\b(const|volatile|struct|union|enum|unsigned|signed)\b/g, "").trim()) return m[1].trim();
      return x;
    });
  }
  /** The ABI class of a C type written as text. */
  classify(type: string, depth = 0): AbiClass {
    if (type.includes("*") || type.includes("[")) return "W";
    const t = type.replace(/\b(const|volatile)\b/g, " ").replace(/\s+/g, " ").trim();
    if (t in BUILTIN) return BUILTIN[t];
    const words = t.split(" ");
    if (words.every((w) => BUILTIN_WORDS.has(w))) {
      if (words.includes("double")) return "F8";
      if (words.includes("float")) return "F4";
      if (words.includes("void")) return "V";
      return words.includes("long") ? "W" : "N"; // LP64: long is 64-bit
    }
    if (t.startsWith("enum ")) return "N";
    if (depth > 20) return `?${t}`;
    if (t.startsWith("struct ") || t.startsWith("union ")) return this.#byValue(t);
    const td = this.typedefs.get(t);
    if (td !== undefined) return this.classify(td, depth + 1);
    return `?${t}`;
  }
  // Handle structs passed by value: one uint64_t is a W; anything else is reported as unknown.
  #byValue(tag: string): AbiClass {
    const body = this.structs.get(tag);
    if (body === "enum") return "N";
    const one = body && /^([\w ]+?) \w+ ?;?$/.exec(body.trim());
    if (one && !one[1].includes(";") && this.classify(one[1]) === "W") return "W";
    return `?${tag}`;
  }
  prototype(name: string): Prototype | undefined {
    const p = this.protos.get(name);
    if (!p) return undefined;
    return { result: this.classify(p.result), params: p.params.map((x) => this.classify(x)) };
  }
}

/** The ABI class of a symbol-table type. */
export function classOf(t: string): AbiClass {
  switch (t) {
    case "void":
      return "V";
    case "f32":
      return "F4";
    case "f64":
      return "F8";
    case "u64":
    case "i64":
    case "usize":
    case "pointer":
    case "buffer":
    case "function":
      return "W";
    default:
      return "N";
  }
}
