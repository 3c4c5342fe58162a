// The wgpu backend: a Device over Deno's built-in WebGPU (navigator.gpu). Absent under Bun.
import type { Device } from "../device.ts";
import { WgpuDevice, type WgpuOptions } from "./device.ts";
export { WgpuDevice, type WgpuOptions, type WgpuStats } from "./device.ts";
export { openGpu, webgpuMissing, type WgpuFeatures, type WgpuOpenOptions } from "./target.ts";

/** Opens the WebGPU device, or says why there is none (the backend registry's common entry, backends/open.ts). */
export function open(opts?: WgpuOptions): Promise<Device | string> {
  return WgpuDevice.open(opts);
}
