// libcuda (the driver API): device and primary context, memory, modules (PTX JIT), launch, streams, stream
// capture into graphs, events, error names. Symbol names are the versioned exports that cuda.h's #defines
// select (cuMemAlloc -> cuMemAlloc_v2 ...). Wrappers turn a CUresult into CudaError {fn, code, name}.

import { type Bound, cstr, defineSymbols, dlopen, type Library, type Pointer, ptrOf, readCString } from "./lib.ts";
import { struct } from "./layout.ts";

const H = "u64" as const; // CUcontext, CUmodule, CUfunction, CUstream, CUevent, CUgraph, CUgraphExec, CUdeviceptr
const B = "buffer" as const; // out-params and host arrays
const P = "pointer" as const; // host addresses held as bigint
const R = "i32" as const; // CUresult

export const cudaSymbols = defineSymbols({
  cuInit: { args: ["u32"], result: R },
  cuDriverGetVersion: { args: [B], result: R },
  cuGetErrorName: { args: [R, B], result: R },
  cuGetErrorString: { args: [R, B], result: R },
  cuDeviceGet: { args: [B, "i32"], result: R },
  cuDeviceGetCount: { args: [B], result: R },
  cuDeviceGetName: { args: [B, "i32", "i32"], result: R },
  cuDeviceGetAttribute: { args: [B, "i32", "i32"], result: R },
  cuDeviceTotalMem_v2: { args: [B, "i32"], result: R },
  cuDevicePrimaryCtxRetain: { args: [B, "i32"], result: R },
  cuDevicePrimaryCtxRelease_v2: { args: ["i32"], result: R },
  cuDevicePrimaryCtxReset_v2: { args: ["i32"], result: R },
  cuDevicePrimaryCtxSetFlags_v2: { args: ["i32", "u32"], result: R },
  cuCtxSetCurrent: { args: [H], result: R },
  cuCtxGetCurrent: { args: [B], result: R },
  cuCtxGetDevice: { args: [B], result: R },
  cuCtxSynchronize: { args: [], result: R },
  cuCtxGetLimit: { args: [B, "i32"], result: R },
  cuCtxSetLimit: { args: ["i32", "usize"], result: R },
  cuMemGetInfo_v2: { args: [B, B], result: R },
  cuMemAlloc_v2: { args: [B, "usize"], result: R },
  cuMemFree_v2: { args: [H], result: R },
  cuMemAllocHost_v2: { args: [B, "usize"], result: R },
  cuMemHostAlloc: { args: [B, "usize", "u32"], result: R },
  cuMemFreeHost: { args: [P], result: R },
  cuMemHostGetDevicePointer_v2: { args: [B, P, "u32"], result: R },
  cuMemcpyHtoD_v2: { args: [H, B, "usize"], result: R },
  cuMemcpyDtoH_v2: { args: [B, H, "usize"], result: R },
  cuMemcpyDtoD_v2: { args: [H, H, "usize"], result: R },
  cuMemsetD8_v2: { args: [H, "u8", "usize"], result: R },
  cuMemsetD32_v2: { args: [H, "u32", "usize"], result: R },
  cuMemcpyHtoDAsync_v2: { args: [H, B, "usize", H], result: R },
  cuMemcpyDtoHAsync_v2: { args: [B, H, "usize", H], result: R },
  // The same async copies from/to pinned host memory held as an address (slot and readback buffers).
  cuMemcpyHtoDAsync_ptr: { name: "cuMemcpyHtoDAsync_v2", args: [H, P, "usize", H], result: R },
  cuMemcpyDtoHAsync_ptr: { name: "cuMemcpyDtoHAsync_v2", args: [P, H, "usize", H], result: R },
  cuMemcpyDtoDAsync_v2: { args: [H, H, "usize", H], result: R },
  cuMemsetD8Async: { args: [H, "u8", "usize", H], result: R },
  cuMemsetD32Async: { args: [H, "u32", "usize", H], result: R },
  cuModuleLoadData: { args: [B, B], result: R },
  cuModuleLoadDataEx: { args: [B, B, "u32", B, B], result: R },
  cuModuleGetFunction: { args: [B, H, B], result: R },
  cuModuleGetGlobal_v2: { args: [B, B, H, B], result: R },
  cuModuleUnload: { args: [H], result: R },
  cuFuncGetAttribute: { args: [B, "i32", H], result: R },
  cuFuncSetAttribute: { args: [H, "i32", "i32"], result: R },
  cuLaunchKernel: { args: [H, "u32", "u32", "u32", "u32", "u32", "u32", "u32", H, B, B], result: R },
  // CUDA 12+: launch attributes (programmatic dependent launch); absent on older drivers.
  cuLaunchKernelEx: { args: [B, H, B, B], result: R, optional: true },
  cuStreamCreate: { args: [B, "u32"], result: R },
  cuStreamDestroy_v2: { args: [H], result: R },
  cuStreamSynchronize: { args: [H], result: R },
  cuStreamQuery: { args: [H], result: R },
  cuStreamWaitEvent: { args: [H, H, "u32"], result: R },
  cuStreamBeginCapture_v2: { args: [H, "i32"], result: R },
  cuStreamEndCapture: { args: [H, B], result: R },
  cuStreamIsCapturing: { args: [H, B], result: R },
  cuGraphInstantiateWithFlags: { args: [B, H, "u64"], result: R },
  cuGraphLaunch: { args: [H, H], result: R },
  cuGraphUpload: { args: [H, H], result: R, optional: true },
  cuGraphExecDestroy: { args: [H], result: R },
  cuGraphDestroy: { args: [H], result: R },
  cuGraphGetNodes: { args: [H, B, B], result: R },
  cuEventCreate: { args: [B, "u32"], result: R },
  cuEventRecord: { args: [H, H], result: R },
  cuEventSynchronize: { args: [H], result: R },
  cuEventQuery: { args: [H], result: R },
  // CUDA 12.8+ drivers export _v2 (cuda.h 13 maps cuEventElapsedTime to it); older ones only the first.
  cuEventElapsedTime: { args: [B, H, H], result: R, optional: true },
  cuEventElapsedTime_v2: { args: [B, H, H], result: R, optional: true },
  cuEventDestroy_v2: { args: [H], result: R },
});
export type CudaSymbols = Bound<typeof cudaSymbols>;

export const CUDA_LIBRARY: readonly string[] = ["libcuda.so.1", "libcuda.so"];

// Enumerants (cuda.h).
export const CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1;
export const CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X = 2;
export const CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X = 5;
export const CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8;
export const CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10;
export const CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK = 12;
export const CU_DEVICE_ATTRIBUTE_CLOCK_RATE = 13;
export const CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
export const CU_DEVICE_ATTRIBUTE_INTEGRATED = 18;
export const CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY = 19;
export const CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE = 36;
export const CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH = 37;
export const CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38;
export const CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR = 39;
export const CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41;
export const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
export const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
export const CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81;
export const CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;
export const CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0;
export const CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1;
export const CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3;
export const CU_FUNC_ATTRIBUTE_NUM_REGS = 4;
export const CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
export const CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 9;
export const CU_LIMIT_STACK_SIZE = 0;
export const CU_LIMIT_PRINTF_FIFO_SIZE = 1;
export const CU_LIMIT_MALLOC_HEAP_SIZE = 2;
export const CU_CTX_SCHED_SPIN = 1;
export const CU_CTX_SCHED_YIELD = 2;
export const CU_CTX_SCHED_BLOCKING_SYNC = 4;
export const CU_STREAM_DEFAULT = 0;
export const CU_STREAM_NON_BLOCKING = 1;
export const CU_STREAM_CAPTURE_MODE_GLOBAL = 0;
export const CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1;
export const CU_STREAM_CAPTURE_MODE_RELAXED = 2;
export const CU_STREAM_CAPTURE_STATUS_NONE = 0;
export const CU_STREAM_CAPTURE_STATUS_ACTIVE = 1;
export const CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2;
export const CU_EVENT_DEFAULT = 0;
export const CU_EVENT_BLOCKING_SYNC = 1;
export const CU_EVENT_DISABLE_TIMING = 2;
export const CU_MEMHOSTALLOC_PORTABLE = 1;
export const CU_MEMHOSTALLOC_DEVICEMAP = 2;
export const CU_MEMHOSTALLOC_WRITECOMBINED = 4;
export const CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH = 1;
export const CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD = 2;
export const CU_JIT_INFO_LOG_BUFFER = 3;
export const CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4;
export const CU_JIT_ERROR_LOG_BUFFER = 5;
export const CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6;
export const CU_JIT_OPTIMIZATION_LEVEL = 7;
export const CU_JIT_LOG_VERBOSE = 12;

export const CUDA_SUCCESS = 0;
export const CUDA_ERROR_NOT_READY = 600;

/** CUresult names by value (cuda.h 13.0), used when cuGetErrorName is unavailable or fails. */
export const CUDA_ERROR_NAMES: Readonly<Record<number, string>> = {
  0: "CUDA_SUCCESS", 1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY", 3: "CUDA_ERROR_NOT_INITIALIZED",
  4: "CUDA_ERROR_DEINITIALIZED", 5: "CUDA_ERROR_PROFILER_DISABLED", 34: "CUDA_ERROR_STUB_LIBRARY",
  36: "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER", 46: "CUDA_ERROR_DEVICE_UNAVAILABLE", 100: "CUDA_ERROR_NO_DEVICE",
  101: "CUDA_ERROR_INVALID_DEVICE", 102: "CUDA_ERROR_DEVICE_NOT_LICENSED", 200: "CUDA_ERROR_INVALID_IMAGE",
  201: "CUDA_ERROR_INVALID_CONTEXT", 202: "CUDA_ERROR_CONTEXT_ALREADY_CURRENT", 205: "CUDA_ERROR_MAP_FAILED",
  206: "CUDA_ERROR_UNMAP_FAILED", 209: "CUDA_ERROR_NO_BINARY_FOR_GPU", 214: "CUDA_ERROR_ECC_UNCORRECTABLE",
  215: "CUDA_ERROR_UNSUPPORTED_LIMIT", 216: "CUDA_ERROR_CONTEXT_ALREADY_IN_USE", 218: "CUDA_ERROR_INVALID_PTX",
  220: "CUDA_ERROR_NVLINK_UNCORRECTABLE", 221: "CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
  222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", 223: "CUDA_ERROR_JIT_COMPILATION_DISABLED", 226: "CUDA_ERROR_CONTAINED",
  300: "CUDA_ERROR_INVALID_SOURCE", 301: "CUDA_ERROR_FILE_NOT_FOUND", 302: "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND",
  303: "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED", 304: "CUDA_ERROR_OPERATING_SYSTEM", 400: "CUDA_ERROR_INVALID_HANDLE",
  401: "CUDA_ERROR_ILLEGAL_STATE", 402: "CUDA_ERROR_LOSSY_QUERY", 500: "CUDA_ERROR_NOT_FOUND", 600: "CUDA_ERROR_NOT_READY",
  700: "CUDA_ERROR_ILLEGAL_ADDRESS", 701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", 702: "CUDA_ERROR_LAUNCH_TIMEOUT",
  708: "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", 709: "CUDA_ERROR_CONTEXT_IS_DESTROYED", 710: "CUDA_ERROR_ASSERT",
  714: "CUDA_ERROR_HARDWARE_STACK_ERROR", 715: "CUDA_ERROR_ILLEGAL_INSTRUCTION", 716: "CUDA_ERROR_MISALIGNED_ADDRESS",
  717: "CUDA_ERROR_INVALID_ADDRESS_SPACE", 718: "CUDA_ERROR_INVALID_PC", 719: "CUDA_ERROR_LAUNCH_FAILED",
  720: "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", 721: "CUDA_ERROR_TENSOR_MEMORY_LEAK", 800: "CUDA_ERROR_NOT_PERMITTED",
  801: "CUDA_ERROR_NOT_SUPPORTED", 802: "CUDA_ERROR_SYSTEM_NOT_READY", 803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
  804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", 900: "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
  901: "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", 902: "CUDA_ERROR_STREAM_CAPTURE_MERGE",
  903: "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", 904: "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
  905: "CUDA_ERROR_STREAM_CAPTURE_ISOLATION", 906: "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", 907: "CUDA_ERROR_CAPTURED_EVENT",
  908: "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", 909: "CUDA_ERROR_TIMEOUT", 910: "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE",
  911: "CUDA_ERROR_EXTERNAL_DEVICE", 912: "CUDA_ERROR_INVALID_CLUSTER_SIZE", 913: "CUDA_ERROR_FUNCTION_NOT_LOADED",
  999: "CUDA_ERROR_UNKNOWN",
};
/**
 * Errors after which the context is unusable ("sticky": every later call fails too). A backend maps these
 * to DeviceLost / KernelFault and poisons the context.
 */
export const CUDA_STICKY_ERRORS: ReadonlySet<number> = new Set([214, 220, 700, 710, 714, 715, 716, 717, 718, 719, 720, 999]);

/**
 * A driver call failed. `codeName` is the CUresult's name, e.g. "CUDA_ERROR_ILLEGAL_ADDRESS" (`name` stays
 * "CudaError", as for every Error class here).
 */
export class CudaError extends Error {
  override name = "CudaError";
  constructor(readonly fn: string, readonly code: number, readonly codeName: string, detail = "") {
    super(`${fn} failed: ${codeName} (${code})${detail ? `: ${detail}` : ""}`);
  }
  /** True when the context can no longer be used (see CUDA_STICKY_ERRORS). */
  get sticky(): boolean {
    return CUDA_STICKY_ERRORS.has(this.code);
  }
}

// Struct layouts for callers using the struct-taking entry points (checked by tests/ffi/offsets.c).
export const CUDA_LAUNCH_PARAMS = struct("CUDA_LAUNCH_PARAMS", {
  function: "u64", gridDimX: "u32", gridDimY: "u32", gridDimZ: "u32", blockDimX: "u32", blockDimY: "u32",
  blockDimZ: "u32", sharedMemBytes: "u32", hStream: "u64", kernelParams: "pointer",
});
export const CUDA_KERNEL_NODE_PARAMS = struct("CUDA_KERNEL_NODE_PARAMS", {
  func: "u64", gridDimX: "u32", gridDimY: "u32", gridDimZ: "u32", blockDimX: "u32", blockDimY: "u32",
  blockDimZ: "u32", sharedMemBytes: "u32", kernelParams: "pointer", extra: "pointer", kern: "u64", ctx: "u64",
});
export const CUDA_MEMCPY2D = struct("CUDA_MEMCPY2D", {
  srcXInBytes: "usize", srcY: "usize", srcMemoryType: "u32", srcHost: "pointer", srcDevice: "u64", srcArray: "u64",
  srcPitch: "usize", dstXInBytes: "usize", dstY: "usize", dstMemoryType: "u32", dstHost: "pointer", dstDevice: "u64",
  dstArray: "u64", dstPitch: "usize", WidthInBytes: "usize", Height: "usize",
});

/** Kernel argument types for cuLaunchKernel's void** kernelParams. */
export type KernelArgType = "u8" | "u16" | "u32" | "i32" | "f32" | "u64" | "i64" | "f64" | "pointer";
const ARG_SIZE: Record<KernelArgType, number> = { u8: 1, u16: 2, u32: 4, i32: 4, f32: 4, u64: 8, i64: 8, f64: 8, pointer: 8 };

/**
 * Argument storage for one kernel signature: `values` holds each argument at its natural alignment and
 * `params` is the array of pointers into it that cuLaunchKernel takes. Build once per launch site, `set`
 * values, launch; the driver copies the values at launch (and into a captured graph's node).
 */
export class KernelArgs {
  readonly params: BigUint64Array;
  readonly values: DataView;
  readonly offsets: readonly number[];
  constructor(readonly types: readonly KernelArgType[], init?: readonly (number | bigint)[]) {
    const offsets: number[] = [];
    let off = 0;
    for (const t of types) {
      const s = ARG_SIZE[t];
      off = Math.ceil(off / s) * s;
      offsets.push(off);
      off += s;
    }
    this.offsets = offsets;
    this.values = new DataView(new ArrayBuffer(Math.max(off, 8)));
    this.params = new BigUint64Array(new ArrayBuffer(Math.max(types.length, 1) * 8));
    const base = ptrOf(this.values);
    offsets.forEach((o, i) => (this.params[i] = base + BigInt(o)));
    init?.forEach((v, i) => this.set(i, v));
  }
  set(i: number, v: number | bigint): void {
    const o = this.offsets[i];
    switch (this.types[i]) {
      case "u8":
        return this.values.setUint8(o, Number(v));
      case "u16":
        return this.values.setUint16(o, Number(v), true);
      case "u32":
        return this.values.setUint32(o, Number(v), true);
      case "i32":
        return this.values.setInt32(o, Number(v), true);
      case "f32":
        return this.values.setFloat32(o, Number(v), true);
      case "f64":
        return this.values.setFloat64(o, Number(v), true);
      case "i64":
        return this.values.setBigInt64(o, BigInt(v), true);
      default:
        return this.values.setBigUint64(o, BigInt(v), true);
    }
  }
}

/** Opens libcuda (LibraryNotFound on machines without the NVIDIA driver). Call init() next. */
export function openCuda(names: string | readonly string[] = CUDA_LIBRARY): Cuda {
  return new Cuda(dlopen(names, cudaSymbols));
}

type Dim3 = number | readonly [number, number?, number?];
const dim = (d: Dim3, i: number): number => typeof d === "number" ? (i === 0 ? d : 1) : (d[i] ?? 1);

/** libcuda's functions (`fn`, raw) and thin checked wrappers. Handles and device pointers are bigint. */
export class Cuda {
  readonly fn: CudaSymbols;
  readonly #u64 = new BigUint64Array(new ArrayBuffer(16));
  readonly #i32 = new Int32Array(new ArrayBuffer(4));
  readonly #f32 = new Float32Array(new ArrayBuffer(4));

  constructor(readonly lib: Library<typeof cudaSymbols>) {
    this.fn = lib.symbols;
  }
  close(): void {
    this.lib.close();
  }
  /** The CUresult's name, from the driver when it knows it. */
  errorName(code: number): string {
    const out = new BigUint64Array(1);
    if (this.fn.cuGetErrorName(code, out) === 0 && out[0] !== 0n) return readCString(out[0]);
    return CUDA_ERROR_NAMES[code] ?? `CUresult(${code})`;
  }
  errorString(code: number): string {
    const out = new BigUint64Array(1);
    if (this.fn.cuGetErrorString(code, out) === 0 && out[0] !== 0n) return readCString(out[0]);
    return "";
  }
  check(fn: string, code: number, detail = ""): void {
    if (code !== 0) throw new CudaError(fn, code, this.errorName(code), detail || this.errorString(code));
  }
  #h(fn: string, code: number): bigint {
    this.check(fn, code);
    return this.#u64[0];
  }
  #int(fn: string, code: number): number {
    this.check(fn, code);
    return this.#i32[0];
  }

  init(flags = 0): void {
    this.check("cuInit", this.fn.cuInit(flags));
  }
  /** e.g. 13000 for CUDA 13.0. */
  driverVersion(): number {
    return this.#int("cuDriverGetVersion", this.fn.cuDriverGetVersion(this.#i32));
  }
  deviceCount(): number {
    return this.#int("cuDeviceGetCount", this.fn.cuDeviceGetCount(this.#i32));
  }
  device(ordinal: number): number {
    return this.#int("cuDeviceGet", this.fn.cuDeviceGet(this.#i32, ordinal));
  }
  deviceName(dev: number): string {
    const buf = new Uint8Array(256);
    this.check("cuDeviceGetName", this.fn.cuDeviceGetName(buf, buf.length, dev));
    return new TextDecoder().decode(buf.subarray(0, Math.max(buf.indexOf(0), 0)));
  }
  deviceAttribute(attr: number, dev: number): number {
    return this.#int("cuDeviceGetAttribute", this.fn.cuDeviceGetAttribute(this.#i32, attr, dev));
  }
  deviceTotalMem(dev: number): bigint {
    return this.#h("cuDeviceTotalMem_v2", this.fn.cuDeviceTotalMem_v2(this.#u64, dev));
  }
  primaryCtxRetain(dev: number): bigint {
    return this.#h("cuDevicePrimaryCtxRetain", this.fn.cuDevicePrimaryCtxRetain(this.#u64, dev));
  }
  primaryCtxRelease(dev: number): void {
    this.check("cuDevicePrimaryCtxRelease_v2", this.fn.cuDevicePrimaryCtxRelease_v2(dev));
  }
  /** Destroys the primary context's resources (and a sticky error with them); the next retain makes a new one. */
  primaryCtxReset(dev: number): void {
    this.check("cuDevicePrimaryCtxReset_v2", this.fn.cuDevicePrimaryCtxReset_v2(dev));
  }
  /** Scheduling flags (CU_CTX_SCHED_*) of the primary context; before it is first retained. */
  primaryCtxSetFlags(dev: number, flags: number): void {
    this.check("cuDevicePrimaryCtxSetFlags_v2", this.fn.cuDevicePrimaryCtxSetFlags_v2(dev, flags));
  }
  ctxSetCurrent(ctx: bigint): void {
    this.check("cuCtxSetCurrent", this.fn.cuCtxSetCurrent(ctx));
  }
  ctxGetCurrent(): bigint {
    return this.#h("cuCtxGetCurrent", this.fn.cuCtxGetCurrent(this.#u64));
  }
  ctxSynchronize(): void {
    this.check("cuCtxSynchronize", this.fn.cuCtxSynchronize());
  }
  ctxGetLimit(limit: number): bigint {
    return this.#h("cuCtxGetLimit", this.fn.cuCtxGetLimit(this.#u64, limit));
  }
  ctxSetLimit(limit: number, value: bigint | number): void {
    this.check("cuCtxSetLimit", this.fn.cuCtxSetLimit(limit, value));
  }
  memGetInfo(): { free: bigint; total: bigint } {
    const out = new BigUint64Array(2);
    this.check("cuMemGetInfo_v2", this.fn.cuMemGetInfo_v2(out.subarray(0, 1), out.subarray(1, 2)));
    return { free: out[0], total: out[1] };
  }

  // --- memory --------------------------------------------------------------------------------------------
  memAlloc(bytes: bigint | number): bigint {
    return this.#h("cuMemAlloc_v2", this.fn.cuMemAlloc_v2(this.#u64, bytes));
  }
  memFree(dptr: bigint): void {
    this.check("cuMemFree_v2", this.fn.cuMemFree_v2(dptr));
  }
  /** Page-locked host memory (view it with ptrView); copies from it can be async and captured. */
  memAllocHost(bytes: bigint | number): Pointer {
    return this.#h("cuMemAllocHost_v2", this.fn.cuMemAllocHost_v2(this.#u64, bytes));
  }
  memHostAlloc(bytes: bigint | number, flags: number): Pointer {
    return this.#h("cuMemHostAlloc", this.fn.cuMemHostAlloc(this.#u64, bytes, flags));
  }
  memFreeHost(p: Pointer): void {
    this.check("cuMemFreeHost", this.fn.cuMemFreeHost(p));
  }
  /** The device address of mapped pinned memory (CU_MEMHOSTALLOC_DEVICEMAP). */
  memHostGetDevicePointer(p: Pointer): bigint {
    return this.#h("cuMemHostGetDevicePointer_v2", this.fn.cuMemHostGetDevicePointer_v2(this.#u64, p, 0));
  }
  memcpyHtoD(dst: bigint, src: ArrayBufferView, bytes: number = src.byteLength): void {
    this.check("cuMemcpyHtoD_v2", this.fn.cuMemcpyHtoD_v2(dst, src, bytes));
  }
  memcpyDtoH(dst: ArrayBufferView, src: bigint, bytes: number = dst.byteLength): void {
    this.check("cuMemcpyDtoH_v2", this.fn.cuMemcpyDtoH_v2(dst, src, bytes));
  }
  memcpyDtoD(dst: bigint, src: bigint, bytes: bigint | number): void {
    this.check("cuMemcpyDtoD_v2", this.fn.cuMemcpyDtoD_v2(dst, src, bytes));
  }
  memsetD8(dst: bigint, value: number, count: bigint | number): void {
    this.check("cuMemsetD8_v2", this.fn.cuMemsetD8_v2(dst, value, count));
  }
  memsetD32(dst: bigint, value: number, count: bigint | number): void {
    this.check("cuMemsetD32_v2", this.fn.cuMemsetD32_v2(dst, value >>> 0, count));
  }
  /**
   * Async host->device copy. `src` is pinned memory by address, or a JS array that must stay unchanged and
   * reachable until the stream passes the copy (pageable sources are staged by the driver).
   */
  memcpyHtoDAsync(dst: bigint, src: ArrayBufferView | Pointer, bytes: bigint | number, stream: bigint): void {
    const r = typeof src === "bigint" ? this.fn.cuMemcpyHtoDAsync_ptr(dst, src, bytes, stream) : this.fn.cuMemcpyHtoDAsync_v2(dst, src, bytes, stream);
    this.check("cuMemcpyHtoDAsync_v2", r);
  }
  /** Async device->host copy into pinned memory by address, or a JS array read only after the stream syncs. */
  memcpyDtoHAsync(dst: ArrayBufferView | Pointer, src: bigint, bytes: bigint | number, stream: bigint): void {
    const r = typeof dst === "bigint" ? this.fn.cuMemcpyDtoHAsync_ptr(dst, src, bytes, stream) : this.fn.cuMemcpyDtoHAsync_v2(dst, src, bytes, stream);
    this.check("cuMemcpyDtoHAsync_v2", r);
  }
  memcpyDtoDAsync(dst: bigint, src: bigint, bytes: bigint | number, stream: bigint): void {
    this.check("cuMemcpyDtoDAsync_v2", this.fn.cuMemcpyDtoDAsync_v2(dst, src, bytes, stream));
  }
  memsetD8Async(dst: bigint, value: number, count: bigint | number, stream: bigint): void {
    this.check("cuMemsetD8Async", this.fn.cuMemsetD8Async(dst, value, count, stream));
  }
  memsetD32Async(dst: bigint, value: number, count: bigint | number, stream: bigint): void {
    this.check("cuMemsetD32Async", this.fn.cuMemsetD32Async(dst, value >>> 0, count, stream));
  }

  // --- modules and launch --------------------------------------------------------------------------------
  /** Loads PTX text (JIT-compiled for the device) or a cubin/fatbin image. */
  moduleLoadData(image: string | Uint8Array): bigint {
    return this.#h("cuModuleLoadData", this.fn.cuModuleLoadData(this.#u64, typeof image === "string" ? cstr(image) : image));
  }
  /** Like moduleLoadData, with the JIT's info and error logs (the error log goes into the CudaError). */
  moduleLoadDataEx(image: string | Uint8Array, logBytes = 16384): { module: bigint; infoLog: string } {
    const info = new Uint8Array(logBytes);
    const error = new Uint8Array(logBytes);
    const opts = new Int32Array([CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES]);
    // Option values are void*-sized slots; the size options hold their value in the slot itself.
    const vals = new BigUint64Array([ptrOf(info), BigInt(logBytes), ptrOf(error), BigInt(logBytes)]);
    const out = new BigUint64Array(1);
    const r = this.fn.cuModuleLoadDataEx(out, typeof image === "string" ? cstr(image) : image, opts.length, opts, vals);
    const text = (b: Uint8Array) => new TextDecoder().decode(b.subarray(0, Math.max(b.indexOf(0), 0)));
    if (r !== 0) throw new CudaError("cuModuleLoadDataEx", r, this.errorName(r), text(error));
    return { module: out[0], infoLog: text(info) };
  }
  moduleGetFunction(module: bigint, name: string): bigint {
    return this.#h("cuModuleGetFunction", this.fn.cuModuleGetFunction(this.#u64, module, cstr(name)));
  }
  /** A module-scope __device__ variable: its device address and size. */
  moduleGetGlobal(module: bigint, name: string): { ptr: bigint; bytes: bigint } {
    const out = new BigUint64Array(2);
    this.check("cuModuleGetGlobal_v2", this.fn.cuModuleGetGlobal_v2(out.subarray(0, 1), out.subarray(1, 2), module, cstr(name)));
    return { ptr: out[0], bytes: out[1] };
  }
  moduleUnload(module: bigint): void {
    this.check("cuModuleUnload", this.fn.cuModuleUnload(module));
  }
  funcGetAttribute(attr: number, func: bigint): number {
    return this.#int("cuFuncGetAttribute", this.fn.cuFuncGetAttribute(this.#i32, attr, func));
  }
  funcSetAttribute(func: bigint, attr: number, value: number): void {
    this.check("cuFuncSetAttribute", this.fn.cuFuncSetAttribute(func, attr, value));
  }
  /** cuLaunchKernel with kernelParams from KernelArgs (or a raw void*[]); enqueued on `stream`. */
  launchKernel(func: bigint, grid: Dim3, block: Dim3, sharedBytes: number, stream: bigint, args: KernelArgs | BigUint64Array | null): void {
    const params = args instanceof KernelArgs ? args.params : args;
    this.check("cuLaunchKernel", this.fn.cuLaunchKernel(func, dim(grid, 0), dim(grid, 1), dim(grid, 2), dim(block, 0), dim(block, 1), dim(block, 2), sharedBytes, stream, params, null));
  }

  // --- streams, capture, graphs --------------------------------------------------------------------------
  streamCreate(flags: number = CU_STREAM_NON_BLOCKING): bigint {
    return this.#h("cuStreamCreate", this.fn.cuStreamCreate(this.#u64, flags));
  }
  streamDestroy(stream: bigint): void {
    this.check("cuStreamDestroy_v2", this.fn.cuStreamDestroy_v2(stream));
  }
  streamSynchronize(stream: bigint): void {
    this.check("cuStreamSynchronize", this.fn.cuStreamSynchronize(stream));
  }
  /** true when all work on the stream is done; false while it runs (CUDA_ERROR_NOT_READY). */
  streamQuery(stream: bigint): boolean {
    const r = this.fn.cuStreamQuery(stream);
    if (r === CUDA_ERROR_NOT_READY) return false;
    this.check("cuStreamQuery", r);
    return true;
  }
  streamWaitEvent(stream: bigint, event: bigint): void {
    this.check("cuStreamWaitEvent", this.fn.cuStreamWaitEvent(stream, event, 0));
  }
  streamBeginCapture(stream: bigint, mode: number = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL): void {
    this.check("cuStreamBeginCapture_v2", this.fn.cuStreamBeginCapture_v2(stream, mode));
  }
  /** Ends capture and returns the captured CUgraph. */
  streamEndCapture(stream: bigint): bigint {
    return this.#h("cuStreamEndCapture", this.fn.cuStreamEndCapture(stream, this.#u64));
  }
  /** CU_STREAM_CAPTURE_STATUS_NONE / _ACTIVE / _INVALIDATED. */
  streamIsCapturing(stream: bigint): number {
    return this.#int("cuStreamIsCapturing", this.fn.cuStreamIsCapturing(stream, this.#i32));
  }
  graphInstantiate(graph: bigint, flags: bigint | number = 0n): bigint {
    return this.#h("cuGraphInstantiateWithFlags", this.fn.cuGraphInstantiateWithFlags(this.#u64, graph, flags));
  }
  graphNodeCount(graph: bigint): number {
    const n = new BigUint64Array(1);
    this.check("cuGraphGetNodes", this.fn.cuGraphGetNodes(graph, null, n));
    return Number(n[0]);
  }
  /** The replay: one call per token on the PTX backend. */
  graphLaunch(exec: bigint, stream: bigint): void {
    this.check("cuGraphLaunch", this.fn.cuGraphLaunch(exec, stream));
  }
  graphUpload(exec: bigint, stream: bigint): void {
    const f = this.fn.cuGraphUpload;
    if (f) this.check("cuGraphUpload", f(exec, stream));
  }
  graphExecDestroy(exec: bigint): void {
    this.check("cuGraphExecDestroy", this.fn.cuGraphExecDestroy(exec));
  }
  graphDestroy(graph: bigint): void {
    this.check("cuGraphDestroy", this.fn.cuGraphDestroy(graph));
  }

  // --- events --------------------------------------------------------------------------------------------
  eventCreate(flags: number = CU_EVENT_DEFAULT): bigint {
    return this.#h("cuEventCreate", this.fn.cuEventCreate(this.#u64, flags));
  }
  eventRecord(event: bigint, stream: bigint): void {
    this.check("cuEventRecord", this.fn.cuEventRecord(event, stream));
  }
  eventSynchronize(event: bigint): void {
    this.check("cuEventSynchronize", this.fn.cuEventSynchronize(event));
  }
  /** true once the event has completed; false while pending. */
  eventQuery(event: bigint): boolean {
    const r = this.fn.cuEventQuery(event);
    if (r === CUDA_ERROR_NOT_READY) return false;
    this.check("cuEventQuery", r);
    return true;
  }
  /** Milliseconds between two completed events. */
  eventElapsedTime(start: bigint, end: bigint): number {
    const f = this.fn.cuEventElapsedTime_v2 ?? this.fn.cuEventElapsedTime;
    if (!f) throw new CudaError("cuEventElapsedTime", 500, "CUDA_ERROR_NOT_FOUND", "neither cuEventElapsedTime_v2 nor cuEventElapsedTime is exported");
    this.check("cuEventElapsedTime", f(this.#f32, start, end));
    return this.#f32[0];
  }
  eventDestroy(event: bigint): void {
    this.check("cuEventDestroy_v2", this.fn.cuEventDestroy_v2(event));
  }
}
