// The scheduler loop's own host cost per step (llm/serve/scheduler.ts), with no device in the way: the batched
// step is a stub that holds the thread for `--step-ms` (what a device step costs: a GPU's fence spin, a JS-device
// step) and samples token 1 for every row. N streams of `--gen` tokens run through the real Scheduler; the loop
// cost per step is the wall time per step minus the stub's time. `--io-every` sets how often the loop lets the
// runtime poll sockets (ms; 0 = a socket poll after every step, about what the old loop cost). Meanwhile a client fetches
// every 25 ms from a loopback server in the same process, to show that sockets still get through (its p50 and max latency).
// `--park on` makes the stub park as the Engine does when the scheduler asks it to (Executor StepOptions.park: a
// timer for all but PARK_MARGIN_MS of the step, then the spin), so the loop's socket turn happens inside the step.
//
//   deno run -A bench/serve_loop.ts --step-ms 3 --streams 32       bun bench/serve_loop.ts --step-ms 3
//   deno run -A bench/serve_loop.ts --step-ms 10 --streams 1 --io-every 5 --park off,on     (an 8B-sized step)
import { parseFlags } from "./flags.ts";
import type { ModelHandle } from "../llm/model.ts";
import type { BatchRow, BatchRunner, RowSample } from "../llm/serve/batch.ts";
import { Metrics } from "../llm/serve/metrics.ts";
import { BlockPool } from "../llm/serve/pool.ts";
import { Scheduler } from "../llm/serve/scheduler.ts";
import { listen } from "../llm/serve/listen.ts";
import type { Tokenizer } from "../llm/tokenizer/mod.ts";
import { PARK_MARGIN_MS, PARK_MIN_MS } from "../backends/executor.ts";

const { values: o } = parseFlags("bench/serve_loop.ts", {
  options: {
    "step-ms": { type: "string", default: "3" },
    streams: { type: "string", default: "32" },
    gen: { type: "string", default: "200" },
    "io-every": { type: "string", default: "0,5" },
    park: { type: "string", default: "off" },
  },
});
const stepMs = Number(o["step-ms"]), streams = Number(o.streams), gen = Number(o.gen);
if (!(stepMs >= 0 && streams >= 1 && gen >= 2)) throw new RangeError("--step-ms >= 0, --streams >= 1, --gen >= 2");

const NO_TEXT = { decoder: () => ({ push: () => "", flush: () => "" }), isEog: () => false, eog: new Set<number>() } as unknown as Tokenizer;
const model = { tokenizer: NO_TEXT, config: { dim: 1 } } as unknown as ModelHandle;
const block = 16, slots = Math.max(streams, 1), maxBlocks = Math.ceil((8 + gen + 1) / block);

async function run(ioEveryMs: number, park: boolean) {
  let inStep = 0;
  const runner = {
    opts: { pool: { block } },
    maxRows: slots + 16,
    exec: { resetState() {} },
    parkedAt: -Infinity,
    async step(_rows: readonly BatchRow[], at: readonly number[], opts: { park?: boolean } = {}): Promise<RowSample[]> {
      const t = performance.now();
      if (park && opts.park && stepMs - PARK_MARGIN_MS >= PARK_MIN_MS) {
        await new Promise((r) => setTimeout(r, stepMs - PARK_MARGIN_MS));
        runner.parkedAt = performance.now();
      }
      while (performance.now() - t < stepMs) { /* the device step */ }
      inStep += performance.now() - t;
      return at.map(() => ({ token: 1, nonFinite: false }));
    },
  };
  const metrics = new Metrics();
  const sched = new Scheduler(model, runner as unknown as BatchRunner, new BlockPool(slots * maxBlocks + 1), metrics, {
    slots, chunk: 16, maxQueue: 1024, ctx: maxBlocks * block, ioEveryMs,
  });
  const server = await listen(() => Promise.resolve(new Response("ok")), { hostname: "127.0.0.1", port: 0 });
  const lat: number[] = [];
  let busy = true;
  const client = (async () => {
    while (busy) {
      const t = performance.now();
      await (await fetch(`http://127.0.0.1:${server.port}/`)).text();
      lat.push(performance.now() - t);
      await new Promise((r) => setTimeout(r, 25)); // paced, so the client's own work hardly loads the loop
    }
  })();
  const t0 = performance.now();
  await Promise.all(Array.from({ length: streams }, async () => {
    for await (const e of sched.submit({ promptIds: [1, 2, 3, 4, 5, 6, 7, 8], maxTokens: gen, sampler: {} })) {
      if (e.type === "error") throw e.error;
    }
  }));
  const wall = performance.now() - t0;
  busy = false;
  await client;
  await sched.shutdown(0);
  await server.close();
  lat.sort((a, b) => a - b);
  const steps = metrics.steps;
  return { steps, loopMicros: (1000 * (wall - inStep)) / steps, stepMicros: (1000 * inStep) / steps, fetches: lat.length, p50: lat[lat.length >> 1] ?? NaN, max: lat[lat.length - 1] ?? NaN };
}

const runtime = typeof (globalThis as { Bun?: unknown }).Bun !== "undefined" ? "bun" : "deno";
console.log(`scheduler loop: ${runtime}, ${streams} streams x ${gen} tokens, stub step ${stepMs} ms`);
for (const park of o.park!.split(",").map((p) => p === "on")) for (const every of o["io-every"]!.split(",").map(Number)) {
  await run(every, park); // warm-up (JIT)
  const r = await run(every, park);
  console.log(`  ${park ? "parked, " : ""}io every ${String(every).padStart(2)} ms: ${r.loopMicros.toFixed(0).padStart(5)} µs/step around the step (${r.stepMicros.toFixed(0)} µs in it) over ${r.steps} steps; ` +
    `loopback fetch during it: ${r.fetches} done, p50 ${r.p50.toFixed(2)} ms, max ${r.max.toFixed(2)} ms`);
}
