import { test } from "node:test";
import assert from "node:assert/strict";
import { layoutArena, type Interval } from "../../graph/arena.ts";

function overlaps(a: Interval, b: Interval): boolean {
  return a.first <= b.last && b.first <= a.last;
}

test("arena: live values never share bytes, dead ones reuse them", () => {
  let seed = 7;
  const rnd = () => (seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32;
  for (let trial = 0; trial < 200; trial++) {
    const vals: Interval[] = Array.from({ length: 1 + Math.floor(rnd() * 30) }, () => {
      const first = Math.floor(rnd() * 40);
      return { bytes: 1 + Math.floor(rnd() * 5000), first, last: first + Math.floor(rnd() * 10) };
    });
    const { offsets, bytes } = layoutArena(vals, 64);
    for (let i = 0; i < vals.length; i++) {
      assert.equal(offsets[i] % 64, 0);
      assert.ok(offsets[i] + vals[i].bytes <= bytes);
      for (let j = 0; j < i; j++) {
        if (!overlaps(vals[i], vals[j])) continue;
        const disjoint = offsets[i] + vals[i].bytes <= offsets[j] || offsets[j] + vals[j].bytes <= offsets[i];
        assert.ok(disjoint, `values ${i} and ${j} are live together and overlap`);
      }
    }
  }
  // A chain of values each dead before the next is born fits in one slot.
  const chain = Array.from({ length: 10 }, (_, i) => ({ bytes: 1000, first: i, last: i }));
  assert.equal(layoutArena(chain, 256).bytes, 1024);
});
