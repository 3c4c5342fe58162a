// poot serve: an OpenAI-compatible HTTP server over one model (llm/serve). Binds 127.0.0.1 unless told;
// SIGINT/SIGTERM stop admitting, finish or cancel in-flight requests within --drain seconds, free the device
// and exit 0. Bad flags exit 2 and bad models 1, each with one `poot:` line on stderr.
import { parseArgs } from "node:util";
import { z } from "zod";
import { BACKENDS } from "../kernels/target.ts";
import { type BackendChoice, Engine, loadModel, openBackend } from "../engine.ts";
import type { Executor } from "../backends/executor.ts";
import { openRankGroup } from "../backends/group.ts";
import { tpPlan } from "../llm/tp.ts";
import { servingCompile } from "../llm/serve/batch.ts";
import { listen } from "../llm/serve/listen.ts";
import { Server } from "../llm/serve/server.ts";
import { EncoderServer } from "../llm/serve/encode.ts";
import { parseTemplate, TEMPLATE_VARIABLES } from "../llm/chat.ts";
import { REASONING_FORMATS } from "../llm/serve/schema.ts";
import { escapeControls } from "../llm/errors.ts";
import { readFileSync } from "node:fs";

export const SERVE_USAGE = `usage: poot serve [-m|--model FILE] [--host 127.0.0.1] [--port 8080] [--backend auto|ptx|rocm|vulkan|wgpu|js]
                  [--slots 16] [--ctx N] [--kv-memory 0.6] [--chunk 32] [--kv-type auto|f32|f16] [--api-key KEY] [--drain 30] [--tp 1]
                  [--chat-template FILE] [--chat-template-kwargs JSON] [--reasoning-format auto|none] [--served-model-name NAME]...
  --slots      most sequences decoding at once (batch entries 1, 2, 4, ... slots, and slots + chunk)
  --ctx        positions per sequence (default: the model's context, at most 4096)
  --kv-memory  fraction of the device memory left after the weights that the paged KV pool takes
  --chunk      prompt tokens per prefill chunk (interleaved with decoding)
  --kv-type    element type of the KV pool: f16 halves its memory and what attention reads; auto (default): f16 for
               16-bit or quantized weights, f32 for f32 ones
  --api-key    require "Authorization: Bearer KEY" (or set POOT_API_KEY)
  --drain      seconds SIGINT/SIGTERM waits for in-flight requests before cancelling them
  --tp         tensor parallelism: split the model over N ranks (ptx: N GPUs; js: a simulated group)
  --chat-template  a Jinja chat template file used in place of the model's own (llama.cpp's --chat-template-file);
               tool calls are read in the syntax it teaches (Hermes <tool_call> blocks or Llama 3 JSON)
  --chat-template-kwargs  a JSON object of template variables for every chat, e.g. '{"enable_thinking":false}'
               (a request's chat_template_kwargs win)
  --reasoning-format  auto (default): a thinking model's <think> block goes to message.reasoning_content;
               none: it stays in content (a request's reasoning_format wins)
  --served-model-name  the model id /v1/models lists and requests name (default: the file's general.name, else
               the file name), as vLLM's flag: what a client configured for another name (an Anthropic SDK's model) asks for;
               given again, more names (the first the server's own; a response names the one asked)`;

const int = (name: string, lo: number, hi: number) =>
  z.string().regex(/^\d+$/, `--${name} must be an integer`).transform(Number).pipe(z.number().min(lo, `--${name} must be >= ${lo}`).max(hi, `--${name} must be <= ${hi}`));

const Flags = z.object({
  model: z.string().min(1).optional(),
  host: z.string().min(1).default("127.0.0.1"),
  port: int("port", 0, 65535).default(8080),
  backend: z.enum(["auto", ...BACKENDS]).default("auto"),
  slots: int("slots", 1, 1024).default(16),
  ctx: int("ctx", 2, 1 << 20).optional(),
  "kv-memory": z.string().transform(Number).pipe(z.number().gt(0, "--kv-memory must be in (0, 1]").max(1, "--kv-memory must be in (0, 1]")).optional(),
  chunk: int("chunk", 1, 4096).default(32),
  "kv-type": z.enum(["auto", "f32", "f16"]).default("auto"),
  "api-key": z.string().min(1, "--api-key must not be empty").optional(),
  drain: int("drain", 0, 3600).default(30),
  tp: int("tp", 1, 64).default(1),
  "chat-template": z.string().min(1, "--chat-template needs a file").optional(),
  "chat-template-kwargs": z.string().transform((s, ctx) => {
    try {
      const v = JSON.parse(s);
      if (v !== null && typeof v === "object" && !Array.isArray(v)) return v as Record<string, unknown>;
    } catch { /* reported below */ }
    ctx.addIssue({ code: "custom", message: "--chat-template-kwargs must be a JSON object" });
    return z.NEVER;
  }).pipe(z.record(z.string(), z.unknown()).refine((v) => !Object.keys(v).some((k) => TEMPLATE_VARIABLES.includes(k)), {
    message: `--chat-template-kwargs may not set ${TEMPLATE_VARIABLES.join(", ")}`,
  })).optional(),
  "reasoning-format": z.enum(REASONING_FORMATS).default("auto"),
  "served-model-name": z.array(z.string().min(1, "--served-model-name must not be empty")).optional(),
});

class UsageError extends Error {}

function parse(args: string[]): z.infer<typeof Flags> {
  let values: Record<string, unknown>;
  try {
    values = parseArgs({
      args,
      options: Object.fromEntries(["model", "host", "port", "backend", "slots", "ctx", "kv-memory", "chunk", "kv-type", "api-key", "drain", "tp", "chat-template", "chat-template-kwargs", "reasoning-format", "served-model-name"].map((k) => [k, { type: "string" as const, ...(k === "model" ? { short: "m" } : {}), ...(k === "served-model-name" ? { multiple: true } : {}) }])),
      allowPositionals: false,
      strict: true,
    }).values;
  } catch (e) {
    throw new UsageError((e as Error).message.split("\n")[0]);
  }
  const r = Flags.safeParse(values);
  if (!r.success) {
    const i = r.error.issues[0];
    const flag = `--${String(i.path[0])}`;
    throw new UsageError(i.message.startsWith("--") ? i.message : `${flag}: ${i.message}`);
  }
  return r.data;
}

function onSignals(f: () => void): void {
  const g = globalThis as unknown as { Deno?: { addSignalListener(s: string, f: () => void): void }; process?: { on(s: string, f: () => void): void } };
  for (const s of ["SIGINT", "SIGTERM"]) {
    if (g.Deno) g.Deno.addSignalListener(s, f);
    else g.process?.on(s, f);
  }
}

/** Runs the server until a signal; returns the exit code. `defaultModel` is the CLI's shipped model. */
export async function main(args: string[], defaultModel: string): Promise<number> {
  if (args.includes("--help") || args.includes("-h")) {
    console.log(SERVE_USAGE);
    return 0;
  }
  let f: z.infer<typeof Flags>;
  try {
    f = parse(args);
  } catch (e) {
    console.error(`poot: serve: ${(e as Error).message}`);
    return 2;
  }
  const env = (globalThis as { process?: { env: Record<string, string | undefined> } }).process?.env;
  const apiKey = f["api-key"] ?? (env?.POOT_API_KEY || undefined);
  let template: string | undefined;
  if (f["chat-template"] !== undefined) {
    try {
      template = readFileSync(f["chat-template"], "utf8");
      parseTemplate(template, f["chat-template"]);
    } catch (e) {
      console.error(`poot: serve: --chat-template: ${escapeControls(String((e as Error).message ?? e).split("\n")[0])}`);
      return 2;
    }
  }
  const model = loadModel(f.model ?? defaultModel);
  if (template !== undefined) model.chatTemplate = template;
  let exec: Executor;
  try {
    exec = f.tp > 1
      ? await openRankGroup(f.backend as BackendChoice, tpPlan(model.config, f.tp), { compile: servingCompile })
      : new Engine(await openBackend(f.backend as BackendChoice), { compile: servingCompile });
  } catch (e) {
    model.close();
    throw e;
  }
  // An encoder model serves /v1/embeddings and /v1/rerank (llm/serve/encode.ts); the KV flags do not apply.
  const server = model.config.encoder
    ? await EncoderServer.open(model, exec, { apiKey, modelId: f["served-model-name"]?.[0], aliases: f["served-model-name"]?.slice(1) })
    : await Server.open(model, exec, { slots: f.slots, ctx: f.ctx, kvMemory: f["kv-memory"], chunk: f.chunk, kvDtype: f["kv-type"], apiKey,
      reasoningFormat: f["reasoning-format"], templateVars: f["chat-template-kwargs"], modelId: f["served-model-name"]?.[0],
      aliases: f["served-model-name"]?.slice(1) });
  const l = await listen(server.handler, { hostname: f.host, port: f.port }).catch(async (e) => {
    await server.shutdown(0);
    throw e;
  });
  const t = exec.targetSet();
  console.error(`poot serve: ${server.modelId} on ${t.backend} (${t.device}), http://${f.host}:${l.port}/v1 — ` +
    (server instanceof Server
      ? `${f.slots} slots, context ${server.ctx}, KV pool ${server.plan.blocks} blocks of ${server.plan.block}, ${server.kvDtype} (${(server.plan.bytes / 2 ** 20).toFixed(1)} MiB)`
      : `encoder, ${server.ctx} tokens per text: /v1/embeddings, /v1/rerank`) +
    (apiKey ? ", API key required" : ""));
  await new Promise<void>((resolve) => {
    let once = false;
    onSignals(() => {
      if (once) return;
      once = true;
      console.error(`poot serve: stopping (draining for up to ${f.drain} s)`);
      resolve();
    });
  });
  await server.shutdown(f.drain * 1000);
  await l.close();
  console.error("poot serve: stopped");
  return 0;
}
