// resetState zeroes every State buffer: the large ones on the device (a fill kernel), the small ones through a
// host upload; the first step after it counts from zero again. On every device present.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Engine } from "../../backends/executor.ts";
import { openDevice, selectedBackends } from "../devices/index.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { Tracer } from "../../graph/tracer.ts";

for (const backend of selectedBackends()) {
  const dev = await openDevice(backend);
  test(`${backend}: resetState zeroes large (device fill) and small (upload) State buffers`, { skip: typeof dev === "string" ? dev : false, timeout: 120_000 }, async () => {
  const t = new Tracer();
  const big = t.state("big", "f32", [1030]), small = t.state("small", "f32", [3]);
  t.output("big", big);
  t.output("small", small);
  t.writeState("big", t.add(big, 1));
  t.writeState("small", t.add(small, 2));
  const eng = new Engine(dev as Exclude<typeof dev, string>, { compile: compileGraph });
  try {
    const id = eng.addEntry("count", t.build());
    for (let i = 0; i < 3; i++) await eng.step(id, {});
    const before = await eng.step(id, {});
    // outputs read the state as the step leaves it (the update is in place)
    assert.equal((before.outputs.big as Float32Array)[1029], 4);
    assert.equal((before.outputs.small as Float32Array)[2], 8);
    eng.resetState();
    const after = await eng.step(id, {});
    assert.ok((after.outputs.big as Float32Array).every((v) => v === 1), "big state not zeroed");
    assert.ok((after.outputs.small as Float32Array).every((v) => v === 2), "small state not zeroed");
  } finally {
    await eng.unload();
  }
  });
}
