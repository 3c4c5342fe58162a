// Run by two_backends.test.ts in a child process under Deno: opens a raw Vulkan device and a WebGPU device (two
// lavapipe instances in one process where lavapipe is the driver), runs the first IR features on both while both
// are open, destroys both and returns from the module so the runtime exits by itself. Prints one line
// "RESULT {json}" (each feature's problems per backend, empty when right); the parent judges the exit status.
import { openVulkanDevice } from "../../backends/vulkan/mod.ts";
import { WgpuDevice } from "../../backends/wgpu/mod.ts";
import type { Device } from "../../backends/device.ts";
import { features } from "./features.ts";

async function runFeatures(d: Device): Promise<string[]> {
  const bad: string[] = [];
  for (const f of features.filter((x) => x.fault === undefined).slice(0, 6)) {
    const k = f.make(d.target.caps);
    if (typeof k === "string") continue;
    const ins = f.inputs();
    const bufs = ins.map((b) => {
      const x = d.alloc(b.byteLength, "device");
      d.write(x, 0, b);
      return x;
    });
    d.run([{ k: "kernel", compiled: d.compile(k), grid: k.grid, work: { bytes: 0, flops: 0 }, bindings: bufs.map((buffer) => ({ buffer, offset: 0, bytes: buffer.bytes })) }]);
    await d.synchronize(60_000);
    bad.push(...f.check(await Promise.all(bufs.map((b) => d.read(b, 0, b.bytes))), ins, { contracts: true }).map((s) => `${f.name}: ${s}`));
    for (const b of bufs) d.free(b);
  }
  return bad;
}

const vk = openVulkanDevice();
const gpu = await WgpuDevice.open();
if (typeof gpu === "string") throw new Error(gpu);
const result = { vulkan: await runFeatures(vk), wgpu: await runFeatures(gpu) };
await gpu.destroy();
await vk.destroy();
console.log(`RESULT ${JSON.stringify(result)}`);
