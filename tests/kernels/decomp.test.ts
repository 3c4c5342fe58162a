// The decomposition every renderer runs first (kernels/decomp/mod.ts) keeps a kernel's meaning: each IR
// feature kernel (tests/ptx/features.ts, bool subgroup reductions included) and each kernel-library case
// (tests/kernels/cases.ts) gives bit-identical bindings on the JS device as written and decomposed; the pass
// is idempotent, and a kernel it has nothing to do for comes back as the same object.
import { test } from "node:test";
import assert from "node:assert/strict";
import { JsDevice } from "../../backends/js/device.ts";
import type { Kernel } from "../../kernels/ir.ts";
import { c, KernelBuilder } from "../../kernels/ir.ts";
import { decompose } from "../../kernels/decomp/mod.ts";
import { featureCases } from "../ptx/features.ts";
import { runFeature } from "../ptx/run.ts";
import { cases } from "./cases.ts";
import { runCase } from "./harness.ts";

const same = (a: Uint8Array[], b: Uint8Array[]) => a.length === b.length && a.every((x, i) => x.length === b[i].length && x.every((v, j) => v === b[i][j]));

test("decomposed IR feature kernels give the same bytes on the JS device", { timeout: 120_000 }, async () => {
  const js = new JsDevice({ caps: { subgroupSize: 32, f16: true } });
  const bad: string[] = [];
  let changed = 0;
  for (const fc of featureCases()) {
    const d = decompose(fc.kernel);
    if (d === fc.kernel) continue;
    changed++;
    assert.deepEqual(decompose(d), d, `${fc.name}: idempotent`);
    if (!same(await runFeature(js, fc), await runFeature(js, { ...fc, kernel: d }))) bad.push(fc.name);
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
