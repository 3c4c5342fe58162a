// poot command line: run | info | bench | serve. Bad input ends with one clear error line and exit code 1
// (2 for a bad command line), never a stack trace.
import { parseArgs } from "node:util";
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { tmpdir } from "node:os";
import { fileURLToPath } from "node:url";
import {
  type BackendChoice, compileGraph, Driver, Engine, loadModel, openBackend, type SamplerParams, VERSION,
} from "../mod.ts";
import { renderKernel, TARGETS, type RenderTarget } from "./render.ts";

// Mesa's Vulkan/WebGPU probe complains on stderr without a runtime dir; give it a private one.
const env = (globalThis as { process?: { env: Record<string, string | undefined> } }).process?.env;
if (env && !env.XDG_RUNTIME_DIR) {
  const dir = join(tmpdir(), `poot-xdg-${(globalThis as { process?: { getuid?(): number } }).process?.getuid?.() ?? 0}`);
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    env.XDG_RUNTIME_DIR = dir;
  } catch { /* leave it unset */ }
}

const argv = (globalThis as { Deno?: { args: string[] } }).Deno?.args ??
  (globalThis as { process?: { argv: string[] } }).process?.argv.slice(2) ?? [];

const USAGE = `poot ${VERSION}
usage:
  poot run   [--model FILE] [--prompt TEXT]... [--max-tokens N] [--backend auto|ptx|rocm|vulkan|wgpu|js]
             [--temperature T] [--top-k K] [--top-p P] [--min-p P] [--seed S] [--ctx N] [--json]
  poot info  [--model FILE] [--backend ...] [--dump-kernels DIR --target ptx|spirv|wgsl|js]
  poot bench [--shape llama-3.2-1b|qwen2.5-0.5b|llama-3-8b|stories260K] [--backend ...] [--tokens N]
  poot serve [--model FILE] [--host 127.0.0.1] [--port 8080] [--backend ...] [--slots N] [--ctx N]
             [--kv-memory F] [--chunk N] [--api-key K] [--drain S]   (poot serve --help)
--model defaults to the stories260K model shipped with poot.`;

class UsageError extends Error {}

function defaultModel(): string {
  const embedded = (globalThis as { POOT_DEFAULT_MODEL?: string }).POOT_DEFAULT_MODEL; // dist/poot carries its own
  if (embedded) return embedded;
  return join(dirname(fileURLToPath(import.meta.url)), "..", "models", "stories260K", "stories260K.gguf");
}

function num(v: string | undefined, name: string, int = false): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isFinite(n) || (int && !Number.isInteger(n))) throw new UsageError(`--${name}: "${v}" is not ${int ? "an integer" : "a number"}`);
  return n;
}

const OPTIONS = {
  model: { type: "string" },
  prompt: { type: "string", multiple: true },
  "max-tokens": { type: "string" },
  backend: { type: "string" },
  temperature: { type: "string" },
  "top-k": { type: "string" },
  "top-p": { type: "string" },
  "min-p": { type: "string" },
  seed: { type: "string" },
  ctx: { type: "string" },
  json: { type: "boolean" },
  "dump-kernels": { type: "string" },
  target: { type: "string" },
  shape: { type: "string" },
  tokens: { type: "string" },
  help: { type: "boolean", short: "h" },
} as const;

async function main(): Promise<number> {
  const [cmd = "run", ...rest] = argv;
  if (cmd === "--help" || cmd === "-h" || cmd === "help") {
    console.log(USAGE);
    return 0;
  }
  if (cmd === "serve") return await (await import("./serve.ts")).main(rest, defaultModel());
  let values: Record<string, string | string[] | boolean | undefined>;
  try {
    values = parseArgs({ args: rest, options: OPTIONS, allowPositionals: false, strict: true }).values;
  } catch (e) {
    throw new UsageError((e as Error).message.split("\n")[0]);
  }
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  const backend = (values.backend as string | undefined ?? "auto") as BackendChoice;
  if (!["auto", "ptx", "rocm", "vulkan", "wgpu", "js"].includes(backend)) throw new UsageError(`--backend: unknown backend "${backend}"`);
  switch (cmd) {
    case "run":
      return await run(values, backend);
    case "info":
      return await info(values, backend);
    case "bench": {
      const mod = await import("../bench/decode.ts").catch(() => undefined) as
        | { main?: (args: string[]) => Promise<number> }
        | undefined;
      if (!mod?.main) throw new UsageError("bench: the benchmark is not available in this build");
      return await mod.main(rest);
    }
    default:
      throw new UsageError(`unknown command "${cmd}" (poot --help lists them)`);
  }
}

async function run(v: Record<string, string | string[] | boolean | undefined>, backend: BackendChoice): Promise<number> {
  const model = loadModel((v.model as string | undefined) ?? defaultModel());
  const sampler: SamplerParams = {
    temperature: num(v.temperature as string, "temperature") ?? 0,
    topK: num(v["top-k"] as string, "top-k", true),
    topP: num(v["top-p"] as string, "top-p"),
    minP: num(v["min-p"] as string, "min-p"),
    seed: num(v.seed as string, "seed", true),
  };
  const maxTokens = num(v["max-tokens"] as string, "max-tokens", true) ?? 128;
  const ctx = num(v.ctx as string, "ctx", true);
  const device = await openBackend(backend);
  const engine = new Engine(device, { compile: compileGraph });
  try {
    const t0 = performance.now();
    const driver = await Driver.open(model, engine, { ctx });
    const loadMs = performance.now() - t0;
    // Several --prompt flags run one after another on the same loaded model (one JSON line each).
    const prompts = (v.prompt as string[] | undefined) ?? [""];
    const json = v.json === true;
    const enc = new TextEncoder();
    const write = (s: string) => writeStdout(enc.encode(s));
    for (const prompt of prompts) {
      const stream = driver.stream(prompt, { maxTokens, sampler });
      if (!json) write(prompt);
      let r = await stream.next();
      while (!r.done) {
        if (!json) write(r.value.text);
        r = await stream.next();
      }
      const res = r.value;
      const stats = engine.stats();
      if (json) {
        console.log(JSON.stringify({
          backend: device.target.backend,
          device: device.target.device,
          prompt_token_ids: res.promptIds,
          generated_token_ids: res.generatedIds,
          text: res.text,
          finish_reason: res.finish,
          timings: {
            load_ms: round(loadMs), prompt_ms: round(res.timings.promptMs), generate_ms: round(res.timings.generateMs),
            prompt_tokens: res.timings.promptTokens, generated_tokens: res.timings.generatedTokens,
            tokens_per_second: round(res.timings.tokensPerSecond), host_us_per_step: round(stats.hostMicrosPerStep),
          },
        }));
      } else {
        write("\n");
        console.error(`[${device.target.backend} on ${device.target.device}: ${res.timings.generatedTokens} tokens, ` +
          `${res.timings.tokensPerSecond.toFixed(1)} tok/s, prompt ${res.timings.promptTokens} tokens in ${res.timings.promptMs.toFixed(1)} ms, ` +
          `finish: ${res.finish}]`);
      }
    }
  } finally {
    await engine.unload();
  }
  return 0;
}

async function info(v: Record<string, string | string[] | boolean | undefined>, backend: BackendChoice): Promise<number> {
  const model = loadModel((v.model as string | undefined) ?? defaultModel());
  const dir = v["dump-kernels"] as string | undefined;
  const target = (v.target as string | undefined) as RenderTarget | undefined;
  if (dir && !target) throw new UsageError(`--dump-kernels needs --target ${TARGETS.join("|")}`);
  if (target && !TARGETS.includes(target)) throw new UsageError(`--target: unknown target "${target}" (${TARGETS.join(", ")})`);
  const c = model.config;
  console.log(`model ${model.path}`);
  console.log(`  ${model.name ?? "(unnamed)"}: ${model.arch}, dim ${c.dim}, ${c.layers} layers, ${c.heads} heads / ${c.kvHeads} kv, ` +
    `ffn ${c.hidden}, vocab ${c.vocab}, context ${model.contextLength ?? "?"}, rope ${c.ropeStyle} theta ${c.ropeTheta}`);
  const device = await openBackend(dir ? "js" : backend).catch((e) => e as Error);
  if (device instanceof Error) console.log(`backend ${backend}: ${device.message}`);
  else {
    const t = device.target;
    console.log(`backend ${t.backend}: ${t.device} (subgroups ${t.caps.subgroups ? t.caps.subgroupSize : "no"}, f16 ${t.caps.f16}, ` +
      `memory ${(t.memory.totalBytes / 2 ** 30).toFixed(1)} GiB)`);
  }
  if (dir && target && !(device instanceof Error)) {
    // The kernels of the decode plan, rendered for `target` with that target's usual capabilities.
    const { decodeProgram } = await import("./render.ts");
    const program = decodeProgram(model, target);
    mkdirSync(dir, { recursive: true });
    const seen = new Set<string>();
    let n = 0;
    for (const s of program.steps) {
      if (s.k !== "kernel" || seen.has(s.kernel.name)) continue;
      seen.add(s.kernel.name);
      const r = renderKernel(s.kernel, target);
      writeFileSync(join(dir, `${String(n++).padStart(3, "0")}_${s.kernel.name}.${r.ext}`), r.data);
    }
    console.log(`wrote ${n} kernels of the decode plan to ${dir} (${target})`);
    await device.destroy();
  } else if (!(device instanceof Error)) await device.destroy();
  return 0;
}

function round(x: number): number {
  return Math.round(x * 100) / 100;
}

function writeStdout(b: Uint8Array): void {
  const D = (globalThis as { Deno?: { stdout: { writeSync(b: Uint8Array): number } } }).Deno;
  if (D) {
    let off = 0;
    while (off < b.length) off += D.stdout.writeSync(b.subarray(off));
  } else (globalThis as unknown as { process: { stdout: { write(b: Uint8Array): void } } }).process.stdout.write(b);
}

function exit(code: number): never {
  const g = globalThis as { Deno?: { exit(c: number): never }; process?: { exit(c: number): never } };
  if (g.Deno) g.Deno.exit(code);
  return g.process!.exit(code);
}

try {
  exit(await main());
} catch (e) {
  const err = e as Error;
  console.error(`poot: ${err instanceof UsageError ? "" : `${err.name}: `}${err.message}`);
  exit(err instanceof UsageError ? 2 : 1);
}
