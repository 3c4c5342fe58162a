// `poot serve` as a library: a model on an executor, the paged pool fitted to the device, the batch runner,
// the scheduler and the HTTP handler, and an orderly shutdown (stop admitting, finish or cancel within a
// bound, unload the device).
//
//   const exec = new Engine(await openBackend("auto"), { compile: servingCompile });
//   const server = await Server.open(loadModel(path), exec, { slots: 16 });
//   const l = await listen(server.handler, { hostname: "127.0.0.1", port: 8080 });
//   ... await l.close(); await server.shutdown(10_000);
//
// The executor must compile with servingCompile (no fused batch-1 gemv): with the default compiler, a request
// alone (1-row entry) and in a batch would run different matmul kernels and could differ in the last bit.
import type { Executor } from "../../backends/executor.ts";
import { LlmError } from "../errors.ts";
import type { ModelHandle } from "../model.ts";
import { kvDtypeOf } from "../steps.ts";
import { BatchRunner } from "./batch.ts";
import { createHandler } from "./http.ts";
import { Metrics } from "./metrics.ts";
import { BlockPool, planPool, type PoolPlan, PoolSizeError } from "./pool.ts";
import { Scheduler } from "./scheduler.ts";
import { servedNames } from "./schema.ts";

export interface ServeOptions {
  /** Most sequences decoding at once (the largest decode batch); default 16. */
  slots?: number;
  /** Positions per context (default: the model's context length, at most 4096). */
  ctx?: number;
  /** Rows of one prefill chunk (default 32). */
  chunk?: number;
  /** Fraction of the device memory left after the weights that the KV pool takes (default 0.6). */
  kvMemory?: number;
  /** Positions per KV block (default 16). */
  block?: number;
  /** Element type of the K/V pool (default "auto": kvTypeFor the model, llm/steps.ts kvDtypeOf, as the Driver). */
  kvDtype?: "f32" | "f16" | "auto";
  /** An exact KV block count (overrides kvMemory; tests). */
  kvBlocks?: number;
  /** Requests waiting for a slot before a 429 (default 4 * slots... at least 64). */
  maxQueue?: number;
  apiKey?: string;
  /** Largest request body in bytes (default 4 MiB). */
  bodyLimit?: number;
  /** Time a request body may take to arrive, ms (default 30 s; then 408). */
  bodyTimeoutMs?: number;
  /** The model id the API shows (default: the file's general.name, else the file name). */
  modelId?: string;
  /** More names requests may give the model (vLLM's --served-model-name with several); a response names the one asked. */
  aliases?: string[];
  /** Where a thinking model's reasoning goes unless a request says: "auto" (default) reasoning_content, "none" content. */
  reasoningFormat?: "auto" | "deepseek" | "none";
  /** Chat template variables for every chat request (llama.cpp's --chat-template-kwargs; a request's own win). */
  templateVars?: Record<string, unknown>;
}

export class Server {
  private constructor(
    readonly model: ModelHandle,
    readonly exec: Executor,
    readonly pool: BlockPool,
    readonly plan: PoolPlan,
    readonly sched: Scheduler,
    readonly metrics: Metrics,
    readonly handler: (req: Request) => Promise<Response>,
    readonly modelId: string,
    readonly ctx: number,
    /** Element type of the K/V pool. */
    readonly kvDtype: "f32" | "f16",
  ) {}

  /** Loads the weights, sizes the pool, records every batch entry; on failure nothing stays on the device. */
  static async open(model: ModelHandle, exec: Executor, o: ServeOptions = {}): Promise<Server> {
    const slots = o.slots ?? 16, chunk = o.chunk ?? 32, block = o.block ?? 16;
    const ctx = o.ctx ?? Math.min(model.contextLength ?? 2048, 4096);
    const bad = (what: string, v: unknown) => new LlmError(`serve: ${what} (got ${v})`);
    if (!(Number.isInteger(slots) && slots >= 1 && slots <= 1024)) throw bad("slots must be an integer in 1..1024", slots);
    if (!(Number.isInteger(chunk) && chunk >= 1 && chunk <= 4096)) throw bad("the prefill chunk must be an integer in 1..4096", chunk);
    if (!(Number.isInteger(ctx) && ctx >= 2)) throw bad("ctx must be an integer >= 2", ctx);
    if (model.contextLength && ctx > model.contextLength) throw bad(`ctx exceeds the model's trained context of ${model.contextLength}`, ctx);
    const kvMemory = o.kvMemory ?? 0.6;
    const kvDtype = kvDtypeOf(model, o);
    if (!(kvMemory > 0 && kvMemory <= 1)) throw bad("kv-memory must be a fraction in (0, 1]", kvMemory);
    try {
      await exec.loadWeights(model.store, model.map);
      const t = exec.targetSet();
      const weights = exec.stats().bytes.weights;
      const free = Math.max(0, (t.memory.freeBytes ?? t.memory.totalBytes) - (t.memory.freeBytes === undefined ? weights : 0));
      const c = model.config;
      let plan: PoolPlan;
      try {
        plan = planPool({ layers: c.layers, kvHeads: c.kvHeads, headDim: c.headDim, elemBytes: kvDtype === "f16" ? 2 : 4 }, {
          ctx, slots, block, fraction: kvMemory, memory: { totalBytes: free, freeBytes: free }, maxBufferBytes: t.caps.maxBindingBytes,
          blocks: o.kvBlocks,
        });
      } catch (e) {
        if (e instanceof PoolSizeError) throw new LlmError(`serve: ${e.message}`);
        throw e;
      }
      const runner = await BatchRunner.open(model, exec, { slots, chunk, pool: plan, kvDtype });
      const pool = new BlockPool(plan.blocks);
      const metrics = new Metrics();
      const sched = new Scheduler(model, runner, pool, metrics, { slots, chunk, ctx, maxQueue: o.maxQueue ?? Math.max(64, 4 * slots) });
      const modelId = o.modelId ?? model.name ?? model.path.split(/[\\/]/).pop()!.replace(/\.gguf$/i, "");
      const handler = createHandler({
        model, modelIds: servedNames(modelId, o.aliases), sched, pool, metrics, ctx, apiKey: o.apiKey, bodyLimit: o.bodyLimit ?? 4 * 2 ** 20, bodyTimeoutMs: o.bodyTimeoutMs,
        reasoningFormat: o.reasoningFormat, templateVars: o.templateVars,
      });
      return new Server(model, exec, pool, plan, sched, metrics, handler, modelId, ctx, kvDtype);
    } catch (e) {
      await exec.unload().catch(() => {});
      throw e;
    }
  }

  /** Stops admitting, finishes or cancels in-flight work within `graceMs`, then frees the device. */
  async shutdown(graceMs = 10_000): Promise<void> {
    await this.sched.shutdown(graceMs);
    await this.exec.unload();
  }
}
