// The wgpu backend: a Device over Deno's built-in WebGPU (navigator.gpu). Absent under Bun.
export { WgpuDevice, type WgpuOptions, type WgpuStats } from "./device.ts";
export { openGpu, webgpuMissing, type WgpuFeatures, type WgpuOpenOptions } from "./target.ts";
