// The decomposition every renderer runs first (kernels/decomp/mod.ts) keeps a kernel's meaning: each IR
// feature kernel (tests/ptx/features.ts, bool subgroup reductions included) and each kernel-library case
// (tests/kernels/cases.ts) gives bit-identical bindings on the JS device as written and decomposed, with
// every rule a language may ask for (NaN-safe compares and max/min, integer div/mod: the JS device computes
// the plain instructions with the IR's meaning, so the rewritten kernel must give the same bits); the default
// pass is idempotent, and a kernel it has nothing to do for comes back as the same object.
import { test } from "node:test";
import assert from "node:assert/strict";
import { JsDevice } from "../../backends/js/device.ts";
import type { Kernel } from "../../kernels/ir.ts";
import { c, KernelBuilder } from "../../kernels/ir.ts";
import { decompose, type Needs } from "../../kernels/decomp/mod.ts";
import { featureCases } from "../ptx/features.ts";
import { runFeature } from "../ptx/run.ts";
import { cases } from "./cases.ts";
import { runCase } from "./harness.ts";

const ALL: Needs = { nanSafe: true, intDivMod: true };
/** Bytes equal, except that in an f32 output any NaN equals any NaN (the IR leaves a made NaN's sign and payload open). */
function sameUpToNaN(a: Uint8Array[], b: Uint8Array[], f32: Set<number>): boolean {
  return a.length === b.length && a.every((x, i) => {
    if (!f32.has(i)) return same([x], [b[i]]);
    const p = new Float32Array(x.slice().buffer), q = new Float32Array(b[i].slice().buffer);
    return p.length === q.length && p.every((v, j) => Object.is(v, q[j]) || (Number.isNaN(v) && Number.isNaN(q[j])));
  });
}
const same = (a: Uint8Array[], b: Uint8Array[]) => a.length === b.length && a.every((x, i) => x.length === b[i].length && x.every((v, j) => v === b[i][j]));

test("decomposed IR feature kernels give the same bytes on the JS device", { timeout: 120_000 }, async () => {
  const js = new JsDevice({ caps: { subgroupSize: 32, f16: true } });
  const bad: string[] = [];
  let changed = 0;
  for (const fc of featureCases()) {
    const d = decompose(fc.kernel), all = decompose(fc.kernel, ALL);
    if (d !== fc.kernel) assert.deepEqual(decompose(d), d, `${fc.name}: idempotent`);
    if (all === fc.kernel) continue;
    changed++;
    const want = await runFeature(js, fc);
    if (!same(want, await runFeature(js, { ...fc, kernel: d }))) bad.push(fc.name);
    const f32 = new Set(fc.checks.filter((c) => c.as === "f32").map((c) => c.binding));
    if (!sameUpToNaN(want, await runFeature(js, { ...fc, kernel: all }), f32)) bad.push(`${fc.name} (all rules)`);
  }
  assert.ok(changed > 0, "some feature kernel decomposes");
  assert.deepEqual(bad, []);
});

test("decomposed kernel-library cases give the same bytes on the JS device", { timeout: 300_000 }, async () => {
  const js = new JsDevice({ caps: { subgroupSize: 32, f16: true } });
  const bad: string[] = [];
  for (const kc of cases.filter((x) => x.fault === undefined)) {
    const plain = await runCase(js, kc);
    const dec = await runCase(js, { ...kc, make: (caps) => decompose(kc.make(caps)) });
    if (!plain.outputs || !dec.outputs || !same(plain.outputs, dec.outputs)) bad.push(kc.name);
    const all = await runCase(js, { ...kc, make: (caps) => decompose(kc.make(caps), ALL) });
    if (!plain.outputs || !all.outputs || !same(plain.outputs, all.outputs)) bad.push(`${kc.name} (all rules)`);
  }
  assert.deepEqual(bad, []);
});

test("a kernel with nothing to decompose is returned as it is", () => {
  const b = new KernelBuilder("plain", { workgroup: 64, grid: 1 });
  const out = b.buffer("out", "u32", "w");
  b.store(out, b.gid.x, b.gid.x.mul(c(3, "u32")));
  const k: Kernel = b.build();
  assert.equal(decompose(k), k);
});
