// libhsa-runtime64 (ROCr): init, agents, regions and AMD memory pools, queues with their error callback,
// signals, code object readers and executables, the system event handler; AQL packet layouts. HSA's
// one-field handle structs (hsa_agent_t, hsa_signal_t ...) travel by value as u64, which is the same ABI.

import { type Bound, type Callback, callback, cstr, defineSymbols, dlopen, type Library, type Pointer, ptrView, readCString, cstringFrom } from "./lib.ts";
import { array, decode, type Decoded, struct } from "./layout.ts";

const H = "u64" as const; // hsa_agent_t, hsa_region_t, hsa_signal_t, hsa_executable_t ... (struct {uint64_t handle})
const B = "buffer" as const;
const P = "pointer" as const;
const F = "function" as const;
const S = "u32" as const; // hsa_status_t

export const hsaSymbols = defineSymbols({
  hsa_init: { args: [], result: S },
  hsa_shut_down: { args: [], result: S },
  hsa_status_string: { args: [S, B], result: S },
  hsa_system_get_info: { args: ["u32", B], result: S },
  hsa_iterate_agents: { args: [F, P], result: S },
  hsa_agent_get_info: { args: [H, "u32", B], result: S },
  hsa_agent_iterate_regions: { args: [H, F, P], result: S },
  hsa_agent_iterate_isas: { args: [H, F, P], result: S },
  hsa_isa_get_info_alt: { args: [H, "u32", B], result: S },
  hsa_region_get_info: { args: [H, "u32", B], result: S },
  hsa_memory_allocate: { args: [H, "usize", B], result: S },
  hsa_memory_free: { args: [P], result: S },
  hsa_memory_copy: { args: [P, P, "usize"], result: S },
  hsa_amd_agent_iterate_memory_pools: { args: [H, F, P], result: S },
  hsa_amd_memory_pool_get_info: { args: [H, "u32", B], result: S },
  hsa_amd_memory_pool_allocate: { args: [H, "usize", "u32", B], result: S },
  hsa_amd_memory_pool_free: { args: [P], result: S },
  hsa_amd_agents_allow_access: { args: ["u32", B, B, P], result: S },
  hsa_amd_memory_fill: { args: [P, "u32", "usize"], result: S },
  hsa_amd_memory_async_copy: { args: [P, H, P, H, "usize", "u32", B, H], result: S },
  hsa_queue_create: { args: [H, "u32", "u32", F, P, "u32", "u32", B], result: S },
  hsa_queue_destroy: { args: [P], result: S },
  hsa_queue_load_read_index_scacquire: { args: [P], result: "u64" },
  hsa_queue_load_write_index_relaxed: { args: [P], result: "u64" },
  hsa_queue_add_write_index_screlease: { args: [P, "u64"], result: "u64" },
  hsa_queue_store_write_index_screlease: { args: [P, "u64"], result: "void" },
  hsa_signal_create: { args: ["i64", "u32", B, B], result: S },
  hsa_signal_destroy: { args: [H], result: S },
  hsa_signal_load_scacquire: { args: [H], result: "i64" },
  hsa_signal_load_relaxed: { args: [H], result: "i64" },
  hsa_signal_store_screlease: { args: [H, "i64"], result: "void" },
  hsa_signal_store_relaxed: { args: [H, "i64"], result: "void" },
  hsa_signal_silent_store_relaxed: { args: [H, "i64"], result: "void" },
  hsa_signal_add_screlease: { args: [H, "i64"], result: "void" },
  hsa_signal_wait_scacquire: { args: [H, "u32", "i64", "u64", "u32"], result: "i64" },
  hsa_code_object_reader_create_from_memory: { args: [B, "usize", B], result: S },
  hsa_code_object_reader_destroy: { args: [H], result: S },
  hsa_executable_create_alt: { args: ["u32", "u32", B, B], result: S },
  hsa_executable_load_agent_code_object: { args: [H, H, H, B, B], result: S },
  hsa_executable_freeze: { args: [H, B], result: S },
  hsa_executable_destroy: { args: [H], result: S },
  hsa_executable_get_symbol_by_name: { args: [H, B, B, B], result: S },
  hsa_executable_symbol_get_info: { args: [H, "u32", B], result: S },
  hsa_amd_register_system_event_handler: { args: [F, P], result: S },
  hsa_amd_profiling_set_profiler_enabled: { args: [P, "i32"], result: S },
  hsa_amd_profiling_get_dispatch_time: { args: [H, H, B], result: S },
});
export type HsaSymbols = Bound<typeof hsaSymbols>;

export const HSA_LIBRARY: readonly string[] = ["libhsa-runtime64.so.1", "libhsa-runtime64.so"];

// Enumerants (hsa.h, hsa_ext_amd.h).
export const HSA_STATUS_SUCCESS = 0;
export const HSA_STATUS_INFO_BREAK = 1;
export const HSA_STATUS_ERROR_OUT_OF_RESOURCES = 0x1008;
export const HSA_STATUS_ERROR_NOT_INITIALIZED = 0x100b;
export const HSA_SYSTEM_INFO_VERSION_MAJOR = 0;
export const HSA_SYSTEM_INFO_VERSION_MINOR = 1;
export const HSA_SYSTEM_INFO_TIMESTAMP = 2;
export const HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY = 3;
export const HSA_AGENT_INFO_NAME = 0;
export const HSA_AGENT_INFO_VENDOR_NAME = 1;
export const HSA_AGENT_INFO_FEATURE = 2;
export const HSA_AGENT_INFO_PROFILE = 4;
export const HSA_AGENT_INFO_WAVEFRONT_SIZE = 6;
export const HSA_AGENT_INFO_WORKGROUP_MAX_DIM = 7;
export const HSA_AGENT_INFO_WORKGROUP_MAX_SIZE = 8;
export const HSA_AGENT_INFO_GRID_MAX_DIM = 9;
export const HSA_AGENT_INFO_GRID_MAX_SIZE = 10;
export const HSA_AGENT_INFO_QUEUE_MAX_SIZE = 14;
export const HSA_AGENT_INFO_DEVICE = 17;
export const HSA_AGENT_INFO_ISA = 19;
export const HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT = 0xa002;
export const HSA_AMD_AGENT_INFO_PRODUCT_NAME = 0xa009;
export const HSA_DEVICE_TYPE_CPU = 0;
export const HSA_DEVICE_TYPE_GPU = 1;
export const HSA_AGENT_FEATURE_KERNEL_DISPATCH = 1;
export const HSA_ISA_INFO_NAME_LENGTH = 0;
export const HSA_ISA_INFO_NAME = 1;
export const HSA_REGION_INFO_SEGMENT = 0;
export const HSA_REGION_INFO_GLOBAL_FLAGS = 1;
export const HSA_REGION_INFO_SIZE = 2;
export const HSA_REGION_INFO_RUNTIME_ALLOC_ALLOWED = 5;
export const HSA_REGION_SEGMENT_GLOBAL = 0;
export const HSA_REGION_GLOBAL_FLAG_KERNARG = 1;
export const HSA_REGION_GLOBAL_FLAG_FINE_GRAINED = 2;
export const HSA_REGION_GLOBAL_FLAG_COARSE_GRAINED = 4;
export const HSA_AMD_SEGMENT_GLOBAL = 0;
export const HSA_AMD_SEGMENT_GROUP = 3;
export const HSA_AMD_MEMORY_POOL_INFO_SEGMENT = 0;
export const HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS = 1;
export const HSA_AMD_MEMORY_POOL_INFO_SIZE = 2;
export const HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED = 5;
export const HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_GRANULE = 6;
export const HSA_AMD_MEMORY_POOL_INFO_ACCESSIBLE_BY_ALL = 15;
export const HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT = 1;
export const HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED = 2;
export const HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED = 4;
export const HSA_QUEUE_TYPE_MULTI = 0;
export const HSA_QUEUE_TYPE_SINGLE = 1;
export const HSA_SIGNAL_CONDITION_EQ = 0;
export const HSA_SIGNAL_CONDITION_NE = 1;
export const HSA_SIGNAL_CONDITION_LT = 2;
export const HSA_SIGNAL_CONDITION_GTE = 3;
export const HSA_WAIT_STATE_BLOCKED = 0;
export const HSA_WAIT_STATE_ACTIVE = 1;
export const HSA_PACKET_TYPE_VENDOR_SPECIFIC = 0;
export const HSA_PACKET_TYPE_INVALID = 1;
export const HSA_PACKET_TYPE_KERNEL_DISPATCH = 2;
export const HSA_PACKET_TYPE_BARRIER_AND = 3;
export const HSA_PACKET_TYPE_AGENT_DISPATCH = 4;
export const HSA_PACKET_TYPE_BARRIER_OR = 5;
export const HSA_PACKET_HEADER_TYPE = 0;
export const HSA_PACKET_HEADER_BARRIER = 8;
export const HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE = 9;
export const HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE = 11;
export const HSA_FENCE_SCOPE_NONE = 0;
export const HSA_FENCE_SCOPE_AGENT = 1;
export const HSA_FENCE_SCOPE_SYSTEM = 2;
export const HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS = 0;
export const HSA_PROFILE_BASE = 0;
export const HSA_PROFILE_FULL = 1;
export const HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT = 0;
export const HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE = 11;
export const HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT = 12;
export const HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE = 13;
export const HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE = 14;
export const HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT = 22;
export const HSA_AMD_GPU_MEMORY_FAULT_EVENT = 0;

/** hsa_status_t names by value. */
export const HSA_STATUS_NAMES: Readonly<Record<number, string>> = {
  0x0: "HSA_STATUS_SUCCESS", 0x1: "HSA_STATUS_INFO_BREAK", 0x1000: "HSA_STATUS_ERROR",
  0x1001: "HSA_STATUS_ERROR_INVALID_ARGUMENT", 0x1002: "HSA_STATUS_ERROR_INVALID_QUEUE_CREATION",
  0x1003: "HSA_STATUS_ERROR_INVALID_ALLOCATION", 0x1004: "HSA_STATUS_ERROR_INVALID_AGENT",
  0x1005: "HSA_STATUS_ERROR_INVALID_REGION", 0x1006: "HSA_STATUS_ERROR_INVALID_SIGNAL",
  0x1007: "HSA_STATUS_ERROR_INVALID_QUEUE", 0x1008: "HSA_STATUS_ERROR_OUT_OF_RESOURCES",
  0x1009: "HSA_STATUS_ERROR_INVALID_PACKET_FORMAT", 0x100a: "HSA_STATUS_ERROR_RESOURCE_FREE",
  0x100b: "HSA_STATUS_ERROR_NOT_INITIALIZED", 0x100c: "HSA_STATUS_ERROR_REFCOUNT_OVERFLOW",
  0x100d: "HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS", 0x100e: "HSA_STATUS_ERROR_INVALID_INDEX",
  0x100f: "HSA_STATUS_ERROR_INVALID_ISA", 0x1010: "HSA_STATUS_ERROR_INVALID_CODE_OBJECT",
  0x1011: "HSA_STATUS_ERROR_INVALID_EXECUTABLE", 0x1012: "HSA_STATUS_ERROR_FROZEN_EXECUTABLE",
  0x1013: "HSA_STATUS_ERROR_INVALID_SYMBOL_NAME", 0x1014: "HSA_STATUS_ERROR_VARIABLE_ALREADY_DEFINED",
  0x1015: "HSA_STATUS_ERROR_VARIABLE_UNDEFINED", 0x1016: "HSA_STATUS_ERROR_EXCEPTION",
  0x1017: "HSA_STATUS_ERROR_INVALID_ISA_NAME", 0x1018: "HSA_STATUS_ERROR_INVALID_CODE_SYMBOL",
  0x1019: "HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL", 0x1020: "HSA_STATUS_ERROR_INVALID_FILE",
  0x1021: "HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER", 0x1022: "HSA_STATUS_ERROR_INVALID_CACHE",
  0x1023: "HSA_STATUS_ERROR_INVALID_WAVEFRONT", 0x1024: "HSA_STATUS_ERROR_INVALID_SIGNAL_GROUP",
  0x1025: "HSA_STATUS_ERROR_INVALID_RUNTIME_STATE", 0x1026: "HSA_STATUS_ERROR_FATAL",
  40: "HSA_STATUS_ERROR_INVALID_MEMORY_POOL", 41: "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION",
  42: "HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION", 43: "HSA_STATUS_ERROR_MEMORY_FAULT", 44: "HSA_STATUS_CU_MASK_REDUCED",
};
export function hsaStatusName(code: number): string {
  return HSA_STATUS_NAMES[code] ?? `hsa_status_t(0x${code.toString(16)})`;
}

/** A status as a value: what hsa_init gives on a machine with no device, where throwing would be wrong. */
export interface HsaStatus {
  readonly ok: boolean;
  readonly code: number;
  readonly codeName: string;
}
/** An HSA call failed. */
export class HsaError extends Error {
  override name = "HsaError";
  readonly codeName: string;
  constructor(readonly fn: string, readonly code: number, detail = "") {
    super(`${fn} failed: ${hsaStatusName(code)} (0x${code.toString(16)})${detail ? `: ${detail}` : ""}`);
    this.codeName = hsaStatusName(code);
  }
}

// AQL packets and runtime structs (hsa.h, HSA_LARGE_MODEL; checked by tests/ffi/offsets.c).
export const hsa_queue_t = struct("hsa_queue_t", {
  type: "u32", features: "u32", base_address: "pointer", doorbell_signal: "u64", size: "u32", reserved1: "u32", id: "u64",
});
export const hsa_kernel_dispatch_packet_t = struct("hsa_kernel_dispatch_packet_t", {
  header: "u16", setup: "u16", workgroup_size_x: "u16", workgroup_size_y: "u16", workgroup_size_z: "u16", reserved0: "u16",
  grid_size_x: "u32", grid_size_y: "u32", grid_size_z: "u32", private_segment_size: "u32", group_segment_size: "u32",
  kernel_object: "u64", kernarg_address: "pointer", reserved2: "u64", completion_signal: "u64",
});
export const hsa_agent_dispatch_packet_t = struct("hsa_agent_dispatch_packet_t", {
  header: "u16", type: "u16", reserved0: "u32", return_address: "pointer", arg: array("u64", 4), reserved2: "u64",
  completion_signal: "u64",
});
export const hsa_barrier_and_packet_t = struct("hsa_barrier_and_packet_t", {
  header: "u16", reserved0: "u16", reserved1: "u32", dep_signal: array("u64", 5), reserved2: "u64", completion_signal: "u64",
});
export const hsa_barrier_or_packet_t = struct("hsa_barrier_or_packet_t", {
  header: "u16", reserved0: "u16", reserved1: "u32", dep_signal: array("u64", 5), reserved2: "u64", completion_signal: "u64",
});
export const hsa_amd_vendor_packet_header_t = struct("hsa_amd_vendor_packet_header_t", { header: "u16", AmdFormat: "u8", reserved: "u8" });
export const hsa_amd_barrier_value_packet_t = struct("hsa_amd_barrier_value_packet_t", {
  header: hsa_amd_vendor_packet_header_t, reserved0: "u32", signal: "u64", value: "i64", mask: "i64", cond: "u32",
  reserved1: "u32", reserved2: "u64", reserved3: "u64", completion_signal: "u64",
});
export const hsa_amd_gpu_memory_fault_info_t = struct("hsa_amd_gpu_memory_fault_info_t", {
  agent: "u64", virtual_address: "u64", fault_reason_mask: "u32",
});
/** hsa_amd_event_t: its anonymous union has one member, so memory_fault sits at the union's offset. */
export const hsa_amd_event_t = struct("hsa_amd_event_t", { event_type: "u32", memory_fault: hsa_amd_gpu_memory_fault_info_t });
export const hsa_amd_profiling_dispatch_time_t = struct("hsa_amd_profiling_dispatch_time_t", { start: "u64", end: "u64" });

/** An AQL packet header word: type, barrier bit, acquire and release fence scopes. */
export function aqlHeader(type: number, o: { barrier?: boolean; acquire?: number; release?: number } = {}): number {
  return (type << HSA_PACKET_HEADER_TYPE) | ((o.barrier ? 1 : 0) << HSA_PACKET_HEADER_BARRIER) |
    ((o.acquire ?? HSA_FENCE_SCOPE_SYSTEM) << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) |
    ((o.release ?? HSA_FENCE_SCOPE_SYSTEM) << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE);
}

/**
 * Writes a 64-byte AQL packet into queue slot `index` of the ring (a view of hsa_queue_t.base_address):
 * bytes 4..63 first, then header|setup<<16 as one atomic 32-bit store, which is what hands it to the
 * packet processor. `packet` is a packed packet (pack(hsa_kernel_dispatch_packet_t, ...)); its first 4 bytes
 * are ignored.
 */
export function writeAqlPacket(ring: ArrayBuffer, ringPackets: number, index: bigint, packet: Uint8Array, header: number, setup = 0): void {
  const slot = Number(index % BigInt(ringPackets)) * 64;
  new Uint8Array(ring, slot + 4, 60).set(packet.subarray(4, 64));
  Atomics.store(new Uint32Array(ring, slot, 1), 0, (header | (setup << 16)) >>> 0);
}

/** A created queue: its address, the decoded hsa_queue_t, and the error callback to close after destroy. */
export interface HsaQueue {
  readonly ptr: Pointer;
  readonly info: Decoded<typeof hsa_queue_t.fields>;
  readonly onError: Callback | null;
}
export interface KernelSymbolInfo {
  kernelObject: bigint;
  kernargSize: number;
  kernargAlign: number;
  groupSize: number;
  privateSize: number;
}

export function openHsa(names: string | readonly string[] = HSA_LIBRARY): Hsa {
  return new Hsa(dlopen(names, hsaSymbols));
}

const iterDef = { args: ["u64", "pointer"], result: "u32" } as const;

/** libhsa-runtime64's functions (`fn`, raw) and thin checked wrappers. */
export class Hsa {
  readonly fn: HsaSymbols;
  readonly #u64 = new BigUint64Array(new ArrayBuffer(8));
  readonly #u32 = new Uint32Array(new ArrayBuffer(4));
  // Code object bytes must outlive their reader (ROCr reads them in place).
  readonly #readerBytes = new Map<bigint, Uint8Array>();

  constructor(readonly lib: Library<typeof hsaSymbols>) {
    this.fn = lib.symbols;
  }
  close(): void {
    this.lib.close();
  }
  /** The runtime's text for a status (needs no init), or its name. */
  statusString(code: number): string {
    const out = new BigUint64Array(1);
    if (this.fn.hsa_status_string(code, out) === 0 && out[0] !== 0n) return readCString(out[0]);
    return hsaStatusName(code);
  }
  check(fn: string, code: number): void {
    if (code !== HSA_STATUS_SUCCESS && code !== HSA_STATUS_INFO_BREAK) throw new HsaError(fn, code, this.statusString(code));
  }
  /**
   * hsa_init as a typed result: a machine without a usable device (no /dev/kfd) answers
   * HSA_STATUS_ERROR_OUT_OF_RESOURCES (0x1008), which a backend reports as "unavailable", not a crash.
   */
  init(): HsaStatus {
    const code = this.fn.hsa_init();
    return { ok: code === HSA_STATUS_SUCCESS, code, codeName: hsaStatusName(code) };
  }
  shutDown(): void {
    this.check("hsa_shut_down", this.fn.hsa_shut_down());
  }
  systemInfoU64(attr: number): bigint {
    this.#u64[0] = 0n;
    this.check("hsa_system_get_info", this.fn.hsa_system_get_info(attr, this.#u64));
    return this.#u64[0];
  }
  #iterate(fn: string, call: (cb: bigint) => number): bigint[] {
    const out: bigint[] = [];
    const cb = callback(iterDef, (h) => {
      out.push(h);
      return HSA_STATUS_SUCCESS;
    });
    try {
      this.check(fn, call(cb.ptr));
    } finally {
      cb.close();
    }
    return out;
  }
  agents(): bigint[] {
    return this.#iterate("hsa_iterate_agents", (cb) => this.fn.hsa_iterate_agents(cb, 0n));
  }
  /** Reads an agent attribute of `bytes` bytes (see agentName / agentInfoU32 for the common shapes). */
  agentInfo(agent: bigint, attr: number, bytes: number): Uint8Array {
    const out = new Uint8Array(new ArrayBuffer(Math.max(bytes, 8)));
    this.check("hsa_agent_get_info", this.fn.hsa_agent_get_info(agent, attr, out));
    return out.subarray(0, bytes);
  }
  agentInfoU32(agent: bigint, attr: number): number {
    this.check("hsa_agent_get_info", this.fn.hsa_agent_get_info(agent, attr, this.#u32));
    return this.#u32[0];
  }
  /** HSA_AGENT_INFO_NAME (char[64], e.g. "gfx90a"); HSA_AMD_AGENT_INFO_PRODUCT_NAME for the marketing name. */
  agentName(agent: bigint, attr: number = HSA_AGENT_INFO_NAME): string {
    return cstringFrom(this.agentInfo(agent, attr, 64));
  }
  isas(agent: bigint): bigint[] {
    return this.#iterate("hsa_agent_iterate_isas", (cb) => this.fn.hsa_agent_iterate_isas(agent, cb, 0n));
  }
  /** e.g. "amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-". */
  isaName(isa: bigint): string {
    this.check("hsa_isa_get_info_alt", this.fn.hsa_isa_get_info_alt(isa, HSA_ISA_INFO_NAME_LENGTH, this.#u32));
    const out = new Uint8Array(this.#u32[0] + 1);
    this.check("hsa_isa_get_info_alt", this.fn.hsa_isa_get_info_alt(isa, HSA_ISA_INFO_NAME, out));
    return cstringFrom(out);
  }
  regions(agent: bigint): bigint[] {
    return this.#iterate("hsa_agent_iterate_regions", (cb) => this.fn.hsa_agent_iterate_regions(agent, cb, 0n));
  }
  regionInfoU32(region: bigint, attr: number): number {
    this.check("hsa_region_get_info", this.fn.hsa_region_get_info(region, attr, this.#u32));
    return this.#u32[0];
  }
  regionInfoU64(region: bigint, attr: number): bigint {
    this.#u64[0] = 0n;
    this.check("hsa_region_get_info", this.fn.hsa_region_get_info(region, attr, this.#u64));
    return this.#u64[0];
  }
  memoryPools(agent: bigint): bigint[] {
    return this.#iterate("hsa_amd_agent_iterate_memory_pools", (cb) => this.fn.hsa_amd_agent_iterate_memory_pools(agent, cb, 0n));
  }
  memoryPoolInfoU32(pool: bigint, attr: number): number {
    this.check("hsa_amd_memory_pool_get_info", this.fn.hsa_amd_memory_pool_get_info(pool, attr, this.#u32));
    return this.#u32[0];
  }
  memoryPoolInfoU64(pool: bigint, attr: number): bigint {
    this.#u64[0] = 0n;
    this.check("hsa_amd_memory_pool_get_info", this.fn.hsa_amd_memory_pool_get_info(pool, attr, this.#u64));
    return this.#u64[0];
  }
  memoryPoolAllocate(pool: bigint, bytes: bigint | number, flags = 0): Pointer {
    this.check("hsa_amd_memory_pool_allocate", this.fn.hsa_amd_memory_pool_allocate(pool, bytes, flags, this.#u64));
    return this.#u64[0];
  }
  memoryPoolFree(ptr: Pointer): void {
    this.check("hsa_amd_memory_pool_free", this.fn.hsa_amd_memory_pool_free(ptr));
  }
  /** Lets `agents` access a pool allocation (device memory from the host's view, host memory from the GPU's). */
  agentsAllowAccess(agents: readonly bigint[], ptr: Pointer): void {
    this.check("hsa_amd_agents_allow_access", this.fn.hsa_amd_agents_allow_access(agents.length, new BigUint64Array(agents), null, ptr));
  }
  memoryAllocate(region: bigint, bytes: bigint | number): Pointer {
    this.check("hsa_memory_allocate", this.fn.hsa_memory_allocate(region, bytes, this.#u64));
    return this.#u64[0];
  }
  memoryFree(ptr: Pointer): void {
    this.check("hsa_memory_free", this.fn.hsa_memory_free(ptr));
  }
  memoryCopy(dst: Pointer, src: Pointer, bytes: bigint | number): void {
    this.check("hsa_memory_copy", this.fn.hsa_memory_copy(dst, src, bytes));
  }
  memoryFill(ptr: Pointer, value: number, countU32: bigint | number): void {
    this.check("hsa_amd_memory_fill", this.fn.hsa_amd_memory_fill(ptr, value >>> 0, countU32));
  }

  // --- queues --------------------------------------------------------------------------------------------
  /**
   * Creates an AQL queue of `size` packets (a power of two). `onError` receives asynchronous queue errors
   * (a kernel trap or memory fault) from a runtime thread; it runs on the JS thread when the event loop turns.
   */
  queueCreate(agent: bigint, size: number, o: { type?: number; onError?: (status: number, queue: bigint) => void; privateSegmentSize?: number; groupSegmentSize?: number } = {}): HsaQueue {
    const onError = o.onError
      ? callback({ args: ["u32", "pointer", "pointer"], result: "void" }, (status, queue) => o.onError!(status, queue), { threadSafe: true, unref: true })
      : null;
    const r = this.fn.hsa_queue_create(agent, size, o.type ?? HSA_QUEUE_TYPE_SINGLE, onError?.ptr ?? 0n, 0n, o.privateSegmentSize ?? 0xffffffff, o.groupSegmentSize ?? 0xffffffff, this.#u64);
    if (r !== HSA_STATUS_SUCCESS) {
      onError?.close();
      this.check("hsa_queue_create", r);
    }
    const ptr = this.#u64[0];
    return { ptr, info: decode(hsa_queue_t, ptrView(ptr, hsa_queue_t.size)), onError };
  }
  /** Packets the packet processor has consumed (acquire order): slots below it may be rewritten. */
  queueLoadReadIndex(q: HsaQueue): bigint {
    return this.fn.hsa_queue_load_read_index_scacquire(q.ptr);
  }
  queueLoadWriteIndex(q: HsaQueue): bigint {
    return this.fn.hsa_queue_load_write_index_relaxed(q.ptr);
  }
  /** Publishes the write index (release order); a single-producer queue's owner stores it before the doorbell. */
  queueStoreWriteIndex(q: HsaQueue, index: bigint): void {
    this.fn.hsa_queue_store_write_index_screlease(q.ptr, index);
  }
  queueDestroy(q: HsaQueue): void {
    this.check("hsa_queue_destroy", this.fn.hsa_queue_destroy(q.ptr));
    q.onError?.close();
  }

  // --- signals -------------------------------------------------------------------------------------------
  signalCreate(initial: bigint | number = 1n, consumers: readonly bigint[] = []): bigint {
    const cs = consumers.length ? new BigUint64Array(consumers) : null;
    this.check("hsa_signal_create", this.fn.hsa_signal_create(initial, consumers.length, cs, this.#u64));
    return this.#u64[0];
  }
  signalDestroy(signal: bigint): void {
    this.check("hsa_signal_destroy", this.fn.hsa_signal_destroy(signal));
  }
  signalLoad(signal: bigint): bigint {
    return this.fn.hsa_signal_load_scacquire(signal);
  }
  signalStore(signal: bigint, value: bigint | number): void {
    this.fn.hsa_signal_store_screlease(signal, value);
  }
  /** Atomically adds `delta` (release order), e.g. to count one more submission its packets will decrement. */
  signalAdd(signal: bigint, delta: bigint | number): void {
    this.fn.hsa_signal_add_screlease(signal, delta);
  }
  /**
   * Waits until `signal` `cond` `value` or `timeoutHint` (in HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY ticks) passes;
   * returns the observed value, which the caller compares to tell a timeout from completion.
   */
  signalWait(signal: bigint, cond: number, value: bigint | number, timeoutHint: bigint, waitState: number = HSA_WAIT_STATE_BLOCKED): bigint {
    return this.fn.hsa_signal_wait_scacquire(signal, cond, value, timeoutHint, waitState);
  }

  // --- code objects and executables ----------------------------------------------------------------------
  /** A reader over an AMDGPU code object (ELF from comgr); the bytes are kept until the reader is destroyed. */
  codeObjectReaderFromMemory(code: Uint8Array): bigint {
    this.check("hsa_code_object_reader_create_from_memory", this.fn.hsa_code_object_reader_create_from_memory(code, code.byteLength, this.#u64));
    const reader = this.#u64[0];
    this.#readerBytes.set(reader, code);
    return reader;
  }
  codeObjectReaderDestroy(reader: bigint): void {
    this.check("hsa_code_object_reader_destroy", this.fn.hsa_code_object_reader_destroy(reader));
    this.#readerBytes.delete(reader);
  }
  executableCreate(profile: number = HSA_PROFILE_FULL, rounding: number = HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT): bigint {
    this.check("hsa_executable_create_alt", this.fn.hsa_executable_create_alt(profile, rounding, null, this.#u64));
    return this.#u64[0];
  }
  executableLoadAgentCodeObject(executable: bigint, agent: bigint, reader: bigint): void {
    this.check("hsa_executable_load_agent_code_object", this.fn.hsa_executable_load_agent_code_object(executable, agent, reader, null, null));
  }
  executableFreeze(executable: bigint): void {
    this.check("hsa_executable_freeze", this.fn.hsa_executable_freeze(executable, null));
  }
  executableDestroy(executable: bigint): void {
    this.check("hsa_executable_destroy", this.fn.hsa_executable_destroy(executable));
  }
  /** A kernel's symbol ("name.kd" for code object v3+ kernels). */
  executableSymbol(executable: bigint, name: string, agent: bigint): bigint {
    this.check("hsa_executable_get_symbol_by_name", this.fn.hsa_executable_get_symbol_by_name(executable, cstr(name), new BigUint64Array([agent]), this.#u64));
    return this.#u64[0];
  }
  symbolInfoU32(symbol: bigint, attr: number): number {
    this.check("hsa_executable_symbol_get_info", this.fn.hsa_executable_symbol_get_info(symbol, attr, this.#u32));
    return this.#u32[0];
  }
  symbolInfoU64(symbol: bigint, attr: number): bigint {
    this.#u64[0] = 0n;
    this.check("hsa_executable_symbol_get_info", this.fn.hsa_executable_symbol_get_info(symbol, attr, this.#u64));
    return this.#u64[0];
  }
  /** What a dispatch packet needs from a kernel symbol. */
  kernelInfo(symbol: bigint): KernelSymbolInfo {
    return {
      kernelObject: this.symbolInfoU64(symbol, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT),
      kernargSize: this.symbolInfoU32(symbol, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE),
      kernargAlign: this.symbolInfoU32(symbol, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT),
      groupSize: this.symbolInfoU32(symbol, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE),
      privateSize: this.symbolInfoU32(symbol, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE),
    };
  }

  // --- profiling -----------------------------------------------------------------------------------------
  /** Makes the packet processor record start and end times of each dispatch that has a completion signal. */
  profilingSetEnabled(q: HsaQueue, on: boolean): void {
    this.check("hsa_amd_profiling_set_profiler_enabled", this.fn.hsa_amd_profiling_set_profiler_enabled(q.ptr, on ? 1 : 0));
  }
  /** A completed dispatch's start and end, in HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY ticks, by its completion signal. */
  dispatchTime(agent: bigint, signal: bigint): { start: bigint; end: bigint } {
    const out = new BigUint64Array(2);
    this.check("hsa_amd_profiling_get_dispatch_time", this.fn.hsa_amd_profiling_get_dispatch_time(agent, signal, out));
    return { start: out[0], end: out[1] };
  }

  // --- faults --------------------------------------------------------------------------------------------
  /**
   * Registers `handler` for system events (GPU memory faults). It is called from a runtime thread, so it
   * runs thread-safe; the returned callback must stay open while the runtime may call it.
   */
  registerSystemEventHandler(handler: (event: Decoded<typeof hsa_amd_event_t.fields>) => void): Callback {
    const cb = callback({ args: ["pointer", "pointer"], result: "u32" }, (event) => {
      handler(decode(hsa_amd_event_t, ptrView(event, hsa_amd_event_t.size)));
      return HSA_STATUS_SUCCESS;
    }, { threadSafe: true, unref: true });
    const r = this.fn.hsa_amd_register_system_event_handler(cb.ptr, 0n);
    if (r !== HSA_STATUS_SUCCESS) {
      cb.close();
      this.check("hsa_amd_register_system_event_handler", r);
    }
    return cb;
  }
}
