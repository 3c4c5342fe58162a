// Tier 3: `poot run --json` greedy tokens (64 new) on stories260K.gguf equal llama.cpp's (node-llama-cpp 3.21.1 on
// the CPU, F32 KV cache, flash attention off, BOS prepended), for 10 prompts, on every backend present. The
// reference is computed here by llama.cpp itself (tests/llm/llamacpp-generate.mjs under Node), never stored.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { createHash } from "node:crypto";
import { fileURLToPath } from "node:url";
import { openDevice } from "../devices/index.ts";

const root = fileURLToPath(new URL("../../", import.meta.url));
const model = `${root}models/stories260K/stories260K.gguf`;
const PROMPTS = [
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
const NEW = 64;

const nodeOk = spawnSync("node", ["--version"], { encoding: "utf8" }).status === 0;
const refSkip = !nodeOk
  ? "node is not installed"
  : !existsSync(`${root}node_modules/node-llama-cpp/package.json`)
  ? "node-llama-cpp is not installed (npm ci)"
  : false;

/**
 * llama.cpp's tokens, computed by llama.cpp in this checkout (cached under node_modules/.cache so the Deno and
 * the Bun pass of one CI run compute it once; a fresh clone computes it again).
 */
function llamaCpp(): { prompt_ids: number[]; generated_ids: number[] }[] {
  const script = `${root}tests/llm/llamacpp-generate.mjs`;
  const key = createHash("sha256").update(JSON.stringify([PROMPTS, NEW, statSync(model).size, readFileSync(script, "utf8")])).digest("hex").slice(0, 16);
  const dir = `${root}node_modules/.cache/poot`;
  const cache = `${dir}/llamacpp-${key}.json`;
  if (existsSync(cache)) return JSON.parse(readFileSync(cache, "utf8"));
  const r = spawnSync("node", [script], {
    input: JSON.stringify({ model, prompts: PROMPTS, tokens: NEW, ctx: 256 }),
    encoding: "utf8",
    timeout: 300_000,
    maxBuffer: 1 << 24,
  });
  if (r.status !== 0) throw new Error(`llama.cpp reference failed: ${r.stderr || r.error}`);
  const out = JSON.parse(r.stdout);
  mkdirSync(dir, { recursive: true });
  writeFileSync(cache, r.stdout);
  return out;
}

/** The poot CLI under the runtime running this test. */
function poot(args: string[]): { status: number | null; stdout: string; stderr: string } {
  const D = (globalThis as unknown as { Deno?: { execPath(): string } }).Deno;
  const cmd = D ? D.execPath() : process.execPath;
  const pre = D ? ["run", "-A", "--no-check", `${root}cli/main.ts`] : [`${root}cli/main.ts`];
  const r = spawnSync(cmd, [...pre, ...args], { encoding: "utf8", timeout: 600_000, maxBuffer: 1 << 24 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

const reference = refSkip ? [] : llamaCpp();

for (const backend of ["js", "vulkan", "wgpu"] as const) {
  const dev = await openDevice(backend);
  const skip = refSkip || (typeof dev === "string" ? dev : false);
  if (typeof dev !== "string") await dev.destroy();
  test(`tier 3 on ${backend}: poot run --json equals llama.cpp on ${PROMPTS.length} prompts x ${NEW} tokens`, { skip }, () => {
    const args = ["run", "--json", "--backend", backend, "--model", model, "--max-tokens", String(NEW), "--ctx", "256"];
    for (const p of PROMPTS) args.push("--prompt", p);
    const r = poot(args);
    assert.equal(r.status, 0, r.stderr);
    // JSON lines: one per token, then each prompt's summary (the line with generated_token_ids).
    const lines = r.stdout.trim().split("\n").map((l) => JSON.parse(l)).filter((o) => "generated_token_ids" in o);
    assert.equal(lines.length, PROMPTS.length);
    for (let i = 0; i < PROMPTS.length; i++) {
      assert.equal(lines[i].backend, backend);
      assert.deepEqual(lines[i].prompt_token_ids, reference[i].prompt_ids, `prompt ${JSON.stringify(PROMPTS[i])}: token ids`);
      assert.deepEqual(lines[i].generated_token_ids, reference[i].generated_ids, `prompt ${JSON.stringify(PROMPTS[i])}: generated ids`);
    }
  });
}

test("bad input: one clear error line and a non-zero exit, never a stack trace", () => {
  const cases: [string[], RegExp][] = [
    [["run", "--model", "/nonexistent/model.gguf"], /ModelNotFoundError: .*no such file/],
    [["run", "--model", `${root}README.md`], /ModelFormatError: .*not a GGUF file/],
    [["run", "--prompt", "x ".repeat(40), "--ctx", "16"], /ContextOverflowError/],
    [["run", "--backend", "nope"], /unknown backend/],
    [["run", "--max-tokens", "many"], /not an integer/],
  ];
  for (const [args, want] of cases) {
    const r = poot(args);
    assert.notEqual(r.status, 0, `${args.join(" ")} should fail`);
    const err = r.stderr.trim().split("\n");
    assert.equal(err.length, 1, `one line for ${args.join(" ")}: ${r.stderr}`);
    assert.match(err[0], want);
    assert.doesNotMatch(r.stderr, /^\s+at /m);
  }
});
