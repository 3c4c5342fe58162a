// Every kernel-library conformance case (tests/kernels/cases.ts) on the wgpu device (lavapipe in CI), against
// the case's float64 reference within its tolerance; integer and movement outputs exact. Also once more with
// subgroups turned off, so the shared-memory reduction variants are compiled and run on WebGPU too.
import { test } from "node:test";
import { WgpuDevice } from "../../backends/wgpu/mod.ts";
import { cases } from "../kernels/cases.ts";
import { assertCase, runCase } from "../kernels/harness.ts";
import { softwareVulkan } from "../devices/index.ts";

const dev = await WgpuDevice.open();
const noSg = typeof dev === "string" ? dev : await WgpuDevice.open({ subgroups: false });
const skip = typeof dev === "string" ? dev : false;
// On lavapipe a case with a forced tuning or kernel (the largest kernels) runs on one of the two devices: the
// block-weight gemvs on the subgroup device, where they compile in 1-3 s on a fresh machine (without subgroups
// their reductions through shared memory took 3-17 s each: q6_k's 4 rows of 32 lanes 17, q4_0's 5 of 16 lanes 10),
// the rest on the no-subgroups device; the default tunings of each kind run on both. On a GPU each forced case runs
// on both (and through both of Vulkan's storage paths: tests/vulkan/cases.test.ts).
const shared = (kc: (typeof cases)[number], i: number) =>
  typeof dev !== "string" && softwareVulkan(dev) && kc.forced && (/^gemv q/.test(kc.name) ? 0 : 1) !== i
    ? `on lavapipe this forced case runs on the ${i ? "subgroup" : "no-subgroups"} device only (CI's compile time)`
    : false;

for (const [i, [tag, d]] of ([["wgpu", dev], ["wgpu no-subgroups", noSg]] as const).entries()) {
  for (const kc of cases) {
    test(`${tag}: ${kc.name}`, { skip: skip || shared(kc, i) }, async () => {
      if (typeof d === "string") throw new Error(d);
      assertCase(kc, await runCase(d, kc));
    });
  }
}
