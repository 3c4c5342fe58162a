// The PTX backend: PtxDevice (libcuda through ffi/cuda.ts) and the capabilities it reports.
export { probePtx, PtxDevice, type PtxDeviceOptions } from "./device.ts";
export { capsFromAttributes, type CudaAttributes, ptxArch, SM90_ATTRIBUTES, SM90_CAPS } from "./caps.ts";
