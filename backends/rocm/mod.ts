// The ROCm backend: RocmDevice (libhsa-runtime64 through ffi/hsa.ts, AQL packets on one queue) and what it
// needs from the amdgpu renderer (kernarg.ts).
import type { Device } from "../device.ts";
import { probeRocm, type RocmDeviceOptions } from "./device.ts";
export { type AmdgpuCompiler, probeRocm, RocmDevice, type RocmDeviceOptions } from "./device.ts";
export { loadAmdgpuCompiler } from "./render.ts";
export { gfxOf, rocmCaps, type RocmAgent, ROCM_TARGETS } from "./agent.ts";
export type { AmdgpuArg, AmdgpuCode, AmdgpuKernelMeta } from "./kernarg.ts";

/** Opens the ROCm device, or says why there is none (the backend registry's common entry, backends/open.ts). */
export function open(opts?: RocmDeviceOptions): Promise<Device | string> {
  return probeRocm(opts);
}
