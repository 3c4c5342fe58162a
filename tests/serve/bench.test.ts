// bench/serve.ts at a tiny shape on the JS device: every concurrency row and the step ratio come out finite.
import { test } from "node:test";
import assert from "node:assert/strict";
import { runServeBench } from "../../bench/serve.ts";

test("bench/serve.ts runs end to end at the stories260K shape on js", async () => {
  const lines: string[] = [];
  const r = await runServeBench({
    shapes: ["stories260K"], backend: "js", concurrency: [1, 3], prompt: 20, gen: 5, chunk: 8, kvDtype: "f16", stepReps: 2,
    log: (s) => lines.push(s),
  });
  assert.deepEqual(r.rows.map((x) => x.concurrency), [1, 3]);
  for (const x of r.rows) {
    assert.ok(x.tokPerSec > 0 && Number.isFinite(x.tokPerSec));
    assert.ok(x.ttftP50Ms > 0 && x.itlP50Ms > 0 && x.itlP99Ms >= x.itlP50Ms);
    assert.ok(x.steps > 0 && x.stepMicros > 0 && Number.isFinite(x.loopMicros), "µs in and around the step");
    // greedy rows: token, position, tables, write slots, sampled rows, sampler words, 8 extra words a row, no mask
    assert.ok(x.uploadBytesPerStep > 0 && x.uploadBytesPerStep < 8192, `${x.uploadBytesPerStep} slot bytes per step`);
  }
  assert.equal(r.steps.length, 1);
  assert.ok(r.steps[0].batch1Ms > 0 && r.steps[0].ratio > 0);
  assert.ok(lines.some((l) => l.includes("decode step")));
});
