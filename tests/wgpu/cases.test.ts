// Every kernel-library conformance case (tests/kernels/cases.ts) on the wgpu device (lavapipe in CI), against
// the case's float64 reference within its tolerance; integer and movement outputs exact. Also once more with
// subgroups turned off, so the shared-memory reduction variants are compiled and run on WebGPU too.
import { test } from "node:test";
import { WgpuDevice } from "../../backends/wgpu/mod.ts";
import { cases } from "../kernels/cases.ts";
import { assertCase, runCase } from "../kernels/harness.ts";

const dev = await WgpuDevice.open();
const noSg = typeof dev === "string" ? dev : await WgpuDevice.open({ subgroups: false });
const skip = typeof dev === "string" ? dev : false;

for (const [tag, d] of [["wgpu", dev], ["wgpu no-subgroups", noSg]] as const) {
  for (const kc of cases) {
    test(`${tag}: ${kc.name}`, { skip }, async () => {
      if (typeof d === "string") throw new Error(d);
      assertCase(kc, await runCase(d, kc));
    });
  }
}
