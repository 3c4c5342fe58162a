// The PTX backend: PtxDevice (libcuda through ffi/cuda.ts) and the capabilities it reports.
import type { Device } from "../device.ts";
import { probePtx, type PtxDeviceOptions } from "./device.ts";
export { probePtx, PtxDevice, type PtxDeviceOptions } from "./device.ts";
export { capsFromAttributes, type CudaAttributes, ptxArch, SM90_ATTRIBUTES, SM90_CAPS } from "./caps.ts";

/** Opens the PTX device, or says why there is none (the backend registry's common entry, backends/open.ts). */
export function open(opts?: PtxDeviceOptions): Promise<Device | string> {
  return Promise.resolve(probePtx(opts));
}
