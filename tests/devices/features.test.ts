// The IR feature suite on every device (tests/devices): kernels that together touch every construct of the
// kernel IR (features.ts, with features_ieee.ts), each checked against references written without any renderer (plain JS
// with Math.fround per f32 op, the platform's Float16Array for f16), so the same semantics are held on js,
// vulkan, wgpu and ptx alike. A feature a device's caps cannot run, or an absent device, is a skip with the
// reason, decided before the test is registered. (tests/vulkan/device.test.ts keeps the Vulkan-only fallback
// device; ir.test.ts runs feature_kernels.ts against the JS device on every device, PTX at its own accuracy.)
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Device } from "../../backends/device.ts";
import type { Kernel } from "../../kernels/ir.ts";
import { features } from "./features.ts";
import { openDevice, selectedBackends } from "./index.ts";

/** Allocates and fills one buffer per input, runs the kernel once (eager) and reads everything back. */
async function runOnce(d: Device, k: Kernel, inputs: Uint8Array[]): Promise<Uint8Array[]> {
  const bufs = inputs.map((b) => {
    const x = d.alloc(b.byteLength, "device");
    d.write(x, 0, b);
    return x;
  });
  try {
    d.run([{ k: "kernel", compiled: d.compile(k), grid: k.grid, work: { bytes: 0, flops: 0 }, bindings: bufs.map((buffer) => ({ buffer, offset: 0, bytes: buffer.bytes })) }]);
    await d.synchronize(60_000);
    return await Promise.all(bufs.map((b) => d.read(b, 0, b.bytes)));
  } finally {
    for (const b of bufs) d.free(b);
  }
}

for (const backend of selectedBackends()) {
  const dev = await openDevice(backend);
  const absent = typeof dev === "string" ? dev : false;
  for (const f of features.filter((x) => x.fault === undefined)) {
    const made = typeof dev === "string" ? dev : f.make(dev.target.caps);
    const lacks = typeof made === "string" && !absent ? `${backend} device: ${made}` : false;
    test(`IR features on ${backend}: ${f.name}`, { skip: absent || lacks, timeout: 120_000 }, async () => {
      const ins = f.inputs();
      // WGSL has no way to forbid contraction (wgpu on the H200 fuses x*z - y*z); SPIR-V and PTX do
      const bad = f.check(await runOnce(dev as Device, made as Kernel, ins), ins, { contracts: backend === "wgpu" });
      assert.deepEqual(bad, [], `${f.name}:\n  ${bad.join("\n  ")}`);
    });
  }
}
