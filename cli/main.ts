// poot command line: run | chat | info | embed | rerank | bench | quantize | serve. `main(args)` returns the exit code: 0, 1 for bad input (a
// model, a device), 2 for a bad command line. Every flag is checked before anything is loaded; an error is
// one line on stderr (`poot: ...`, control characters escaped) and nothing on stdout before it; a reader
// that closes stdout ends the command quietly with 0. Importing this module runs nothing (JSR `./cli`);
// run as the entry point (deno run, bun, the compiled dist/poot) it runs main() and exits.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { tmpdir } from "node:os";
import { fileURLToPath } from "node:url";
import { BACKEND_ORDER, type BackendChoice, chooseBackend, passOverReason, probeBackend } from "../backends/open.ts";
import { Engine, type Executor, type ProgramCompiler } from "../backends/executor.ts";
import { openRankGroup } from "../backends/group.ts";
import { tpPlan } from "../llm/tp.ts";
import { compileGraph } from "../kernels/lower.ts";
import { Driver, type GenerateResult, type LoadProgress, type ResponseFormat, type TokenEvent } from "../llm/driver.ts";
import { loadModel, type ModelHandle } from "../llm/model.ts";
import { AbortError, ContextOverflowError, ImageError, ModelKindError } from "../llm/errors.ts";
import { chatImages } from "../llm/chat.ts";
import { tokenizeAround } from "../llm/vision.ts";
import type { SamplerParams } from "../llm/sampling.ts";
import { VERSION } from "../mod.ts";
import { ChatFlags, checkFlags, type CommandName, COMMANDS, commandHelp, InfoFlags, RunFlags, splitArgs, UsageError } from "./flags.ts";
import { chatSession, messagesPrompt, modelLines, readMessages, stdio } from "./chat.ts";
import { err, escapeControl, exit, onInterrupt, out, OutputError, printError, progressLine, StdoutClosed, stdinIsTerminal } from "./io.ts";
import { amdCaps } from "../kernels/render/amdgpu/targets.ts";
import { amdDumpTarget, backendOf, decodeProgram, dumpExtras, renderKernel, type RenderTarget, targetFor } from "./render.ts";

const USAGE = `poot ${VERSION}: LLM inference in TypeScript on GPUs through their driver libraries
usage:
  poot run   [-m MODEL] [-p TEXT | PROMPT | - | --messages FILE.json] [-n N] [-c CTX] [-s SEED] [--backend B] [--tp N]
             [sampler flags] [--json]
  poot chat  [-m MODEL] [--system TEXT] [-n N] [-c CTX] [--backend B] [sampler flags]
  poot serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [--backend B] [--slots N] [--ctx N]
             [--kv-memory F] [--chunk N] [--api-key K] [--drain S]
  poot embed  -m MODEL --text T [--text T2 ...] [--pooling mean|cls|last] [--no-normalize] [--json]
  poot rerank -m MODEL --query Q --document D [--document D2 ...] [--json]
  poot info  [-m MODEL] [--backend B] [--json] [--dump-kernels DIR --target ptx|spirv|wgsl|amdgpu|js]
  poot bench [--shape NAME,...] [--backend B] [--tokens N] [--dtype D,...] [--tp 1,2,4 [--big]] ...
  poot quantize IN OUT --type f32|f16|bf16|q8_0|q4_0|q4_k_m|q5_k_m|q6_k [--allow-requantize]   (IN: GGUF or HF folder)
  poot --version | --help | COMMAND --help (every flag and its default)
MODEL is a GGUF file or a Hugging Face folder (default: the stories260K model shipped with poot);
B is auto (default) or one of ${BACKEND_ORDER.join(", ")}.`;

type Env = Record<string, string | undefined>;
const g = globalThis as unknown as {
  Deno?: { args: string[]; env: { get(k: string): string | undefined; set(k: string, v: string): void } };
  process?: { argv: string[]; env: Env; getuid?(): number };
};

function defaultModel(): string {
  const embedded = (globalThis as { POOT_DEFAULT_MODEL?: string }).POOT_DEFAULT_MODEL; // dist/poot carries its own
  if (embedded) return embedded;
  // Run from a registry (jsr:@poot/poot/cli) the shipped model is a URL, not a file this process can open.
  if (!import.meta.url.startsWith("file:")) throw new UsageError("no default model here: give one with -m FILE");
  return join(dirname(fileURLToPath(import.meta.url)), "..", "models", "stories260K", "stories260K.gguf");
}

/**
 * Mesa's Vulkan/WebGPU probe complains on stderr without a runtime dir: give it a private one (mode 0700),
 * made only when a backend that probes Mesa is about to be opened.
 */
function ensureRuntimeDir(backend: BackendChoice): void {
  if (backend === "js") return;
  const get = (k: string) => g.Deno ? g.Deno.env.get(k) : g.process?.env[k];
  if (get("XDG_RUNTIME_DIR")) return;
  let dir: string;
  try {
    dir = join(tmpdir(), `poot-xdg-${g.process?.getuid?.() ?? "user"}`);
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  } catch {
    return; // leave it unset: Mesa only warns
  }
  if (g.Deno) g.Deno.env.set("XDG_RUNTIME_DIR", dir);
  else if (g.process) g.process.env.XDG_RUNTIME_DIR = dir;
}

/** Runs the command line `args` (without the program name); returns the exit code. Never throws. */
export async function main(args: string[]): Promise<number> {
  try {
    return await dispatch(args);
  } catch (e) {
    if (e instanceof StdoutClosed) return 0;
    const error = e as Error;
    if (e instanceof UsageError || (e as { usage?: boolean }).usage === true) { // cli/quantize.ts's usage errors too
      printError(error.message);
      return 2;
    }
    printError(e instanceof OutputError ? error.message : `${error?.name ?? "Error"}: ${error?.message ?? String(e)}`);
    return 1;
  }
}

async function dispatch(args: string[]): Promise<number> {
  const first = args[0] ?? "run"; // bare `poot` generates from the default model, as it always has
  if (first === "--help" || first === "-h" || first === "help") {
    out(USAGE + "\n");
    return 0;
  }
  if (first === "--version" || first === "-V") {
    out(`poot ${VERSION}\n`);
    return 0;
  }
  // `poot -p hi` is `poot run -p hi`, as llama-cli takes flags without a command.
  const [cmd, rest] = first.startsWith("-") ? ["run", args] : [first, args.slice(1)];
  switch (cmd) {
    case "run":
    case "chat":
    case "info": {
      const { values, positionals } = splitArgs(cmd, rest);
      if (values.help) {
        out(commandHelp(cmd as CommandName) + "\n");
        return 0;
      }
      if (cmd === "run") return await run(checkFlags(RunFlags, values), positionals);
      if (cmd === "info") return await info(checkFlags(InfoFlags, values), positionals);
      if (positionals.length) throw new UsageError(`chat: unexpected argument ${JSON.stringify(positionals[0])} (the conversation is typed on stdin)`);
      return await run({ ...checkFlags(ChatFlags, values) }, [], true);
    }
    case "embed":
    case "rerank": {
      const { values, positionals } = splitArgs(cmd, rest);
      if (values.help) {
        out(commandHelp(cmd) + "\n");
        return 0;
      }
      if (positionals.length) throw new UsageError(`${cmd}: unexpected argument ${JSON.stringify(positionals[0])} (give texts with --${cmd === "embed" ? "text" : "document"})`);
      ensureRuntimeDir((values.backend as BackendChoice | undefined) ?? "auto");
      const m = await import("./embed.ts");
      return await (cmd === "embed" ? m.embedMain(values) : m.rerankMain(values));
    }
    case "quantize":
      return (await import("./quantize.ts")).quantizeMain(rest);
    case "serve":
      return await (await import("./serve.ts")).main(rest, defaultModel());
    case "bench": {
      // --tp N,...: the tensor-parallel bench (bench/tp.ts); otherwise the decode bench.
      if (rest.some((a) => a === "--tp" || a.startsWith("--tp="))) {
        return await (await import("../bench/tp.ts")).main(rest, { prog: "poot bench", prefix: "poot: bench" });
      }
      const { main: bench } = await import("../bench/decode.ts");
      return await bench(rest, { prog: "poot bench", prefix: "poot: bench" });
    }
    default:
      throw new UsageError(`unknown command ${JSON.stringify(cmd)} (${Object.keys(COMMANDS).join(", ")}, bench, quantize, serve; poot --help)`);
  }
}

/** --json-schema FILE / --grammar FILE as a ResponseFormat (read and parsed before anything is loaded). */
function responseFormat(schemaFile: string | undefined, grammarFile: string | undefined): ResponseFormat | undefined {
  if (schemaFile !== undefined && grammarFile !== undefined) throw new UsageError("--json-schema and --grammar: give one");
  const read = (flag: string, file: string) => {
    try {
      return readFileSync(file, "utf8");
    } catch (e) {
      throw new UsageError(`${flag}: cannot read ${file}: ${(e as Error).message}`);
    }
  };
  if (grammarFile !== undefined) return { type: "grammar", grammar: read("--grammar", grammarFile) };
  if (schemaFile === undefined) return undefined;
  let schema: unknown;
  try {
    schema = JSON.parse(read("--json-schema", schemaFile));
  } catch (e) {
    if (e instanceof UsageError) throw e;
    throw new UsageError(`--json-schema: ${schemaFile} is not JSON: ${(e as Error).message}`);
  }
  if (schema === null || typeof schema !== "object" || Array.isArray(schema)) throw new UsageError(`--json-schema: ${schemaFile} must hold a JSON object (a schema)`);
  return { type: "json_schema", schema };
}

/** A `run --json` token line: id and text, and the logprobs when asked (top ones with their text). */
function tokenLine(e: TokenEvent, driver: Driver): Record<string, unknown> {
  const line: Record<string, unknown> = { token: e.id, text: e.text };
  if (e.logprob !== undefined) line.logprob = e.logprob;
  if (e.topLogprobs) line.top_logprobs = e.topLogprobs.map((t) => ({ token: t.id, text: driver.model.tokenizer.decode([t.id], { stripLeadingSpace: false }), logprob: t.logprob }));
  return line;
}

/** The prompts of `run`: -p flags, or the positionals joined, or stdin (piped, or `-`), else the empty prompt. */
function prompts(flags: string[] | undefined, positionals: string[]): string[] {
  if (flags && positionals.length) throw new UsageError("run: give the prompt either with -p or as an argument, not both");
  const fromStdin = () => readFileSync(0, "utf8").replace(/\r?\n$/, "");
  if (flags) return flags.map((p) => (p === "-" ? fromStdin() : p));
  if (positionals.length === 1 && positionals[0] === "-") return [fromStdin()];
  if (positionals.length) return [positionals.join(" ")];
  return stdinIsTerminal() ? [""] : [fromStdin()];
}

type RunOptions = Partial<ReturnType<typeof RunFlags.parse>> & { system?: string };

/** `run` (and `chat`, the interactive session on the same loading path). */
/** The images of a run: those of --messages' image parts, then the --image files (a typed error for a text-only model). */
function runImages(model: ModelHandle, files: string[], messages: string | undefined): Uint8Array[] {
  const images = [...(messages !== undefined ? chatImages(readMessages(messages)) : []), ...files.map((f) => readImageFile(f))];
  if (images.length && !model.config.vision) {
    throw new ModelKindError(model.arch, "has no vision tower: --image needs a vision-language model (LLaVA)");
  }
  return images;
}

function readImageFile(file: string): Uint8Array {
  try {
    return new Uint8Array(readFileSync(file));
  } catch (e) {
    throw new ImageError(file, `cannot be read (${(e as { code?: string }).code ?? (e as Error).message})`);
  }
}

/** A text prompt's ids with its image placeholders (one per image prepended, each on its own line, when it has none). */
function withPlaceholders(model: ModelHandle, prompt: string, images: number): number[] {
  const token = model.config.vision!.imageToken, mark = model.tokenizer.tokenText(token);
  const text = prompt.includes(mark) ? prompt : `${mark}\n`.repeat(images) + prompt;
  return tokenizeAround(model.tokenizer, text, token);
}

async function run(f: RunOptions, positionals: string[], chat = false): Promise<number> {
  const sampler: SamplerParams = {
    temperature: f.temperature ?? 0, topK: f["top-k"], topP: f["top-p"], minP: f["min-p"], seed: f.seed,
    logitBias: f["logit-bias"], repeatPenalty: f["repeat-penalty"], frequencyPenalty: f["frequency-penalty"],
    presencePenalty: f["presence-penalty"], minTokens: f["min-tokens"],
    ...(f.json && f["top-logprobs"] !== undefined ? { logprobs: true, topLogprobs: f["top-logprobs"] } : {}),
  };
  if (f["top-logprobs"] !== undefined && !f.json) throw new UsageError("--top-logprobs: needs --json (the logprobs ride on the token lines)");
  const format = responseFormat(f["json-schema"], f.grammar);
  if (f.messages !== undefined && (f.prompt || positionals.length)) throw new UsageError("run: give --messages or a prompt, not both");
  const texts = chat || f.messages !== undefined ? [] : prompts(f.prompt, positionals);
  const model = loadModel(f.model ?? defaultModel());
  if (model.config.encoder) {
    model.close();
    throw new ModelKindError(model.arch, `is an encoder: it embeds and reranks (poot embed, poot rerank); it cannot ${chat ? "chat" : "generate text"}`);
  }
  // Bad messages or a template that fails to render end here, before a device is opened.
  const chatIds = f.messages !== undefined ? messagesPrompt(model, f.messages) : undefined;
  const images = runImages(model, f.image ?? [], f.messages);
  if (chat && !model.chatTemplate) throw new UsageError(`chat: ${model.path} has no chat template (run takes plain prompts)`);
  const ctx = f.ctx;
  const backend = f.backend ?? "auto";
  ensureRuntimeDir(backend);
  let engine: Executor, passedOver: string[] = [];
  try {
    const qx = f["quantized-x"], xp = f["xq-prep"];
    const opts = { ...(qx === undefined ? {} : { quantizedX: qx === "on" }), ...(xp === undefined ? {} : { xqPrep: xp === "on" }) };
    const compile: ProgramCompiler = qx === undefined && xp === undefined ? compileGraph : (g, t) => compileGraph(g, t, opts);
    if ((f.tp ?? 1) > 1) engine = await openRankGroup(backend, tpPlan(model.config, f.tp!), { compile });
    else {
      const c = await chooseBackend(backend);
      engine = new Engine(c.device, { compile });
      passedOver = c.passedOver;
    }
  } catch (e) {
    model.close();
    throw e;
  }
  const device = { target: { backend: engine.targetSet().backend, device: engine.stats().device } };
  const bar = progressLine();
  let driver: Driver | undefined;
  // Ctrl-C stops the generation before its next token; what was generated stays printed.
  const interrupt = new AbortController();
  const offInterrupt = onInterrupt(() => interrupt.abort());
  try {
    const t0 = performance.now();
    driver = await Driver.open(model, engine, {
      ctx, allowLongContext: f["allow-long-context"], kvDtype: f["kv-type"] ?? "auto", stepsAhead: f["steps-ahead"],
      onProgress: (p) => bar.show(progressText(p), p.phase === "compile" || p.tensors === p.totalTensors),
    });
    bar.done();
    model.close(); // the weights are on the device
    const loadMs = performance.now() - t0;
    if (chat) {
      offInterrupt(); // the session takes Ctrl-C: it stops a reply, not the session
      await chatSession(driver, stdio(out), { maxTokens: f["max-tokens"], sampler, system: f.system });
      return 0;
    }
    // Every prompt is checked before anything is printed.
    const ids = chatIds ? [chatIds] : texts.map((p) => images.length ? withPlaceholders(model, p, images.length) : driver!.tokenize(p));
    if (chatIds) texts.push("");
    for (const t of ids) if (t.length >= driver.ctx) throw new ContextOverflowError(t.length, driver.ctx);
    if (backend === "auto") {
      const over = passedOver.map((r) => r.split(": ").slice(0, 2).join(": ")).join("; ");
      err(`[auto: ${device.target.backend} on ${device.target.device}${over ? `; passed over ${over}` : ""}]\n`);
    }
    const json = f.json === true;
    const maxTokens = f["max-tokens"];
    for (let i = 0; i < texts.length; i++) {
      const stream = driver.stream(ids[i], { maxTokens, sampler, stop: f.stop, signal: interrupt.signal, format, ...(images.length ? { images } : {}) });
      if (!json) out(texts[i]);
      let res: GenerateResult;
      try {
        for await (const e of stream) out(json ? JSON.stringify(tokenLine(e, driver)) + "\n" : e.text);
        res = await stream.result;
      } catch (e) {
        if (!(e instanceof AbortError && interrupt.signal.aborted)) throw e;
        if (!json) out("\n");
        err(`[interrupted after ${e.partial?.generatedIds.length ?? 0} tokens]\n`);
        return 130;
      }
      if (json) out(JSON.stringify(summary(res, engine, loadMs)) + "\n");
      else {
        out("\n");
        err(`[${device.target.backend} on ${device.target.device}: ${res.timings.generatedTokens} tokens, ` +
          `${res.timings.tokensPerSecond.toFixed(1)} tok/s, prompt ${res.timings.promptTokens} tokens in ${res.timings.promptMs.toFixed(1)} ms, ` +
          `finish: ${res.finish}]\n`);
      }
    }
  } finally {
    offInterrupt();
    bar.done();
    if (driver) await driver.close();
    else await engine.unload();
  }
  return 0;
}

function progressText(p: LoadProgress): string {
  const mb = (n: number) => (n / 2 ** 20).toFixed(1);
  return p.phase === "load"
    ? `loading weights: ${p.tensors}/${p.totalTensors} tensors, ${mb(p.bytes)}/${mb(p.totalBytes)} MiB`
    : `compiling: ${p.entries}/${p.totalEntries} step shapes`;
}

/** The summary object of `run --json` (DESIGN.md's shape). */
function summary(res: GenerateResult, engine: Executor, loadMs: number) {
  const t = engine.targetSet();
  const round = (x: number) => Math.round(x * 100) / 100;
  return {
    backend: t.backend,
    device: t.device,
    prompt_token_ids: res.promptIds,
    generated_token_ids: res.generatedIds,
    text: res.text,
    finish_reason: res.finish,
    timings: {
      load_ms: round(loadMs), prompt_ms: round(res.timings.promptMs), generate_ms: round(res.timings.generateMs),
      prompt_tokens: res.timings.promptTokens, generated_tokens: res.timings.generatedTokens,
      tokens_per_second: round(res.timings.tokensPerSecond), host_us_per_step: round(engine.stats().hostMicrosPerStep - engine.stats().waitMicrosPerStep),
      step_us_per_step: round(engine.stats().hostMicrosPerStep),
    },
  };
}

async function info(f: ReturnType<typeof InfoFlags.parse>, positionals: string[]): Promise<number> {
  if (positionals.length) throw new UsageError(`info: unexpected argument ${JSON.stringify(positionals[0])} (the model is -m FILE)`);
  const dir = f["dump-kernels"];
  const target = f.target;
  if (dir !== undefined && !target) throw new UsageError("--dump-kernels needs --target ptx|spirv|wgsl|amdgpu|js");
  if (target && dir === undefined) throw new UsageError("--target goes with --dump-kernels DIR");
  if (dir !== undefined && f.json) throw new UsageError("--json and --dump-kernels go separately");
  // The same loader (and so the same checks of the file) as `run`.
  const model = loadModel(f.model ?? defaultModel());
  const backend = f.backend ?? "auto";
  ensureRuntimeDir(backend);
  if (dir !== undefined && target) return await dumpKernels(model, dir, target);
  interface BackendInfo {
    backend: string;
    status: "present" | "absent" | "refused";
    why?: string;
    device?: string;
    /**
     * int8Dot: "fast" (caps.dot4: the integer gemv is the default), "native" (the instruction, not the default), or false.
     * coop: the input types of caps.coop's cooperative matrices ("f16", "bf16", "f16+bf16"), or false.
     */
    caps?: { subgroups: number | false; f16: boolean; int8Dot: "fast" | "native" | false; coop: string | false };
    memoryBytes?: number;
  }
  const backends: BackendInfo[] = [];
  let auto: string | undefined;
  for (const b of backend === "auto" ? BACKEND_ORDER : [backend]) {
    const d = await probeBackend(b);
    if (typeof d === "string") {
      backends.push({ backend: b, status: d.startsWith("refused") ? "refused" : "absent", why: d });
      continue;
    }
    const t = d.target;
    const over = b !== "js" ? passOverReason(d) : undefined;
    if (!over && !auto) auto = b;
    backends.push({
      backend: b, status: "present", device: t.device, why: over ? `auto passes over it: ${over}` : undefined,
      caps: {
        subgroups: t.caps.subgroups ? t.caps.subgroupSize : false, f16: t.caps.f16,
        int8Dot: t.caps.dot4 ? "fast" : t.caps.dot4Native ? "native" : false,
        coop: (["f16", "bf16"] as const).filter((k) => t.caps.coop?.[k]).join("+") || false,
      },
      memoryBytes: t.memory.totalBytes,
    });
    await d.destroy();
  }
  const c = model.config;
  if (f.json) {
    out(JSON.stringify({
      model: { path: model.path, name: model.name, format: model.format, arch: model.arch, family: model.family.name, config: c, contextLength: model.contextLength, chatTemplate: model.chatTemplate !== undefined },
      backends, auto: backend === "auto" ? auto : undefined,
    }) + "\n");
    return 0;
  }
  const lines = [
    ...modelLines(model),
    "backends:",
    ...backends.map((b) => `  ${b.backend.padEnd(6)} ${b.status}` + (b.caps
      ? `: ${b.device} (subgroups ${b.caps.subgroups || "no"}, f16 ${b.caps.f16}, int8 dot ${b.caps.int8Dot || "no"}, coop ${b.caps.coop || "no"}, memory ${((b.memoryBytes ?? 0) / 2 ** 30).toFixed(1)} GiB)${b.why ? `; ${b.why}` : ""}`
      : `: ${b.why}`)),
  ];
  if (backend === "auto") lines.push(`auto takes ${auto ?? "nothing (no backend present)"}`);
  out(lines.map(escapeControl).join("\n") + "\n");
  return 0;
}

/** Writes the decode plan's kernels for `target`, with the present device's capabilities when it is here. */
async function dumpKernels(model: ModelHandle, dir: string, target: RenderTarget): Promise<number> {
  const d = await probeBackend(backendOf(target));
  let set = typeof d === "string" ? targetFor(target) : d.target;
  if (typeof d !== "string") await d.destroy();
  const amd = amdDumpTarget(set);
  // no AMD device: lower for the chosen processor's caps (its wave size shapes the kernels)
  if (target === "amdgpu" && typeof d === "string") set = { ...set, device: `typical ${amd.name}`, caps: amdCaps(amd) };
  const program = decodeProgram(model, set);
  mkdirSync(dir, { recursive: true });
  const seen = new Set<string>();
  let n = 0;
  let note = "";
  for (const s of program.steps) {
    if (s.k !== "kernel" || seen.has(s.kernel.name)) continue;
    seen.add(s.kernel.name);
    const r = renderKernel(s.kernel, target, set.caps);
    const stem = join(dir, `${String(n++).padStart(3, "0")}_${s.kernel.name}`);
    writeFileSync(`${stem}.${r.ext}`, r.data);
    const extras = dumpExtras(s.kernel, target, set.caps, amd);
    if (typeof extras === "string") note = `; ${extras}`;
    else for (const x of extras) writeFileSync(`${stem}.${x.ext}`, x.data);
  }
  const c = set.caps;
  const device = target === "amdgpu" && !set.device.includes(amd.name) ? `${set.device}, ${amd.name}` : set.device;
  out(`wrote ${n} kernels of the decode plan to ${dir} (${target} for ${device}: subgroups ${c.subgroups ? c.subgroupSize : "no"}, ` +
    `f16 ${c.f16}, max workgroup ${c.maxWorkgroupSize}, shared ${c.maxSharedBytes} B${note})\n`);
  return 0;
}

if (import.meta.main) {
  exit(await main(g.Deno?.args ?? g.process?.argv.slice(2) ?? []));
}
