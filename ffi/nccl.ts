// libnccl (NVIDIA's collectives): communicators over the GPUs of one host, all-reduce and all-gather on a CUDA
// stream, group calls, errors. Plain symbol data like ffi/cuda.ts, checked against nccl.h by
// tests/ffi/nccl.test.ts. Wrappers turn an ncclResult_t into NcclError {fn, code, text}.
//
// One process drives every GPU of a tensor-parallel group, so communicators come from ncclCommInitAll (one per
// device, no unique id to exchange). ncclCommInitRank, the multi-process door, takes the 128-byte ncclUniqueId
// by value, which neither Deno's nor Bun's FFI vocabulary here can pass: it is not bound, and ncclGetUniqueId is
// kept only for a future launcher of one process per GPU. NCCL collectives on a stream are capturable into a
// CUDA graph (cuStreamBeginCapture), which is how a PTX rank records them inside its replay.
import { type Bound, defineSymbols, dlopen, type Library, readCString } from "./lib.ts";

const H = "u64" as const; // ncclComm_t, cudaStream_t (== CUstream), device pointers
const B = "buffer" as const; // out-params and host arrays
const R = "i32" as const; // ncclResult_t

export const ncclSymbols = defineSymbols({
  ncclGetVersion: { args: [B], result: R },
  ncclGetUniqueId: { args: [B], result: R },
  ncclCommInitAll: { args: [B, "i32", B], result: R },
  ncclCommDestroy: { args: [H], result: R },
  ncclCommAbort: { args: [H], result: R },
  ncclCommGetAsyncError: { args: [H, B], result: R },
  ncclCommCount: { args: [H, B], result: R },
  ncclCommCuDevice: { args: [H, B], result: R },
  ncclCommUserRank: { args: [H, B], result: R },
  ncclGetErrorString: { args: [R], result: "pointer" },
  ncclGetLastError: { args: [H], result: "pointer", optional: true },
  ncclAllReduce: { args: [H, H, "usize", "i32", "i32", H, H], result: R },
  ncclAllGather: { args: [H, H, "usize", "i32", H, H], result: R },
  ncclGroupStart: { args: [], result: R },
  ncclGroupEnd: { args: [], result: R },
});
export type NcclSymbols = Bound<typeof ncclSymbols>;

/** Library names tried in order. */
export const NCCL_LIBRARY = ["libnccl.so.2", "libnccl.so"] as const;

/** ncclDataType_t values (nccl.h). */
export const NCCL_DTYPE = { f16: 6, f32: 7, f64: 8, bf16: 9, i32: 2, u32: 3, i8: 0, u8: 1 } as const;
/** ncclRedOp_t values (nccl.h). */
export const NCCL_OP = { sum: 0, prod: 1, max: 2, min: 3, avg: 4 } as const;
/** ncclResult_t names (nccl.h), for messages when the library cannot say. */
export const NCCL_RESULT: Record<number, string> = {
  0: "ncclSuccess", 1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError",
  4: "ncclInvalidArgument", 5: "ncclInvalidUsage", 6: "ncclRemoteError", 7: "ncclInProgress",
};
export const NCCL_UNIQUE_ID_BYTES = 128;

/** A failed NCCL call: the function, its ncclResult_t and NCCL's text for it. */
export class NcclError extends Error {
  override name = "NcclError";
  constructor(readonly fn: string, readonly code: number, readonly text: string) {
    super(`${fn} failed: ${NCCL_RESULT[code] ?? `ncclResult_t(${code})`}${text ? ` (${text})` : ""}`);
  }
}

/** Opens libnccl (LibraryNotFound where it is not installed: every machine without NVIDIA's NCCL). */
export function openNccl(names: string | readonly string[] = NCCL_LIBRARY): Nccl {
  return new Nccl(dlopen(names, ncclSymbols));
}

/** libnccl's functions (`fn`, raw) and thin checked wrappers. Communicators, streams and pointers are bigint. */
export class Nccl {
  readonly fn: NcclSymbols;
  readonly #i32 = new Int32Array(1);

  constructor(readonly lib: Library<typeof ncclSymbols>) {
    this.fn = lib.symbols;
  }
  close(): void {
    this.lib.close();
  }
  errorString(code: number): string {
    const p = this.fn.ncclGetErrorString(code);
    return p === 0n ? "" : readCString(p);
  }
  check(fn: string, code: number): void {
    if (code !== 0) throw new NcclError(fn, code, this.errorString(code));
  }
  #int(fn: string, code: number): number {
    this.check(fn, code);
    return this.#i32[0];
  }
  /** e.g. 23007 for NCCL 2.30.7. */
  version(): number {
    return this.#int("ncclGetVersion", this.fn.ncclGetVersion(this.#i32));
  }
  /** A fresh unique id (for a multi-process launcher; see the top of this file). */
  uniqueId(): Uint8Array {
    const id = new Uint8Array(NCCL_UNIQUE_ID_BYTES);
    this.check("ncclGetUniqueId", this.fn.ncclGetUniqueId(id));
    return id;
  }
  /** One communicator per CUDA device ordinal of `devices` (rank i on devices[i]). */
  commInitAll(devices: readonly number[]): bigint[] {
    const comms = new BigUint64Array(devices.length);
    this.check("ncclCommInitAll", this.fn.ncclCommInitAll(comms, devices.length, Int32Array.from(devices)));
    return [...comms];
  }
  commDestroy(comm: bigint): void {
    this.check("ncclCommDestroy", this.fn.ncclCommDestroy(comm));
  }
  commAbort(comm: bigint): void {
    this.check("ncclCommAbort", this.fn.ncclCommAbort(comm));
  }
  /** The communicator's asynchronous error (0: none); a non-zero one means the communicator must be aborted. */
  asyncError(comm: bigint): number {
    return this.#int("ncclCommGetAsyncError", this.fn.ncclCommGetAsyncError(comm, this.#i32));
  }
  count(comm: bigint): number {
    return this.#int("ncclCommCount", this.fn.ncclCommCount(comm, this.#i32));
  }
  cuDevice(comm: bigint): number {
    return this.#int("ncclCommCuDevice", this.fn.ncclCommCuDevice(comm, this.#i32));
  }
  userRank(comm: bigint): number {
    return this.#int("ncclCommUserRank", this.fn.ncclCommUserRank(comm, this.#i32));
  }
  /** Sums `count` elements of `dtype` over the ranks into recv (send == recv: in place) on `stream`. */
  allReduce(send: bigint, recv: bigint, count: number, dtype: keyof typeof NCCL_DTYPE, comm: bigint, stream: bigint, op: keyof typeof NCCL_OP = "sum"): void {
    this.check("ncclAllReduce", this.fn.ncclAllReduce(send, recv, count, NCCL_DTYPE[dtype], NCCL_OP[op], comm, stream));
  }
  /** Gathers `count` elements from each rank into recv at rank·count, on `stream`. */
  allGather(send: bigint, recv: bigint, count: number, dtype: keyof typeof NCCL_DTYPE, comm: bigint, stream: bigint): void {
    this.check("ncclAllGather", this.fn.ncclAllGather(send, recv, count, NCCL_DTYPE[dtype], comm, stream));
  }
  groupStart(): void {
    this.check("ncclGroupStart", this.fn.ncclGroupStart());
  }
  groupEnd(): void {
    this.check("ncclGroupEnd", this.fn.ncclGroupEnd());
  }
}
