// The kernel library built for GPU-like caps (32- and 8-lane subgroups, no subgroups at all with shared-
// memory reductions, tiny grid limits forcing 2-D/3-D grids), run on the JS device's lockstep (SIMT) path.
// This checks the variants the GPU targets get, on the CPU, against the same references.
import { test } from "node:test";
import { JsDevice } from "../../backends/js/device.ts";
import { JS_CAPS } from "../../kernels/target.ts";
import { cases } from "./cases.ts";
import { assertCase, runCase } from "./harness.ts";

const variants = {
  sg32: new JsDevice({ debug: true, caps: { ...JS_CAPS, subgroups: true, subgroupSize: 32, maxWorkgroupSize: 1024 } }),
  sg8: new JsDevice({ debug: true, caps: { ...JS_CAPS, subgroups: true, subgroupSize: 8, maxWorkgroupSize: 128, maxWorkgroupsPerDim: [3, 2, 65535] } }),
  shared: new JsDevice({ debug: true, caps: { ...JS_CAPS, subgroups: false, subgroupSize: 0, maxWorkgroupSize: 64 } }),
};
for (const [tag, dev] of Object.entries(variants)) {
  for (const kc of cases) {
    test(`${tag}: ${kc.name}`, async () => assertCase(kc, await runCase(dev, kc)));
  }
}
