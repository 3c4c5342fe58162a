// Load test on loopback, on every device present (bounded: a warm-up and 3 rounds of 64 requests, stories260K):
// 64 concurrent streaming requests of mixed prompt lengths, lengths and sampler settings, plus 8 whose clients
// disconnect mid-stream. Each of the 64 completes exactly once ([DONE], one finish, usage matching its tokens), its
// text equals the same request run alone (greedy and seeded sampling alike: a row does not depend on its
// batch), the disconnects' blocks are free afterwards (/metrics), and RSS does not grow across the rounds.
import { test } from "node:test";
import assert from "node:assert/strict";
import process from "node:process";
import v8 from "node:v8";
import vm from "node:vm";
import type { Device } from "../../backends/device.ts";
import { Engine } from "../../backends/executor.ts";
import { servingCompile } from "../../llm/serve/batch.ts";
import { listen } from "../../llm/serve/listen.ts";
import { Server } from "../../llm/serve/server.ts";
import { openDevice, selectedBackends } from "../devices/index.ts";
import { model, prompt } from "./setup.ts";
import { sharingKernels } from "../devices/kernel_cache.ts";
import { dlopen } from "../../ffi/lib.ts";

/**
 * A full garbage collection before reading RSS (Bun.gc, or V8's gc exposed at run time), then glibc's free memory
 * handed back (malloc_trim), so that RSS shows what is live. Without the trim, Deno's RSS on vulkan moved by 20 MiB
 * between rounds with no leak: 378.2, 357.7, 376.4, 378.1 MiB (a fresh-clone run, 2026-12-06).
 */
function collectGarbage(): void {
  const bun = (globalThis as { Bun?: { gc(force: boolean): void } }).Bun;
  if (bun) bun.gc(true);
  else {
    v8.setFlagsFromString("--expose-gc");
    (vm.runInNewContext("gc") as () => void)();
  }
  // (glibc only: elsewhere RSS is read untrimmed)
  let libc;
  try {
    libc = dlopen(["libc.so.6"], { malloc_trim: { args: ["usize"], result: "i32" } });
  } catch {
    return;
  }
  libc.symbols.malloc_trim(0);
  libc.close();
}

interface Req {
  body: Record<string, unknown>;
  /** Disconnect after this many chunks. */
  drop?: number;
}

/** 64 requests that must complete, and 8 more (long ones) whose clients disconnect after 3 chunks. */
function requests(): Req[] {
  return Array.from({ length: 72 }, (_, i) => {
    const sampled = i % 3 === 1;
    const body: Record<string, unknown> = {
      prompt: prompt(i), max_tokens: 6 + ((i * 7) % 29), stream: true, stream_options: { include_usage: true },
      ...(sampled ? { temperature: 0.6 + (i % 4) * 0.1, top_k: 20 + i, top_p: 0.9, min_p: 0.02, seed: 1000 + i } : { temperature: 0 }),
    };
    if (i >= 64) body.max_tokens = 200;
    return { body, drop: i >= 64 ? 3 : undefined };
  });
}

interface Outcome { text: string; finish: string; usage: number; ids: Set<string>; done: number; dropped: boolean }

async function stream(base: string, r: Req): Promise<Outcome> {
  const ac = new AbortController();
  const res = await fetch(`${base}/v1/completions`, { method: "POST", body: JSON.stringify(r.body), signal: ac.signal, headers: { "content-type": "application/json" } });
  if (res.status !== 200) assert.fail(`status ${res.status}: ${await res.text()}`); // (a clone would read the whole stream)
  const out: Outcome = { text: "", finish: "", usage: -1, ids: new Set(), done: 0, dropped: false };
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let buf = "", chunks = 0;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let at;
      while ((at = buf.indexOf("\n\n")) >= 0) {
        const ev = buf.slice(0, at);
        buf = buf.slice(at + 2);
        assert.ok(ev.startsWith("data: "), ev);
        const data = ev.slice(6);
        if (data === "[DONE]") {
          out.done++;
          continue;
        }
        const j = JSON.parse(data);
        assert.equal(j.error, undefined, data);
        out.ids.add(j.id);
        if (j.usage) out.usage = j.usage.completion_tokens;
        for (const c of j.choices) {
          out.text += c.text;
          if (c.finish_reason) {
            assert.equal(out.finish, "", "one finish per stream");
            out.finish = c.finish_reason;
          }
        }
        if (r.drop && ++chunks === r.drop) {
          out.dropped = true;
          ac.abort();
          await reader.cancel().catch(() => {});
          return out;
        }
      }
    }
  } catch (e) {
    if (!out.dropped) throw e;
  }
  return out;
}

async function gauge(base: string, name: string): Promise<number> {
  const m = await (await fetch(`${base}/metrics`)).text();
  const line = m.split("\n").find((l) => l.startsWith(`${name} `));
  return Number(line!.split(" ")[1]);
}

// js and vulkan (lavapipe) carry the load test in CI; wgpu runs the same scheduler in tests/serve/scheduler.test.ts,
// and on lavapipe a wgpu round costs more than the other two together. ptx runs it on the GPU machine.
for (const backend of selectedBackends().filter((b) => b !== "wgpu")) {
  const dev = await openDevice(backend);
  const skip = typeof dev === "string" ? dev : false;
  test(`serve load on ${backend}: 64 concurrent streams x 3 rounds, none lost, each equal to running alone, disconnects freed, RSS flat`, { skip }, async () => {
    const exec = new Engine(dev as Device, { compile: sharingKernels(servingCompile), timeoutMs: 120_000, ownsDevice: false });
    const server = await Server.open(model, exec, { ctx: 256, slots: 16, chunk: 16, maxQueue: 128 });
    const l = await listen(server.handler, { hostname: "127.0.0.1", port: 0 });
    const base = `http://127.0.0.1:${l.port}`;
    try {
      const reqs = requests();
      // Each request alone (one in flight at a time), as the reference.
      const alone = new Map<string, Outcome>();
      for (const r of reqs) {
        if (r.drop) continue;
        const key = JSON.stringify(r.body);
        if (!alone.has(key)) alone.set(key, await stream(base, r));
      }
      const rss: number[] = [];
      // Flat within allocator noise after a full GC and glibc's trim (observed under Deno: within 1.4 MiB on js and
      // vulkan alone, rounds 1..3 of two runs each; in a fresh-clone run beside other test files, vulkan's round 1
      // 8.4 MiB above the others: 344.5, 352.9, 346.2, 346.2): within 16 MiB, so a leak of 120 kB a request (144
      // requests from round 1 to round 3) shows.
      // Under Bun, RSS after Bun.gc swings by tens of MiB between rounds with no leak (observed on vulkan, untrimmed:
      // 1895, 1853, 1895, 1909 MiB), so there the last round is compared with the highest earlier one, within 24 MiB
      // (a leak of ~330 kB a request still shows).
      // A last round past the bound gets one more round, which must be within it too: a leak grows again, while a
      // swing goes back (session 47, a fresh-clone run on vulkan: 359.0, 343.1, 343.4, 360.2 MiB, 17.1 over round 1).
      const bun = "Bun" in globalThis, bound = (bun ? 24 : 16) * 2 ** 20;
      const growth = (round: number) => rss[round] - (bun ? Math.max(rss[0], rss[1], rss[2]) : rss[1]);
      // A warm-up round (JIT, heap growth), then the three rounds whose RSS is compared (and the one more, above).
      for (let round = 0; round < 4 || (round === 4 && growth(3) >= bound); round++) {
        const t0 = performance.now();
        const before = await gauge(base, "poot_generation_tokens_total");
        const got = await Promise.all(reqs.map((r) => stream(base, r)));
        const ids = new Set<string>();
        got.forEach((g, i) => {
          if (g.dropped) return;
          const want = alone.get(JSON.stringify(reqs[i].body))!;
          assert.equal(g.done, 1, `request ${i}: [DONE] once`);
          assert.equal(g.ids.size, 1, `request ${i}: one id`);
          for (const id of g.ids) {
            assert.ok(!ids.has(id), `request ${i}: id shared with another stream`);
            ids.add(id);
          }
          assert.equal(g.text, want.text, `request ${i} (round ${round}): text differs from the request alone`);
          assert.equal(g.finish, want.finish);
          assert.equal(g.usage, want.usage);
          assert.ok(g.usage > 0 && g.usage <= (reqs[i].body.max_tokens as number));
        });
        assert.equal(ids.size, 64, "all 64 completed, each once");
        // Disconnected streams are dropped within a step: nothing running, every block free.
        // (bounded by time, 20 s, not by a count of polls: a loaded machine stretches a step; `kept` below says they
        // stopped within a few steps)
        for (const until = performance.now() + 20_000; performance.now() < until && (await gauge(base, "poot_kv_blocks_used") > 0 || await gauge(base, "poot_running_sequences") > 0);) {
          await new Promise((res) => setTimeout(res, 10));
        }
        assert.equal(await gauge(base, "poot_kv_blocks_used"), 0, "blocks of disconnected streams are free");
        assert.equal(await gauge(base, "poot_running_sequences"), 0);
        // The disconnected ones stopped within a few steps (observed: about 4 tokens each); run on, they would
        // make 8 x 200.
        const kept = got.reduce((a, g) => a + (g.dropped ? 0 : g.usage), 0);
        const made = await gauge(base, "poot_generation_tokens_total") - before;
        assert.ok(made - kept <= 8 * 40, `${made - kept} tokens generated for 8 disconnected clients`);
        collectGarbage();
        rss.push(process.memoryUsage().rss);
        console.log(`round ${round}: ${(performance.now() - t0).toFixed(0)} ms, rss ${(rss[round] / 2 ** 20).toFixed(1)} MiB, ` +
          `${made - kept} tokens for the disconnected`);
      }
      const last = rss.length - 1, mib = (b: number) => (b / 2 ** 20).toFixed(1);
      assert.ok(growth(last) < bound, `RSS grew ${mib(growth(last))} MiB over rounds ${bun ? `0..${last} (from the highest of 0..2)` : `1..${last}`}: ${rss.map(mib).join(", ")} MiB`);
      assert.equal(await gauge(base, "poot_generation_tokens_total") > 0, true);
    } finally {
      await server.shutdown(0);
      await l.close();
    }
  });
}
