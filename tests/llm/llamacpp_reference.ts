// The independent reference of the tier-3 tests: llama.cpp (node-llama-cpp 3.21.1 on the CPU, driven by
// tests/llm/llamacpp-generate.mjs under Node) on stories260K.gguf — greedy tokens for PROMPTS, and its
// log-softmax at several positions of the first LOGPROB_PROMPTS sequences.
//
// Where Node and node-llama-cpp are present the reference is computed by llama.cpp itself, cached under
// node_modules/.cache/poot by a key that hashes the model file's bytes, the helper script and the request. A
// machine without them (the H200 device machine) uses the carried copy CARRIED, written here by
// `deno run -A tests/llm/llamacpp_reference.ts --write`, and only while its key equals the one computed now
// (same model bytes, same script, same request); tier3.test.ts checks the carried copy against llama.cpp
// wherever llama.cpp can run, so it cannot go stale unnoticed.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import process from "node:process";
import { createHash } from "node:crypto";
import { fileURLToPath } from "node:url";

export const root = fileURLToPath(new URL("../../", import.meta.url));
export const MODEL = `${root}models/stories260K/stories260K.gguf`;
export const PROMPTS = [
  "Once upon a time",
  "The cat sat on the",
  "Lily and Tom went to the park",
  "One day, a little bird",
  "Sam had a red ball. He",
  "The sun was hot and",
  "Max wanted to play with his friend",
  'Mom said, "',
  "There was a big dog named",
  "In the garden, the flowers",
];
/** New tokens per prompt. */
export const NEW = 64;
/** Prompts whose sequences also get llama.cpp's log-softmax, and every how many generated tokens. */
export const LOGPROB_PROMPTS = 3;
export const LOGPROB_EVERY = 16;
export const CTX = 256;
export const CARRIED = `${root}tests/llm/llamacpp_stories260K.json`;
const SCRIPT = `${root}tests/llm/llamacpp-generate.mjs`;

export interface RefCase {
  prompt_ids: number[];
  generated_ids: number[];
  /** llama.cpp's log-softmax over the vocabulary at position `pos` of prompt_ids ++ generated_ids. */
  logprobs?: { pos: number; values: number[] }[];
}

export interface Reference {
  key: string;
  /** "llama.cpp" when computed on this machine now (or cached from it), "carried" when read from CARRIED. */
  source: "llama.cpp" | "carried";
  cases: RefCase[];
}

const sha = (b: Uint8Array | string) => createHash("sha256").update(b).digest("hex");

/** What the helper script reads besides the model path. */
export interface LlamaCppRequest {
  prompts: string[];
  tokens: number | number[];
  ctx: number;
  logprob_prompts?: number;
  logprob_every?: number;
  logprob_positions?: number[][];
}

function request(): LlamaCppRequest {
  return { prompts: PROMPTS, tokens: NEW, ctx: CTX, logprob_prompts: LOGPROB_PROMPTS, logprob_every: LOGPROB_EVERY };
}

/** The key of a request for the model file and helper script as they are now. */
export function referenceKey(req: LlamaCppRequest = request()): string {
  return sha(JSON.stringify([sha(readFileSync(MODEL)), sha(readFileSync(SCRIPT, "utf8")), req])).slice(0, 24);
}

/** Why llama.cpp cannot run here, or false. */
export function llamaCppMissing(): string | false {
  // Deno's node:child_process runs a "node" command with Deno itself: ask the child which runtime it is.
  const r = spawnSync("node", ["-e", "process.stdout.write(typeof Deno + ' ' + typeof Bun)"], { encoding: "utf8" });
  if (r.status !== 0 || r.stdout !== "undefined undefined") return "Node is not installed";
  if (!existsSync(`${root}node_modules/node-llama-cpp/package.json`)) return "node-llama-cpp is not installed (npm ci)";
  return false;
}

/** Log-softmax in f64 of one row of logits (how the stored logits meet llama.cpp's log-probabilities). */
export function logSoftmax(z: ArrayLike<number>): Float64Array {
  let m = -Infinity;
  for (let i = 0; i < z.length; i++) m = Math.max(m, z[i]);
  let s = 0;
  for (let i = 0; i < z.length; i++) s += Math.exp(z[i] - m);
  const lse = m + Math.log(s), out = new Float64Array(z.length);
  for (let i = 0; i < z.length; i++) out[i] = z[i] - lse;
  return out;
}

/** llama.cpp's answer to `req` computed on this machine (cached by key). Throws when llama.cpp fails. */
export function computeReference(req: LlamaCppRequest = request()): Reference {
  const key = referenceKey(req);
  const dir = `${root}node_modules/.cache/poot`;
  const cache = `${dir}/llamacpp-${key}.json`;
  if (existsSync(cache)) return { key, source: "llama.cpp", cases: JSON.parse(readFileSync(cache, "utf8")) };
  const r = spawnSync("node", [SCRIPT], {
    input: JSON.stringify({ model: MODEL, ...req }),
    encoding: "utf8",
    timeout: 300_000,
    maxBuffer: 1 << 26,
    cwd: root,
  });
  if (r.status !== 0) throw new Error(`llama.cpp reference failed: ${r.stderr || r.error}`);
  const cases = JSON.parse(r.stdout) as RefCase[];
  mkdirSync(dir, { recursive: true });
  // Written aside and renamed: the Deno and Bun runs of CI run side by side and may both fill the same key.
  const part = `${cache}.${process.pid}.part`;
  writeFileSync(part, r.stdout);
  renameSync(part, cache);
  return { key, source: "llama.cpp", cases };
}

/** The carried copy, when it is present and made for the model and script as they are now. */
export function carriedReference(): Reference | string {
  if (!existsSync(CARRIED)) return `no carried reference ${CARRIED}`;
  const c = JSON.parse(readFileSync(CARRIED, "utf8")) as { key: string; cases: RefCase[] };
  const key = referenceKey();
  if (c.key !== key) return `the carried reference is for key ${c.key}, the model and script now give ${key}: rewrite it where llama.cpp runs`;
  return { key, source: "carried", cases: c.cases };
}

/**
 * llama.cpp computed here when it can run, else the carried copy; a string says why neither is available.
 * `why` of a carried reference says why llama.cpp was not used.
 */
export function reference(): (Reference & { why?: string }) | string {
  let why = llamaCppMissing();
  if (!why) {
    try {
      return computeReference();
    } catch (e) {
      why = (e as Error).message.split("\n")[0];
    }
  }
  const c = carriedReference();
  return typeof c === "string" ? `${why}; ${c}` : { ...c, why };
}

// Log-probabilities are written with 9 significant digits (f32 probabilities carry about 7).
if (import.meta.main && process.argv.includes("--write")) {
  const ref = computeReference();
  const cases = ref.cases.map((c) => ({
    ...c,
    logprobs: c.logprobs?.map((l) => ({ pos: l.pos, values: l.values.map((v) => Number(v.toPrecision(9))) })),
  }));
  writeFileSync(CARRIED, JSON.stringify({ key: ref.key, source: "llama.cpp via node-llama-cpp 3.21.1 (tests/llm/llamacpp-generate.mjs)", cases }) + "\n");
  console.log(`wrote ${CARRIED} (key ${ref.key})`);
}
