// The PTX backend: PtxDevice (libcuda through ffi/cuda.ts) and the capabilities it reports.
import type { Device } from "../device.ts";
import { type Cuda, openCuda } from "../../ffi/cuda.ts";
import { PtxDevice } from "./device.ts";
import type { PtxDeviceOptions } from "./options.ts";
export { PtxDevice } from "./device.ts";
export type { PtxDeviceOptions } from "./options.ts";
export { capsFromAttributes, type CudaAttributes, ptxArch, SM90_ATTRIBUTES, SM90_CAPS } from "./caps.ts";

/** Opens the device, or says why it cannot (no libcuda, no GPU, a GPU older than sm_80) as a string. */
export function probePtx(opts: PtxDeviceOptions = {}): PtxDevice | string {
  let cu: Cuda;
  try {
    cu = openCuda(opts.library);
  } catch (e) {
    return `libcuda is not available: ${(e as Error).message}`;
  }
  try {
    cu.init();
    if (cu.deviceCount() <= (opts.ordinal ?? 0)) {
      cu.close();
      return `no CUDA device ${opts.ordinal ?? 0}`;
    }
    return new PtxDevice(cu, opts);
  } catch (e) {
    return `CUDA device unavailable: ${(e as Error).message}`;
  }
}

/** Opens the PTX device, or says why there is none (the backend registry's common entry, backends/open.ts). */
export function open(opts?: PtxDeviceOptions): Promise<Device | string> {
  return Promise.resolve(probePtx(opts));
}
