// The command line's flags: one table per subcommand (names, short forms, defaults, help text), parsed with
// node:util parseArgs and then validated by a zod schema per subcommand, so every value is checked (empty,
// out of range, wrong kind) before anything is loaded, and every error names the flag. Values that start
// with "-" (`--temperature -1`) are taken as values so that they reach the range check.
import { parseArgs } from "node:util";
import { z } from "zod";
import { DEFAULT_MAX_TOKENS } from "../llm/driver.ts";
import { BACKEND_ORDER } from "../backends/open.ts";
import { TARGETS } from "./render.ts";

/** A bad command line: exit code 2. */
export class UsageError extends Error {
  override name = "UsageError";
}

export interface Flag {
  name: string;
  short?: string;
  /** Boolean flags take no value. */
  bool?: boolean;
  multiple?: boolean;
  /** Placeholder of the value in --help. */
  arg?: string;
  help: string;
}

const BACKENDS = ["auto", ...BACKEND_ORDER] as const;
const backend: Flag = { name: "backend", arg: "NAME", help: `${BACKENDS.join("|")} (default auto: the fastest present)` };
const model: Flag = { name: "model", short: "m", arg: "PATH", help: "GGUF file or Hugging Face folder (default: the stories260K model shipped with poot)" };
const ctxFlag: Flag = { name: "ctx", short: "c", arg: "N", help: "context size in positions (default: the model's, at most 2048)" };
const seedFlag: Flag = { name: "seed", short: "s", arg: "S", help: "sampling seed, 0 to 2^64-1 (default 0)" };
const sampling: Flag[] = [
  { name: "temperature", arg: "T", help: "sampling temperature >= 0 (default 0: greedy)" },
  { name: "top-k", arg: "K", help: "keep the K most likely tokens, 0 to 2^31-1 (default 0: off)" },
  { name: "top-p", arg: "P", help: "nucleus sampling, 0 to 1 (default 1: off)" },
  { name: "min-p", arg: "P", help: "drop tokens below P times the top probability, 0 to 1 (default 0: off)" },
  { name: "logit-bias", arg: "ID=BIAS,...", help: "add BIAS (-100 to 100) to token ID's logit; comma-separated, at most 300 (default none)" },
  { name: "repeat-penalty", arg: "R", help: "repetition penalty over prompt and output tokens, (0, 10] (default 1: off)" },
  { name: "frequency-penalty", arg: "F", help: "subtract F per occurrence of a generated token, -2 to 2 (default 0: off)" },
  { name: "presence-penalty", arg: "P", help: "subtract P from every generated token, -2 to 2 (default 0: off)" },
  { name: "min-tokens", arg: "N", help: "ban end-of-generation until N tokens are generated (default 0)" },
];
const formats: Flag[] = [
  { name: "json-schema", arg: "FILE", help: "constrain the output to a JSON schema (a JSON file; xgrammar) (default none)" },
  { name: "grammar", arg: "FILE", help: "constrain the output to a GBNF/EBNF grammar (root rule `root`) (default none)" },
];
const tpFlag: Flag = { name: "tp", arg: "N", help: "tensor parallelism: split the model over N ranks (ptx: N GPUs; js: a simulated group) (default 1)" };
const quantizedX: Flag = { name: "quantized-x", arg: "on|off", help: "quantized-weight decode matmuls on int8 activations, as llama.cpp's (default on for q8_0/q4_0/q4_k/q5_k/q6_k where the device has a fast int8 dot: ptx, vulkan where the driver says accelerated, wgpu on a GPU; q4_1/q5_0/q5_1 only when on)" };
const xqPrep: Flag = { name: "xq-prep", arg: "on|off", help: "with int8 activations (--quantized-x), quantize x once per matmul group in a kernel of its own instead of in every workgroup (same results; default on for ptx, off elsewhere)" };
const kvType: Flag = { name: "kv-type", arg: "auto|f32|f16", help: "element type of the KV cache: f16 halves its memory and what attention reads; auto (default): f16 for 16-bit or quantized weights (as llama.cpp), f32 for f32 ones" };
const stepsAhead: Flag = { name: "steps-ahead", arg: "N", help: "decode steps kept in flight, each fed its predecessor's token on the device (greedy and plain sampling only); tokens print in runs of up to N; 1: one at a time (default the device's: 8 on wgpu and ptx, 1 elsewhere)" };
const longContext: Flag = { name: "allow-long-context", bool: true, help: "allow --ctx above the context the model was trained for (default off)" };
const help: Flag = { name: "help", short: "h", bool: true, help: "print this help" };

export const COMMANDS = {
  run: {
    summary: "generate text from a prompt (PROMPT, -p, or stdin when piped or given as -)",
    positionals: "[PROMPT...]",
    flags: [
      model,
      { name: "prompt", short: "p", arg: "TEXT", multiple: true, help: "prompt; repeat to run several prompts on one loaded model" },
      { name: "max-tokens", short: "n", arg: "N", help: `tokens to generate at most (default ${DEFAULT_MAX_TOKENS})` },
      { name: "messages", arg: "FILE", help: "an OpenAI-style messages array (JSON), rendered with the model's chat template" },
      { name: "image", arg: "FILE", multiple: true, help: "a PNG or JPEG for a vision-language model, in order of the prompt's <image> placeholders (prepended when it has none); repeatable" },
      ctxFlag,
      longContext,
      kvType,
      stepsAhead,
      seedFlag,
      backend,
      tpFlag,
      quantizedX,
      xqPrep,
      ...sampling,
      { name: "stop", arg: "TEXT", multiple: true, help: "end generation before this text; repeatable (default none)" },
      ...formats,
      { name: "top-logprobs", arg: "N", help: "with --json: each token line carries its logprob and the N most likely tokens, 0 to 20 (default 0)" },
      { name: "json", bool: true, help: "print JSON lines: one per token, then the summary object (default off)" },
      help,
    ],
  },
  chat: {
    summary: "an interactive multi-turn chat with the model's template (/exit ends; Ctrl-C stops a reply)",
    positionals: "",
    flags: [
      model,
      { name: "system", arg: "TEXT", help: "a system message that opens the conversation (default none)" },
      { name: "max-tokens", short: "n", arg: "N", help: `tokens per reply at most (default ${DEFAULT_MAX_TOKENS})` },
      ctxFlag,
      longContext,
      kvType,
      stepsAhead,
      seedFlag,
      backend,
      tpFlag,
      quantizedX,
      xqPrep,
      ...sampling,
      help,
    ],
  },
  info: {
    summary: "describe a model and every backend (present, absent or passed over, and why)",
    positionals: "",
    flags: [
      model,
      backend,
      { name: "dump-kernels", arg: "DIR", help: "write the decode plan's kernels to DIR (needs --target)" },
      { name: "target", arg: "T", help: `${TARGETS.join("|")}: the kernels' target (for the present device of it, else a typical one)` },
      { name: "json", bool: true, help: "print one JSON object (default off)" },
      help,
    ],
  },
  embed: {
    summary: "embed texts with an encoder model (BERT-style); one vector per --text",
    positionals: "",
    flags: [
      { ...model, help: "Hugging Face folder of an encoder model (required)" },
      { name: "text", short: "t", arg: "TEXT", multiple: true, help: "a text to embed; repeat for several (batched)" },
      { name: "pooling", arg: "P", help: "mean|cls|last (default: the model's sentence-transformers config, else mean)" },
      { name: "no-normalize", bool: true, help: "skip the L2 normalization (default: the model's config, else normalize)" },
      { name: "normalize", bool: true, help: "L2-normalize even when the model's config does not" },
      { name: "truncate", bool: true, help: "cut texts longer than the model's positions (default: refuse them)" },
      backend,
      { name: "json", bool: true, help: "print {\"embeddings\": [[...], ...]} (default: one line per text)" },
      help,
    ],
  },
  rerank: {
    summary: "score documents against a query with a cross-encoder reranker (raw logits, document order)",
    positionals: "",
    flags: [
      { ...model, help: "Hugging Face folder of a reranker (BertForSequenceClassification or XLMRobertaForSequenceClassification, one label) (required)" },
      { name: "query", short: "q", arg: "TEXT", help: "the query (required)" },
      { name: "document", short: "d", arg: "TEXT", multiple: true, help: "a document; repeat for several" },
      backend,
      { name: "json", bool: true, help: "print {\"scores\": [...]} (default: one line per document)" },
      help,
    ],
  },
} satisfies Record<string, { summary: string; positionals: string; flags: Flag[] }>;

export type CommandName = keyof typeof COMMANDS;

/** The help text of one subcommand, every default stated. */
export function commandHelp(cmd: CommandName): string {
  const c = COMMANDS[cmd];
  const lines = c.flags.map((f) => {
    const left = `${f.short ? `-${f.short}, ` : "    "}--${f.name}${f.arg ? ` ${f.arg}` : ""}`;
    return `  ${left.padEnd(24)} ${f.help}`;
  });
  return `usage: poot ${cmd} [flags] ${c.positionals}\n${c.summary}\n\n${lines.join("\n")}`;
}

/** Splits `args` into flag values and positionals by the subcommand's table (unknown flags: UsageError). */
export function splitArgs(cmd: CommandName, args: string[]): { values: Record<string, string | string[] | boolean | undefined>; positionals: string[] } {
  const flags: readonly Flag[] = COMMANDS[cmd].flags;
  const options: Record<string, { type: "string" | "boolean"; short?: string; multiple?: boolean }> = {};
  for (const f of flags) {
    options[f.name] = { type: f.bool ? "boolean" : "string", ...(f.short ? { short: f.short } : {}), ...(f.multiple ? { multiple: true } : {}) };
  }
  // parseArgs refuses a value that starts with "-"; join such a value to its flag so the range check sees it.
  const joined: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    const f = a.startsWith("--") ? flags.find((x) => `--${x.name}` === a) : flags.find((x) => x.short && `-${x.short}` === a);
    if (f && !f.bool && i + 1 < args.length && args[i + 1].startsWith("-") && args[i + 1] !== "-") {
      joined.push(`--${f.name}=${args[++i]}`);
    } else joined.push(a);
  }
  try {
    const r = parseArgs({ args: joined, options, allowPositionals: true, strict: true });
    return { values: r.values as Record<string, string | string[] | boolean | undefined>, positionals: r.positionals };
  } catch (e) {
    // "Unknown option '--dump-kernels'. To specify a positional argument starting with a '-', ..." -> first sentence.
    const msg = (e as Error).message.split("\n")[0].replace(/\. To specify .*$/, "");
    throw new UsageError(`${cmd}: ${msg} (poot ${cmd} --help lists its flags)`);
  }
}

// --- value schemas: each takes the flag's raw string and names the flag in its message -------------------------

function intIn(min: number, max: number, what = `an integer from ${min} to ${max}`) {
  return z.string().transform((s, ctx) => {
    const t = s.trim();
    const n = /^[+-]?\d+$/.test(t) ? Number(t) : NaN;
    if (!(Number.isSafeInteger(n) && n >= min && n <= max)) {
      ctx.addIssue({ code: "custom", message: `${JSON.stringify(s)} is not ${what}` });
      return z.NEVER;
    }
    return n;
  });
}

function numIn(min: number, max: number, what: string) {
  return z.string().transform((s, ctx) => {
    const t = s.trim();
    const n = t === "" ? NaN : Number(t);
    if (!(Number.isFinite(n) && n >= min && n <= max)) {
      ctx.addIssue({ code: "custom", message: `${JSON.stringify(s)} is not ${what}` });
      return z.NEVER;
    }
    return n;
  });
}

const U64_MAX = 2n ** 64n - 1n;
/** A seed from 0 to 2^64-1, as llama.cpp takes it; the sampler uses it mod 2^32. */
const seed = z.string().transform((s, ctx) => {
  const t = s.trim();
  if (!/^\d+$/.test(t) || BigInt(t) > U64_MAX) {
    ctx.addIssue({ code: "custom", message: `${JSON.stringify(s)} is not an integer from 0 to 2^64-1` });
    return z.NEVER;
  }
  return Number(BigInt.asUintN(32, BigInt(t)));
});

function oneOf<const T extends readonly string[]>(names: T, what: string) {
  return z.string().transform((s, ctx) => {
    if (!(names as readonly string[]).includes(s)) {
      ctx.addIssue({ code: "custom", message: `unknown ${what} ${JSON.stringify(s)} (expected ${names.join(", ")})` });
      return z.NEVER;
    }
    return s as T[number];
  });
}

const path = z.string().refine((s) => s.trim() !== "", { message: "is empty: give a path" });

/** `ID=BIAS,...`: token ids with a bias each, as llama.cpp's --logit-bias takes them (comma-separated here). */
const logitBias = z.string().transform((s, ctx) => {
  const out: Record<number, number> = {};
  const parts = s.split(",").map((p) => p.trim()).filter((p) => p !== "");
  const bad = (m: string) => (ctx.addIssue({ code: "custom", message: m }), z.NEVER);
  if (parts.length === 0) return bad(`${JSON.stringify(s)} has no ID=BIAS pair`);
  if (parts.length > 300) return bad(`${parts.length} pairs: at most 300`);
  for (const p of parts) {
    const m = /^(\d+)\s*=\s*([+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)$/.exec(p);
    if (!m) return bad(`${JSON.stringify(p)} is not ID=BIAS (a token id and a number)`);
    const id = Number(m[1]), b = Number(m[2]);
    if (!Number.isSafeInteger(id)) return bad(`token id ${m[1]} is too large`);
    if (!(b >= -100 && b <= 100)) return bad(`bias ${m[2]} of token ${id} is not in [-100, 100]`);
    out[id] = b;
  }
  return out;
});

export const RunFlags = z.object({
  model: path.optional(),
  prompt: z.array(z.string()).optional(),
  messages: path.optional(),
  "allow-long-context": z.boolean().optional(),
  "max-tokens": intIn(0, 2 ** 31 - 1, "an integer from 0 to 2^31-1").optional(),
  ctx: intIn(2, 2 ** 31 - 1, "an integer >= 2").optional(),
  seed: seed.optional(),
  backend: oneOf(BACKENDS, "backend").optional(),
  tp: intIn(1, 64, "an integer from 1 to 64").optional(),
  "quantized-x": oneOf(["on", "off"] as const, "quantized-x").optional(),
  "xq-prep": oneOf(["on", "off"] as const, "xq-prep").optional(),
  "kv-type": oneOf(["auto", "f32", "f16"] as const, "kv-type").optional(),
  "steps-ahead": intIn(1, 64, "an integer from 1 to 64").optional(),
  temperature: numIn(0, Number.MAX_VALUE, "a number >= 0").optional(),
  "top-k": intIn(0, 0x7fffffff, "an integer from 0 to 2^31-1 (0 = off)").optional(),
  "top-p": numIn(0, 1, "a number from 0 to 1").optional(),
  "min-p": numIn(0, 1, "a number from 0 to 1").optional(),
  "logit-bias": logitBias.optional(),
  "repeat-penalty": numIn(Number.MIN_VALUE, 10, "a number in (0, 10]").optional(),
  "frequency-penalty": numIn(-2, 2, "a number from -2 to 2").optional(),
  "presence-penalty": numIn(-2, 2, "a number from -2 to 2").optional(),
  "min-tokens": intIn(0, 2 ** 31 - 1, "an integer >= 0").optional(),
  "json-schema": path.optional(),
  grammar: path.optional(),
  "top-logprobs": intIn(0, 20, "an integer from 0 to 20").optional(),
  stop: z.array(z.string().refine((s) => s !== "", { message: "is empty" })).optional(),
  image: z.array(path).optional(),
  json: z.boolean().optional(),
  help: z.boolean().optional(),
}).strict();

export const ChatFlags = RunFlags.omit({ prompt: true, messages: true, stop: true, image: true, json: true, "top-logprobs": true, "json-schema": true, grammar: true }).extend({
  system: z.string().optional(),
}).strict();

export const InfoFlags = z.object({
  model: path.optional(),
  backend: oneOf(BACKENDS, "backend").optional(),
  "dump-kernels": path.optional(),
  target: oneOf(TARGETS, "target").optional(),
  json: z.boolean().optional(),
  help: z.boolean().optional(),
}).strict();

/** Validates split flag values with a schema; the first problem is a UsageError naming the flag. */
export const EmbedFlags = z.object({
  model: path,
  text: z.array(z.string()).min(1, { message: "give at least one --text" }),
  pooling: oneOf(["mean", "cls", "last"] as const, "pooling").optional(),
  "no-normalize": z.boolean().optional(),
  normalize: z.boolean().optional(),
  truncate: z.boolean().optional(),
  backend: oneOf(BACKENDS, "backend").optional(),
  json: z.boolean().optional(),
  help: z.boolean().optional(),
}).strict();

export const RerankFlags = z.object({
  model: path,
  query: z.string().refine((s) => s !== "", { message: "is empty: give the query" }),
  document: z.array(z.string()).min(1, { message: "give at least one --document" }),
  backend: oneOf(BACKENDS, "backend").optional(),
  json: z.boolean().optional(),
  help: z.boolean().optional(),
}).strict();

export function checkFlags<S extends z.ZodType>(schema: S, values: Record<string, unknown>): z.output<S> {
  const r = schema.safeParse(values);
  if (r.success) return r.data;
  const issue = r.error.issues[0];
  const flag = issue.path.length ? `--${String(issue.path[0])}` : "flags";
  throw new UsageError(`${flag}: ${issue.message}`);
}
