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
// On lavapipe the cases with a forced tuning (the largest kernels: 3-10 s of compile each there on a fresh
// machine) alternate between the two devices; each runs on both on a GPU, and on Vulkan through both its paths.
const forced = cases.filter((kc) => kc.forced);
const shared = (kc: (typeof cases)[number], i: number) =>
  typeof dev !== "string" && softwareVulkan(dev) && kc.forced && forced.indexOf(kc) % 2 !== i
    ? `on lavapipe a forced-tuning case runs on the ${i ? "subgroup" : "no-subgroups"} device only (CI's compile time)`
    : false;

for (const [i, [tag, d]] of ([["wgpu", dev], ["wgpu no-subgroups", noSg]] as const).entries()) {
  for (const kc of cases) {
    test(`${tag}: ${kc.name}`, { skip: skip || shared(kc, i) }, async () => {
      if (typeof d === "string") throw new Error(d);
      assertCase(kc, await runCase(d, kc));
    });
  }
}
