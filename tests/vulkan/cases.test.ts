// Every kernel-library conformance case (tests/kernels/cases.ts) on Vulkan: against the case's reference
// (its stated tolerance, exact for integer and movement outputs), through both paths (16/8-bit storage and
// OpFConvert f16 widening, or u32 words and integer f16 decoding: they must agree bit for bit), and against the JS device running the same kernel
// (same caps, so the same variant): exact outputs equal, faults with the same code. On lavapipe a case with a forced
// tuning or kernel (the largest kernels: seconds of LLVM each on a fresh machine) runs through one of the two paths,
// alternately (tests/wgpu/cases.test.ts deals them between its devices the same way); each runs through both on a GPU.
import { test } from "node:test";
import assert from "node:assert/strict";
import { JsDevice } from "../../backends/js/device.ts";
import { openVulkanDevice, type VulkanDevice } from "../../backends/vulkan/mod.ts";
import { cases } from "../kernels/cases.ts";
import { assertCase, type CaseRun, runCase } from "../kernels/harness.ts";
import { softwareVulkan } from "../devices/index.ts";

function open(opts = {}): VulkanDevice | string {
  try {
    return openVulkanDevice(opts);
  } catch (e) {
    return `no usable Vulkan device: ${(e as Error).message}`;
  }
}
const native = open();
const skip = typeof native === "string" ? native : false;
let words: VulkanDevice | undefined;
let js: JsDevice | undefined;
const forced = cases.filter((kc) => kc.forced);

/** The bytes each exact Expect covers. */
function exactBytes(kc: (typeof cases)[number], run: CaseRun): Uint8Array[] {
  const size = { f32: 4, u32: 4, i32: 4, f16: 2, bf16: 2 } as const;
  return kc.expect(run.inputs).filter((e) => !e.tol).map((e) => run.outputs![e.binding].subarray(0, e.want.length * size[e.type]));
}

for (const kc of cases) {
  test(`vulkan case: ${kc.name}`, { skip, timeout: 120_000 }, async () => {
    const v = native as VulkanDevice;
    words ??= openVulkanDevice({ noStorage16: true, noStorage8: true, noFloat16: true });
    js ??= new JsDevice({ debug: true, caps: { subgroupSize: v.target.caps.subgroupSize } });
    const one = kc.forced && softwareVulkan(v) ? (forced.indexOf(kc) % 2 ? words : v) : undefined;
    const a = await runCase(one ?? v, kc), w = one ? undefined : await runCase(words, kc), j = await runCase(js, kc);
    assertCase(kc, a);
    if (w) assertCase(kc, w);
    if (kc.fault !== undefined) {
      assert.equal(j.fault?.code, a.fault?.code, "the JS device faults with the same code");
      return;
    }
    // the same kernel through both paths must agree bit for bit (the library may pick another variant without f16)
    const same = w && JSON.stringify(kc.make(v.target.caps)) === JSON.stringify(kc.make(words.target.caps));
    if (same) assert.deepEqual(w.outputs, a.outputs, "16/8-bit storage and f16 widening give the same bits as their fallbacks");
    assert.deepEqual(exactBytes(kc, a), exactBytes(kc, j), "exact outputs equal the JS device's");
  });
}
