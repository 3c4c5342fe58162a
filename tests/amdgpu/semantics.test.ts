// What the AMDGPU renderer's LLVM IR computes, checked without an AMD GPU: every IR feature kernel that can
// run one invocation at a time (no barrier, subgroup op or shared memory) is run on the CPU by lli
// (tests/amdgpu/lli.ts) and compared with the JS device under the feature suite's per-output bounds
// (bit-exact for integers, ulps for floats, as PTX is held to). This checks the instruction semantics of
// the emitted text (math library, conversions, f16, memory views, vectors, control flow, the fault word),
// not the AMDGPU backend's lowering of it, and never the GPU: nothing here ran on AMD hardware. Skips when
// lli is absent (apt-get install llvm-14-runtime).
import { test } from "node:test";
import assert from "node:assert/strict";
import { JsDevice } from "../../backends/js/device.ts";
import { renderAmdgpu } from "../../kernels/render/amdgpu/kernel.ts";
import { checkCase, featureCases } from "../ptx/features.ts";
import { compareRuns, runFeature } from "../ptx/run.ts";
import { findLli, runOnHost, sequential } from "./lli.ts";

const lli = findLli();
const skip = typeof lli === "string" ? false : lli.reason;
const opts = { skip, timeout: 300_000 };
const cases = featureCases().filter((c) => sequential(c.kernel));

test(`IR feature kernels run one invocation at a time (${cases.map((c) => c.name).join(", ")}) equal the JS device`, opts, async () => {
  assert.ok(cases.length >= 9, `only ${cases.length} sequential feature kernels`);
  const js = new JsDevice({ caps: { subgroupSize: 64, f16: true } });
  const bad: string[] = [];
  for (const c of cases) {
    const got = runOnHost(lli as string, renderAmdgpu(c.kernel, { wave: 64 }), c.inputs);
    if (!Array.isArray(got)) {
      bad.push(`${c.name}: exit ${got.trap} ${got.stderr.split("\n")[0]}`);
      continue;
    }
    bad.push(...compareRuns(c, await runFeature(js, c), got));
  }
  assert.deepEqual(bad, []);
});

test("a failing check leaves its code in the fault word and traps", opts, () => {
  const c = checkCase(true);
  const got = runOnHost(lli as string, renderAmdgpu(c.kernel, { wave: 64 }), c.inputs);
  assert.ok(!Array.isArray(got), "the planted check did not fire");
  assert.equal(got.trap, 7); // the host trap exits with the fault word's value
});

test("the comparison catches a wrong instruction (a planted fsub for an fadd)", opts, async () => {
  const c = featureCases().find((x) => x.name === "binary_f32")!;
  const m = renderAmdgpu(c.kernel, { wave: 64 });
  const planted = { ...m, ll: m.ll.replace(/fadd float (%t\d+), (%t\d+)/, "fsub float $1, $2") };
  assert.notEqual(planted.ll, m.ll);
  const got = runOnHost(lli as string, planted, c.inputs);
  assert.ok(Array.isArray(got));
  const js = new JsDevice({ caps: { subgroupSize: 64, f16: true } });
  assert.ok(compareRuns(c, await runFeature(js, c), got).length > 0, "a planted fsub went unnoticed");
});
