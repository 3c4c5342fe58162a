// bench/tp.ts on the JS device at the stories260K shape: every row runs, each tp > 1 group reports its stages and
// collective time, and its greedy tokens equal tp 1's (synthetic weights, the same seed on every rank count).
import { test } from "node:test";
import assert from "node:assert/strict";
import { runTpBench } from "../../bench/tp.ts";

test("bench/tp.ts: stories260K at tp 1, 2, 4 on js, groups agree with tp 1", { timeout: 120_000 }, async () => {
  const rows = await runTpBench({ backend: "js", tps: [1, 2, 4], shapes: ["stories260K"], tokens: 4, cap: 32, big: false });
  assert.deepEqual(rows.map((r) => [r.tp, r.error]), [[1, undefined], [2, undefined], [4, undefined]]);
  for (const r of rows) assert.ok(r.tokPerSec > 0 && r.tokens.length === 8, `tp ${r.tp}: ${r.tokPerSec} tok/s, ${r.tokens.length} tokens`);
  for (const r of rows.slice(1)) {
    assert.equal(r.matchesTp1, true, `tp ${r.tp} tokens ${r.tokens} vs ${rows[0].tokens}`);
    assert.equal(r.stages, 2 * 5 + 2, "5 layers: two all-reduces each and the logits' all-gather cut 12 stages");
    assert.ok(r.collectiveMicros > 0);
  }
});
