// What the AMDGPU renderer's LLVM IR computes, checked without an AMD GPU: kernels are run on the CPU by lli
// (tests/amdgpu/lli.ts: every invocation a thread, barriers and wave exchanges through pthread barriers, at
// the target's wave size) and compared with independent references: the IR feature kernels with the JS
// device under the feature suite's per-output bounds (bit-exact for integers, ulps for floats, as PTX is held
// to), the kernel library's conformance cases with their own references. This checks the semantics of the
// emitted text (math library, conversions, f16/bf16, memory views, vectors, control flow, LDS, barriers,
// partial waves, reductions and shuffles over ds_bpermute, the fault word), not the AMDGPU backend's lowering
// of it and never the GPU: nothing here ran on AMD hardware. Skips when lli is absent (llvm-14-runtime).
//
// CI runs one conformance case per kernel kind at each wave size (each lli run JIT-compiles its module, about
// half a second of CPU); POOT_AMDGPU_LLI=all runs every case (97 per wave, a few minutes).
import { test } from "node:test";
import assert from "node:assert/strict";
import { JsDevice } from "../../backends/js/device.ts";
import { KernelFault } from "../../backends/errors.ts";
import { renderAmdgpu } from "../../kernels/render/amdgpu/kernel.ts";
import { AMD_TARGETS, amdCaps } from "../../kernels/render/amdgpu/targets.ts";
import { checkCase, featureCases } from "../devices/feature_kernels.ts";
import { compareRuns, runFeature } from "../devices/run.ts";
import { cases as libraryCases, type KernelCase } from "../kernels/cases.ts";
import { type CaseRun, checkCase as checkLibraryCase } from "../kernels/harness.ts";
import { findLli, runOnHost } from "./lli.ts";

const lli = findLli();
const skip = typeof lli === "string" ? false : lli.reason;
const opts = { skip, timeout: 600_000 };
const env = (globalThis as { process?: { env: Record<string, string | undefined> } }).process?.env ?? {};
const all = env.POOT_AMDGPU_LLI === "all";
const WAVES = [64, 32] as const;

// Runtime-independent (lli does the work): the sweeps run once, under Deno.
const sweepSkip = skip || ("Bun" in globalThis ? "runs under Deno (lli does the work)" : false);

for (const wave of WAVES) {
  test(`IR feature kernels run by lli at wave${wave} equal the JS device`, { ...opts, skip: sweepSkip }, async () => {
    const js = new JsDevice({ caps: { subgroupSize: wave, f16: true } });
    const bad: string[] = [];
    for (const c of featureCases()) {
      const got = runOnHost(lli as string, renderAmdgpu(c.kernel, { wave }), c.inputs);
      if (!Array.isArray(got)) {
        bad.push(`${c.name}: trapped with ${got.trap}`);
        continue;
      }
      bad.push(...compareRuns(c, await runFeature(js, c), got));
    }
    assert.deepEqual(bad, []);
  });
}

test("a failing check leaves its code in the fault word and traps", opts, () => {
  const c = checkCase(true);
  const got = runOnHost(lli as string, renderAmdgpu(c.kernel, { wave: 64 }), c.inputs);
  assert.ok(!Array.isArray(got), "the planted check did not fire");
  assert.equal(got.trap, 7);
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

/** One case per kernel kind (the name's first word), the first fault case among them too. */
function sample(cs: KernelCase[]): KernelCase[] {
  const kinds = new Set<string>();
  let fault = false;
  return cs.filter((kc) => {
    const kind = kc.name.split(" ")[0];
    const take = (kc.fault === undefined && !kinds.has(kind)) || (kc.fault !== undefined && !fault);
    if (take && kc.fault === undefined) kinds.add(kind);
    if (take && kc.fault !== undefined) fault = true;
    return take;
  });
}

for (const name of ["gfx942", "gfx1100"] as const) {
  const t = AMD_TARGETS[name];
  const chosen = all ? libraryCases : sample(libraryCases);
  test(`kernel library conformance cases (${chosen.length}${all ? "" : ", one per kind"}) run by lli for ${name} (wave${t.wave}) match their references`, { ...opts, skip: sweepSkip }, () => {
    const bad: string[] = [];
    for (const kc of chosen) {
      const inputs = kc.inputs();
      try {
        const got = runOnHost(lli as string, renderAmdgpu(kc.make(amdCaps(t)), { wave: t.wave }), inputs);
        const run: CaseRun = Array.isArray(got) ? { inputs, outputs: got } : { inputs, fault: new KernelFault("rocm", kc.name, got.trap) };
        const errs = checkLibraryCase(kc, run);
        if (errs.length) bad.push(`${kc.name}: ${errs.slice(0, 3).join(" | ")}`);
      } catch (e) {
        bad.push(`${kc.name}: ${(e as Error).message.split("\n")[0]}`);
      }
    }
    assert.deepEqual(bad, []);
  });
}
