// The sample kernel on the JS device forced into the GPU code shapes: lanes in lockstep with subgroups of 8
// (lavapipe's shape), and without subgroups (a shared-memory tree, as on a WebGPU adapter with no fixed
// subgroup size). The checks are in kernel_checks.ts.
import { JsDevice } from "../../backends/js/device.ts";
import { kernelTests } from "./kernel_checks.ts";

kernelTests([
  { name: "js (lockstep, subgroups of 8)", dev: new JsDevice({ caps: { subgroupSize: 8 } }), quick: true },
  { name: "js (lockstep, no subgroups)", dev: new JsDevice({ caps: { subgroups: false, subgroupSize: 0 } }), quick: true },
]);
