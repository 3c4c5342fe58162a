// resetState zeroes every State buffer: the large ones on the device (fill kernels recorded once per set of
// buffers and replayed: one submission a reset), the small ones through a host upload; the first step after it
// counts from zero again, on every reset, and on the new buffers of an entry made again after its State was freed
// (the old ones freed only once the reset queued before was synchronized).
// On every device present.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Engine } from "../../backends/executor.ts";
import type { Device } from "../../backends/device.ts";
import { openDevice, selectedBackends } from "../devices/index.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { Tracer } from "../../graph/tracer.ts";
import type { Graph } from "../../graph/ir.ts";

/** big (1030 f32) += 1 and small (3 f32) += 2 each step, both read out. */
function counter(): Graph {
  const t = new Tracer();
  const big = t.state("big", "f32", [1030]), small = t.state("small", "f32", [3]);
  t.output("big", big);
  t.output("small", small);
  t.writeState("big", t.add(big, 1));
  t.writeState("small", t.add(small, 2));
  return t.build();
}

/** `dev` with its record, replay and run calls counted. */
function counted(dev: Device): { dev: Device; calls: Record<"record" | "replay" | "run" | "free", number> } {
  const calls = { record: 0, replay: 0, run: 0, free: 0 };
  const proxy = new Proxy(dev, {
    get(t, p) {
      const v = Reflect.get(t, p);
      if (typeof v !== "function") return v;
      if (p === "record" || p === "replay" || p === "run" || p === "free") calls[p]++;
      return v.bind(t);
    },
  });
  return { dev: proxy, calls };
}

for (const backend of selectedBackends()) {
  const dev = await openDevice(backend);
  test(`${backend}: resetState zeroes large (recorded fill) and small (upload) State buffers, every time`, { skip: typeof dev === "string" ? dev : false, timeout: 120_000 }, async () => {
    const c = counted(dev as Exclude<typeof dev, string>);
    const eng = new Engine(c.dev, { compile: compileGraph });
    const check = async (id: number, what: string) => {
      for (let i = 0; i < 3; i++) await eng.step(id, {});
      const before = await eng.step(id, {});
      // outputs read the state as the step leaves it (the update is in place)
      assert.equal((before.outputs.big as Float32Array)[1029], 4, `${what}: before`);
      assert.equal((before.outputs.small as Float32Array)[2], 8, `${what}: before`);
      eng.resetState();
      const after = await eng.step(id, {});
      assert.ok((after.outputs.big as Float32Array).every((v) => v === 1), `${what}: big state not zeroed`);
      assert.ok((after.outputs.small as Float32Array).every((v) => v === 2), `${what}: small state not zeroed`);
      // the next check counts from 1 again
      eng.resetState();
    };
    try {
      let id = eng.addEntry("count", counter());
      await check(id, "first reset");
      const records = c.calls.record, replays = c.calls.replay;
      await check(id, "a reset replayed");
      assert.equal(c.calls.record, records, "a second reset of the same State recorded again");
      assert.equal(c.calls.replay - replays, 5 + 2, "five steps and two resets, one replay each");
      assert.equal(c.calls.run, 0, "resetState ran eager work");
      // The State freed with its only entry, then made again (new buffers): the reset writes the new ones. The
      // reset that ended the check is still queued: nothing it writes is freed before a synchronize.
      const frees = c.calls.free;
      eng.removeEntry(id);
      assert.equal(c.calls.free, frees, "buffers freed under a queued reset");
      id = eng.addEntry("count again", counter());
      await check(id, "State made again");
      assert.ok(c.calls.free > frees, "the removed entry's buffers were never freed");
    } finally {
      await eng.unload();
    }
  });
}
