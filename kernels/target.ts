// What a target can do. Backends report it (Executor.targetSet); the kernel library and renderers read it to
// pick a variant (a subgroup reduction or a shared-memory one, 16-bit storage or 32-bit words).

/**
 * Every backend, the one list (the CLI's choices, "auto"'s order, the test devices, the renderer registry all
 * derive from it), fastest first: the order "auto" tries them in.
 */
export const BACKENDS = ["ptx", "rocm", "vulkan", "wgpu", "js"] as const;
export type Backend = (typeof BACKENDS)[number];

export interface Caps {
  /** Subgroup (warp/wave) arithmetic, shuffles and ballots are available, at this size (0 when absent). */
  subgroups: boolean;
  subgroupSize: number;
  /** f16 arithmetic in shaders. */
  f16: boolean;
  /** 16-bit and 8-bit element loads/stores in storage buffers (otherwise renderers emulate through u32 words). */
  storage16: boolean;
  storage8: boolean;
  /** A failed check traps (ptx, rocm) rather than setting a fault word (vulkan, wgpu). */
  trap: boolean;
  maxWorkgroupSize: number;
  maxWorkgroupsPerDim: [number, number, number];
  maxSharedBytes: number;
  /** Largest byte range one storage binding may cover. */
  maxBindingBytes: number;
  /** Storage bindings one kernel may declare, a renderer's own (the fault word) included; absent: no limit that matters. */
  maxStorageBuffers?: number;
  /** Byte alignment of a binding's offset into a buffer. */
  bindingAlign: number;
  /**
   * Each dispatch that depends on the one before pays a launch and a drain of several µs (Vulkan and WebGPU:
   * 4-7 µs on the H200, where PTX's programmatic dependent launch overlaps them). The lowering then folds split
   * reductions' combine into their own last team (one dispatch, not two): decode attention and the vocab argmax.
   */
  dispatchGap: boolean;
  /**
   * Warp matrix multiply-accumulate tiles (kernels/ir_data.ts MmaStmt: m16n8k16, bf16/f16 in, f32 accumulate) in
   * 32-lane subgroups; absent (false) everywhere but PTX on sm_80+, where the library keeps its plain kernels.
   */
  mma?: boolean;
  /**
   * Cooperative matrices (kernels/ir_data.ts CoopStmt): subgroup-scope 16 x 16 x 16 multiply-adds with f32
   * accumulators, per input type the device offers. Vulkan where VK_KHR_cooperative_matrix lists that size
   * (bf16 with VK_KHR_shader_bfloat16) and the Vulkan memory model is there; absent elsewhere.
   */
  coop?: { bf16: boolean; f16: boolean };
  /**
   * The device records collectives between the ranks of its tensor-parallel group in its own step list
   * (Program steps of kind "collective": NCCL calls inside each rank's CUDA graph). Absent everywhere but a
   * PTX rank whose group opened NCCL communicators (backends/ptx/nccl.ts).
   */
  collectives?: boolean;
  /**
   * Shared-memory staging statements (kernels/ir_data.ts CpAsyncStmt, LdMatrixStmt: cp.async global -> shared and
   * ldmatrix); PTX on sm_80+ only, absent elsewhere.
   */
  staging?: boolean;
  /**
   * Warpgroup matrix multiply-accumulate from shared memory (kernels/ir_data.ts WgmmaStmt: PTX wgmma.mma_async,
   * sm_90a). PTX on sm_90 exactly (Hopper; later GPUs have other instructions); absent elsewhere.
   */
  wgmma?: boolean;
  /**
   * Default the decode gemv's integer path (int8 x, BinOp dot4; kernels/lower/gemv.ts): the device has a native
   * int8x4 dot that is fast. PTX on sm_61+ (dp4a); Vulkan where the driver reports the 4x8 packed signed dot
   * product as accelerated (NVIDIA; not lavapipe); wgpu on a GPU (not a CPU adapter) whose WGSL has
   * dot4I8Packed. On SPIR-V and WGSL it comes only with dot4Native.
   */
  dot4?: boolean;
  /**
   * The kernel language has a native int8x4 dot the renderer emits for BinOp dot4 (SPIR-V OpSDot with the
   * packed 4x8 format, WGSL dot4I8Packed); without it the renderer decomposes it (kernels/decomp/arith.ts).
   * Exact either way; it says nothing about speed (dot4 does). The PTX and JS renderers ignore it (always native).
   */
  dot4Native?: boolean;
}

export interface TargetSet {
  backend: Backend;
  /** The device's own name, e.g. "NVIDIA H200" or "llvmpipe (LLVM 15.0.6, 256 bits)". */
  device: string;
  caps: Caps;
  memory: { totalBytes: number; freeBytes?: number };
  /** Work units (Dispatch.work.bytes) one submission may carry before a watchdog could fire; 0 = no budget. */
  watchdogBudget: number;
}

/** Capabilities of the plain-JavaScript target: everything emulated exactly, one lane per subgroup-less invocation. */
export const JS_CAPS: Caps = {
  subgroups: true,
  subgroupSize: 32,
  f16: false,
  storage16: true,
  storage8: true,
  trap: true,
  maxWorkgroupSize: 1024,
  maxWorkgroupsPerDim: [2 ** 31 - 1, 65535, 65535],
  maxSharedBytes: 48 * 1024,
  maxBindingBytes: 2 ** 31,
  bindingAlign: 16,
  dispatchGap: false,
};
