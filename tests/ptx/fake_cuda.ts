// A stand-in for ffi/cuda.ts's Cuda that runs without a GPU, so PtxDevice's own logic (staging ring, readback
// mapping, capture and replay bookkeeping, fault-word lookup, error mapping, bounded waits) is exercised in
// CI. Device memory is ArrayBuffers at made-up addresses; pinned host memory is real memory at real addresses
// (ptrOf) so PtxDevice's ptrView over it works. Kernels run through the JS renderer (with 32-lane subgroups),
// looked up by entry name in `kernels`; a failing check writes its code to the kernel's fault word (the last
// param) and leaves a sticky CUDA_ERROR_LAUNCH_FAILED, as a trap does. Work runs when enqueued; a kernel
// named "spin" keeps the stream busy for `spinMs` more (after what it was busy with); an event completes when
// the stream's work before it has. An op that returns false is blocked (a collective waiting
// for the other ranks, fake_nccl.ts): it and the ops after it stay queued, the stream busy, until `drain`.
import { CUDA_ERROR_NAMES, CudaError, type KernelArgs } from "../../ffi/cuda.ts";
import { ptrOf, ptrView } from "../../ffi/lib.ts";
import type { Kernel } from "../../kernels/ir.ts";
import { JsKernelFault, renderJs } from "../../kernels/render/js.ts";

/** Work on the stream; `false`: blocked, run it again at the next drain. */
type Op = () => void | boolean;
interface Alloc {
  base: bigint;
  bytes: number;
  data: ArrayBuffer;
  host: boolean;
}

const DEVICE_BASE = 0x9000_0000_0000n; // above the 47-bit user address space: never a host address

export class FakeCuda {
  /** Kernels by PTX entry name (the test registers what it compiles). */
  readonly kernels = new Map<string, Kernel>();
  /**
   * The kernel being compiled, set by a test around PtxDevice.compile: its function then runs this kernel, not
   * the one registered under its entry name (two kernels of a program may share a name, e.g. elementwise_n160).
   */
  loading: Kernel | undefined;
  private readonly funcKernels = new Map<bigint, Kernel>();
  readonly calls: string[] = [];
  sticky = 0;
  spinMs = 0;
  private busyUntil = 0;
  /** When each recorded event completes (performance.now() time; Infinity while work before it is blocked). */
  private readonly eventAt = new Map<bigint, number>();
  /** When the stream stops being busy (performance.now() time; 0 when it never was). */
  get busyEnd(): number {
    return this.busyUntil;
  }
  private next = DEVICE_BASE;
  private readonly allocs: Alloc[] = [];
  private readonly funcs = new Map<bigint, string>();
  private capture: Op[] | undefined;
  /** Ops waiting behind a blocked one, in stream order. */
  private readonly pending: Op[] = [];
  private draining = false;
  private readonly graphs = new Map<bigint, Op[]>();
  private handles = 1n;
  readonly fn: Record<string, (...a: never[]) => number>;

  constructor() {
    this.fn = {
      cuStreamQuery: () => this.query(),
      cuEventQuery: ((e: bigint) => this.eventQuery(e)) as never,
      cuStreamEndCapture: ((_s: bigint, out: BigUint64Array) => {
        const ops = this.capture ?? [];
        this.capture = undefined;
        const g = this.handles++;
        this.graphs.set(g, ops);
        out[0] = g;
        return 0;
      }) as never,
      cuGraphDestroy: () => 0,
    };
  }

  private eventQuery(e: bigint): number {
    if (this.sticky) return this.sticky;
    return performance.now() < (this.eventAt.get(e) ?? 0) ? 600 : 0;
  }
  private query(): number {
    if (this.sticky) return this.sticky;
    if (this.pending.length) return 600;
    return performance.now() < this.busyUntil ? 600 : 0;
  }
  private live(fn: string): void {
    this.calls.push(fn);
    if (this.sticky) throw new CudaError(fn, this.sticky, CUDA_ERROR_NAMES[this.sticky]);
  }
  /** Adds work to the stream (to the capture while one is open); it runs now unless something blocks it. */
  enqueue(op: Op): void {
    if (this.capture) this.capture.push(op);
    else {
      this.pending.push(op);
      this.drain();
    }
  }
  /** Runs queued work in order until an op blocks (re-entrant calls return: the outer loop goes on). */
  drain(): void {
    if (this.draining) return;
    this.draining = true;
    try {
      while (this.pending.length) {
        let done: void | boolean;
        try {
          done = this.pending[0]();
        } catch (e) {
          this.pending.shift(); // a failed op is gone (as a real stream moves on to its error state)
          throw e;
        }
        if (done === false) return;
        this.pending.shift();
      }
    } finally {
      this.draining = false;
    }
  }
  /** The allocation holding `addr`, and the offset into it. */
  at(addr: bigint): { a: Alloc; off: number } {
    for (const a of this.allocs) if (addr >= a.base && addr < a.base + BigInt(a.bytes)) return { a, off: Number(addr - a.base) };
    throw new CudaError("access", 700, "CUDA_ERROR_ILLEGAL_ADDRESS");
  }
  bytesAt(addr: bigint, n: number): Uint8Array {
    const { a, off } = this.at(addr);
    return new Uint8Array(a.data, off, n);
  }
  get liveAllocations(): number {
    return this.allocs.length;
  }

  errorName(code: number): string {
    return CUDA_ERROR_NAMES[code] ?? `CUresult(${code})`;
  }
  device(): number { return 0; }
  deviceName(): string { return "Fake H200"; }
  deviceTotalMem(): bigint { return 141n << 30n; }
  memGetInfo(): { free: bigint; total: bigint } { return { free: 140n << 30n, total: 141n << 30n }; }
  deviceAttribute(attr: number): number {
    const table: Record<number, number> = { 1: 1024, 5: 2 ** 31 - 1, 6: 65535, 7: 65535, 8: 49152, 10: 32, 17: 0, 75: 9, 76: 0, 97: 232448 };
    return table[attr] ?? 0;
  }
  primaryCtxRetain(): bigint { return 0xc7n; }
  primaryCtxRelease(): void { this.calls.push("primaryCtxRelease"); }
  ctxSetCurrent(): void {}
  streamCreate(): bigint { return 0x57n; }
  streamDestroy(): void { this.live("streamDestroy"); }
  eventCreate(): bigint { return this.handles++; }
  eventRecord(event: bigint): void {
    this.live("eventRecord");
    this.eventAt.set(event, Infinity);
    this.enqueue(() => void this.eventAt.set(event, this.busyUntil));
  }
  eventDestroy(): void {}

  memAlloc(bytes: number | bigint): bigint {
    this.live("memAlloc");
    const n = Number(bytes);
    const a: Alloc = { base: this.next, bytes: n, data: new ArrayBuffer(n), host: false };
    this.next += BigInt(Math.ceil(n / 256) * 256 + 256);
    this.allocs.push(a);
    return a.base;
  }
  memHostAlloc(bytes: number | bigint): bigint {
    this.live("memHostAlloc");
    const n = Number(bytes);
    const data = new ArrayBuffer(n);
    const a: Alloc = { base: ptrOf(new Uint8Array(data)), bytes: n, data, host: true };
    this.allocs.push(a);
    return a.base;
  }
  memHostGetDevicePointer(p: bigint): bigint { return p; } // unified addressing
  private drop(addr: bigint): void {
    const i = this.allocs.findIndex((a) => a.base === addr);
    if (i < 0) throw new CudaError("free", 1, "CUDA_ERROR_INVALID_VALUE");
    this.allocs.splice(i, 1);
  }
  memFree(p: bigint): void {
    this.live("memFree");
    this.drop(p);
  }
  memFreeHost(p: bigint): void {
    this.live("memFreeHost");
    this.drop(p);
  }
  memsetD8Async(dst: bigint, v: number, n: number | bigint): void {
    this.live("memsetD8Async");
    this.enqueue(() => void this.bytesAt(dst, Number(n)).fill(v));
  }
  memcpyHtoDAsync(dst: bigint, src: bigint | ArrayBufferView, n: number | bigint): void {
    this.live("memcpyHtoDAsync");
    if (typeof src !== "bigint") throw new Error("fake: PtxDevice stages host data in pinned memory");
    // Real copies read their source when the stream reaches them; here that is now (work runs at enqueue).
    this.enqueue(() => this.bytesAt(dst, Number(n)).set(new Uint8Array(ptrView(src, Number(n)))));
  }
  memcpyDtoHAsync(dst: bigint | ArrayBufferView, src: bigint, n: number | bigint): void {
    this.live("memcpyDtoHAsync");
    if (typeof dst !== "bigint") throw new Error("fake: PtxDevice reads through pinned memory");
    this.enqueue(() => new Uint8Array(ptrView(dst, Number(n))).set(this.bytesAt(src, Number(n))));
  }
  memcpyDtoDAsync(dst: bigint, src: bigint, n: number | bigint): void {
    this.live("memcpyDtoDAsync");
    this.enqueue(() => this.bytesAt(dst, Number(n)).set(this.bytesAt(src, Number(n)).slice()));
  }

  moduleLoadDataEx(ptx: string): { module: bigint; infoLog: string } {
    this.live("moduleLoadDataEx");
    if (!/\.entry/.test(ptx)) throw new CudaError("cuModuleLoadDataEx", 218, "CUDA_ERROR_INVALID_PTX", "no entry");
    return { module: this.handles++, infoLog: "" };
  }
  moduleGetFunction(_m: bigint, name: string): bigint {
    this.live("moduleGetFunction");
    const f = this.handles++;
    this.funcs.set(f, name);
    if (this.loading) this.funcKernels.set(f, this.loading);
    return f;
  }
  moduleUnload(): void { this.live("moduleUnload"); }
  funcSetAttribute(): void { this.live("funcSetAttribute"); }

  launchKernel(func: bigint, grid: number | readonly number[], _block: unknown, _shared: number, _stream: bigint, args: KernelArgs | BigUint64Array | null): void {
    this.live("launchKernel");
    const name = this.funcs.get(func)!;
    const k = this.funcKernels.get(func) ?? this.kernels.get(name);
    if (!k) throw new Error(`fake: no kernel registered for entry ${name}`);
    const g = (typeof grid === "number" ? [grid, 1, 1] : grid) as [number, number, number];
    const a = args as KernelArgs;
    const ptrs = a.types.map((_, i) => a.values.getBigUint64(a.offsets[i], true)); // read now: the driver copies params at launch
    this.enqueue(() => this.exec(name, k, g, ptrs));
  }
  private exec(name: string, k: Kernel, grid: [number, number, number], ptrs: bigint[]): void {
    if (this.sticky) return;
    const js = renderJs(k, { subgroupSize: 32 });
    const views = js.bind(k.buffers.map((_, i) => {
      const { a, off } = this.at(ptrs[i]);
      return { buffer: a.data, offset: off, bytes: a.bytes - off };
    }));
    try {
      js.run(views, grid);
    } catch (e) {
      if (!(e instanceof JsKernelFault)) throw e;
      new DataView(ptrView(ptrs[k.buffers.length], 4)).setUint32(0, e.code, true);
      this.sticky = 719; // CUDA_ERROR_LAUNCH_FAILED, what a trap leaves
    }
    // Busy from the end of the kernel's own JS run: a run slowed by a loaded machine (fault_child's spin loop
    // takes seconds there) must not use up the window the caller's synchronize is meant to see.
    if (name === "spin") this.busyUntil = Math.max(performance.now(), this.busyUntil) + this.spinMs;
  }

  streamBeginCapture(): void {
    this.live("streamBeginCapture");
    this.capture = [];
  }
  graphInstantiate(graph: bigint): bigint {
    this.live("graphInstantiate");
    const e = this.handles++;
    this.graphs.set(e, this.graphs.get(graph)!);
    return e;
  }
  graphUpload(): void {}
  graphDestroy(): void {}
  graphLaunch(exec: bigint): void {
    this.live("graphLaunch");
    this.pending.push(...this.graphs.get(exec)!);
    this.drain();
  }
  graphExecDestroy(exec: bigint): void {
    this.live("graphExecDestroy");
    this.graphs.delete(exec);
  }
}
