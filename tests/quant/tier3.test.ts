// Tier 3 for quantized files: stories260K quantized by `poot quantize` to each file type (q8_0, q4_0, q4_k_m,
// q5_k_m, q6_k: with stories' 64- and 172-wide rows the K-quant mixes fall back to q5_0/q5_1/q8_0/f16 as
// llama.cpp's do) generates the same greedy tokens in `poot run` (js, vulkan, wgpu) as llama.cpp (node-llama-cpp
// on the CPU) reading the same file, apart from near ties (each run sends one file through the CLI, the rest
// generate in this process the way the CLI does: viaCli says why). llama.cpp's answers are stored in
// llamacpp_tier3.json under a key of the quantized file's bytes (tests/llm/llamacpp_store.ts): while `poot
// quantize` writes the same bytes they are read, otherwise llama.cpp runs here live.
//
// Margin rule: llama.cpp's CPU backend does not compute the float dot product: it quantizes the activations to
// q8_0 (q8_K for K-quants) before a quantized dot, and to f16 before an f16 one, so its logits carry errors
// of order 2^-8 relative per block, far beyond poot's tier-2 bound. A sequence may therefore part from
// llama.cpp's only at a step where llama.cpp's top-two logit gap is below MARGIN and poot picked llama.cpp's
// second choice; the tokens after that point are not compared (the two continue from different contexts).
//
// The exact check: the same quantized file dequantized to f32 by the oracle (bit-exact with ggml's
// dequantize_row_*, tests/quant/ggml.test.ts) runs in llama.cpp as plain f32 math; poot on the quantized file
// must give exactly its tokens (no margin rule), as the f32 tier-3 test does.
import { test } from "node:test";
import assert from "node:assert/strict";
import process from "node:process";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { openDevice, slowDevice } from "../devices/index.ts";
import { sharingKernels } from "../devices/kernel_cache.ts";
import { compileGraph, Driver, Engine, loadModel } from "../../engine.ts";
import type { Device } from "../../backends/device.ts";
import { JsDevice } from "../../backends/js/device.ts";
import { QUANT_FTYPES } from "../../llm/formats/quantize.ts";
import { dequantizedCopy } from "./dequantized.ts";
import { type Job, jobKey, openStore, resolve, staleNote } from "../llm/llamacpp_store.ts";
import { scratchDir } from "../scratch.ts";

const root = fileURLToPath(new URL("../../", import.meta.url));
const model = `${root}models/stories260K/stories260K.gguf`;
const PROMPTS = ["Once upon a time", "The cat sat on the", "Lily and Tom went to the park", 'Mom said, "'];
const NEW = 48;
/** Largest top-two logit gap (nats) at which poot may pick llama.cpp's second choice. */
const MARGIN = 0.1;
type Ref = { prompt_ids: number[]; generated_ids: number[]; margins: number[]; seconds: number[] };

const nodeOk = spawnSync("node", ["--version"], { encoding: "utf8" }).status === 0;
const refSkip = !nodeOk ? "node is not installed"
  : !existsSync(`${root}node_modules/node-llama-cpp/package.json`) ? "node-llama-cpp is not installed (npm ci)" : false;

function poot(args: string[]): { status: number | null; stdout: string; stderr: string } {
  const D = (globalThis as unknown as { Deno?: { execPath(): string } }).Deno;
  const cmd = D ? D.execPath() : process.execPath;
  const pre = D ? ["run", "-A", "--no-check", `${root}cli/main.ts`] : [`${root}cli/main.ts`];
  const r = spawnSync(cmd, [...pre, ...args], { encoding: "utf8", timeout: 600_000, maxBuffer: 1 << 24 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

const dir = scratchDir("poot-quant-t3-");

/** llama.cpp's answers for the files `poot quantize` writes (tests/llm/llamacpp_store.ts: used while the key matches). */
const store = openStore(`${root}tests/quant/llamacpp_tier3.json`);
const MARGINS = `${root}tests/quant/llamacpp-margins.mjs`, GENERATE = `${root}tests/llm/llamacpp-generate.mjs`;
type Exact = { prompt_ids: number[]; generated_ids: number[] };

/** One run of a llama.cpp helper script under Node (its JSON answer), or an assertion naming the file. */
function llamaCpp<R>(script: string, input: unknown, what: string): R {
  const r = spawnSync("node", [script], { input: JSON.stringify(input), encoding: "utf8", timeout: 300_000, maxBuffer: 1 << 24 });
  assert.equal(r.status, 0, `llama.cpp failed on ${what}: ${r.stderr}`);
  return JSON.parse(r.stdout) as R;
}

const files = new Map<string, string>();
const reference = new Map<string, Ref[]>();
const exact = new Map<string, Exact[]>();
for (const ft of QUANT_FTYPES) {
  test(`poot quantize stories260K --type ${ft} writes a file llama.cpp loads`, { skip: refSkip, timeout: 300_000 }, () => {
    const out = join(dir, `stories260K-${ft}.gguf`);
    const q = poot(["quantize", model, out, "--type", ft, "--quiet"]);
    assert.equal(q.status, 0, q.stderr);
    assert.match(q.stdout, new RegExp(`as ${ft}: \\d+ of 48 tensors converted`));
    files.set(ft, out);
    const req = { prompts: PROMPTS, tokens: NEW, ctx: 256 };
    const m: Job<Ref[]> = { name: ft, key: jobKey(MARGINS, [out], req) };
    resolve(store, [m], () => [llamaCpp(MARGINS, { model: out, ...req }, `the ${ft} file`)]);
    const ref = m.out!;
    assert.equal(ref.length, PROMPTS.length);
    for (const x of ref) assert.ok(x.generated_ids.length > 8, `llama.cpp generated only ${x.generated_ids.length} tokens`);
    reference.set(ft, ref);
    const f32 = join(dir, `stories260K-${ft}-dequantized.gguf`);
    dequantizedCopy(out, f32);
    const e: Job<Exact[]> = { name: `${ft}-dequantized`, key: jobKey(GENERATE, [f32], req) };
    resolve(store, [e], () => [llamaCpp(GENERATE, { model: f32, ...req }, `the dequantized ${ft} file`)]);
    exact.set(ft, e.out!);
    const note = ft === QUANT_FTYPES.at(-1) && staleNote(store, "tests/quant/tier3.test.ts");
    if (note) console.log(note);
  });
}

// Quantized x (int8 activations for the block-weight decode matmuls, graph/ops/qdot.ts; the default for
// q8_0/q4_0/q4_k/q5_k/q6_k on ptx and on vulkan/wgpu GPUs with a fast int8 dot; lavapipe runs it with the native OpSDot /
// dot4I8Packed); here --quantized-x on also puts these files' q4_0, q5_0 and q5_1 gemvs on it; real K-quant blocks
// and q4_1: tests/quant/xq_tokens.test.ts:
// poot no longer computes the f32 dot of the dequantized weights, so the exact check does not apply; the margin
// rule against llama.cpp (which quantizes its activations too, more coarsely) does. With --xq-prep on, x is
// quantized once per gemv by a kernel of its own (kernels/lib/xq_prep.ts; bit-identical gemvs, through the CLI).
const RUNS: { backend: "js" | "vulkan" | "wgpu" | "ptx"; xq?: "on"; prep?: true }[] = [
  { backend: "js" }, { backend: "vulkan" }, { backend: "wgpu" }, { backend: "js", xq: "on" }, { backend: "vulkan", xq: "on" },
  { backend: "wgpu", xq: "on" }, { backend: "ptx", xq: "on" },
  { backend: "js", xq: "on", prep: true }, { backend: "vulkan", xq: "on", prep: true }, { backend: "ptx", xq: "on", prep: true },
];
/**
 * Which file of run `i` goes through `poot run` as a child process: each run sends one file through the command
 * line (its --backend and --quantized-x flags, its JSON lines), a different one each run in turn, so that every
 * file and every run meets the CLI. The run's other files generate in this process with what that command does
 * (cli/main.ts run: compileGraph with the flag's quantizedX, Driver.open at the same ctx, greedy sampling, the
 * prompt tokenized by the driver) on one device per backend, sharing compiled kernels: a child pays Deno's start,
 * the module load and every kernel's compile again (35 children cost ~110 CPU-s of CI's budget), and the
 * tokens, which are what this test checks, do not depend on the process.
 */
const viaCli = (i: number) => QUANT_FTYPES[i % QUANT_FTYPES.length];
type Line = { prompt_token_ids: number[]; generated_token_ids: number[] };

/** `poot run` on one file, the prompts' result lines; or why it failed. */
function cliLines(backend: string, file: string, xq: "on" | "off", prep: boolean): Line[] | string {
  const args = ["run", "--json", "--backend", backend, "--model", file, "--max-tokens", String(NEW), "--ctx", "256", "--quantized-x", xq, "--xq-prep", prep ? "on" : "off", "--kv-type", "f32"];
  for (const p of PROMPTS) args.push("--prompt", p);
  const r = poot(args);
  if (r.status !== 0) return `poot run failed: ${r.stderr.trim()}`;
  return r.stdout.trim().split("\n").map((l) => JSON.parse(l)).filter((o) => Array.isArray(o.generated_token_ids));
}

/** What `poot run` does with the same flags, in this process on `dev`. */
async function inProcessLines(dev: Device, file: string, xq: "on" | "off", prep: boolean): Promise<Line[]> {
  const model = loadModel(file);
  const engine = new Engine(dev, { compile: sharingKernels((g, t) => compileGraph(g, t, { quantizedX: xq === "on", xqPrep: prep })), ownsDevice: false });
  try {
    const driver = await Driver.open(model, engine, { ctx: 256, kvDtype: "f32" }); // as --kv-type f32 above
    const lines: Line[] = [];
    for (const p of PROMPTS) {
      const r = await driver.generate(driver.tokenize(p), { maxTokens: NEW, sampler: { temperature: 0 } });
      lines.push({ prompt_token_ids: r.promptIds, generated_token_ids: r.generatedIds });
    }
    return lines;
  } finally {
    model.close();
    await engine.unload();
  }
}

const opened: (Device | string)[] = [];
for (const [run, { backend, xq, prep }] of RUNS.entries()) {
  // js: the device the CLI opens (no debug bounds checks, which the children never had and which make V8's compile
  // of every kernel slower); a GPU backend: the test registry's shared device.
  const dev = backend === "js" ? new JsDevice() : await openDevice(backend);
  opened.push(dev);
  // On a software fallback adapter (Deno WebGPU without Vulkan) this case runs for minutes: skipped there, said.
  const skip = refSkip || (typeof dev === "string" ? dev : slowDevice(dev));
  if (skip && typeof dev !== "string") await dev.destroy();
  const what = xq ? `${backend} with quantized x${prep ? " prepared once per gemv" : ""}` : backend;
  test(`tier 3 quantized on ${what}: poot run equals llama.cpp for ${QUANT_FTYPES.join(", ")} (${viaCli(run)} through the CLI)`, { skip, timeout: 600_000 }, async () => {
    const bad: string[] = [], flips: string[] = [];
    try {
      for (const ft of QUANT_FTYPES) {
        const ref = reference.get(ft), file = files.get(ft);
        if (!ref || !file) {
          bad.push(`${ft}: no quantized file / reference (see the quantize test)`);
          continue;
        }
        const lines = ft === viaCli(run) ? cliLines(backend, file, xq ?? "off", !!prep) : await inProcessLines(dev as Device, file, xq ?? "off", !!prep);
        if (typeof lines === "string") {
          bad.push(`${ft}: ${lines}`);
          continue;
        }
        PROMPTS.forEach((p, i) => {
          const got = lines[i]?.generated_token_ids, want = ref[i].generated_ids;
          if (!got) return bad.push(`${ft} ${JSON.stringify(p)}: no result line`);
          assert.deepEqual(lines[i].prompt_token_ids, ref[i].prompt_ids);
          const ex = exact.get(ft)?.[i].generated_ids;
          if (!xq && (!ex || ex.join() !== got.join())) bad.push(`${ft} ${JSON.stringify(p)}: differs from llama.cpp on the f32 dequantization: poot ${got.join(",")} llama.cpp ${ex?.join(",")}`);
          const at = want.findIndex((t, k) => got[k] !== t);
          if (at < 0) {
            if (got.length !== want.length) bad.push(`${ft} ${JSON.stringify(p)}: poot made ${got.length} tokens, llama.cpp ${want.length}`);
            return;
          }
          const m = ref[i].margins[at];
          if (!(m < MARGIN) || got[at] !== ref[i].seconds[at]) {
            bad.push(`${ft} ${JSON.stringify(p)}: token ${at}: poot ${got[at]}, llama.cpp ${want[at]} (its second ${ref[i].seconds[at]}, gap ${m.toFixed(4)})`);
          } else flips.push(`${ft} ${what} ${JSON.stringify(p)} @${at} gap ${m.toFixed(4)}`);
        });
      }
    } finally {
      // the device is the backend's shared one: closed after the last run that uses it
      if (!opened.slice(run + 1).includes(dev)) await (dev as Device).destroy();
    }
    assert.deepEqual(bad, []);
    if (flips.length) console.log(`near-tie flips within the margin rule: ${flips.join("; ")}`);
  });
}
