// A stand-in for ffi/hsa.ts's Hsa that runs without an AMD GPU, so RocmDevice's own logic (pools, code object
// loading, kernargs, the packet lists, the ring and its doorbell, completion counting, fault mapping, bounded
// waits) runs in CI. It plays the packet processor: at each doorbell it consumes the packets from its read
// index up to the doorbell's value, checking every one and logging its 64 bytes with its ring slot.
//
// - Memory: the GPU's coarse pool hands out made-up addresses backed by ArrayBuffers (never a host address,
//   so RocmDevice must not touch them from the host); the CPU pools hand out real memory at real addresses
//   (ptrOf), as fine-grained system memory is. The ring and the hsa_queue_t are real memory too.
// - Kernels: `compiler` makes a stand-in code object per kernel with metadata laid out as code object v5 does
//   (pointer args, then the hidden block counts, group sizes, remainders, offsets, grid dims); a dispatch runs
//   the kernel through the JS renderer after reading its pointers back from the kernarg segment.
// - A failing check writes its code to the fault word (the last pointer), stops the queue and reports
//   HSA_STATUS_ERROR_EXCEPTION to the queue's error callback on a later turn of the event loop, as ROCr's
//   runtime thread does through a thread-safe callback.
// - `mode`: "run" consumes at each doorbell; "hang" never consumes (a kernel that does not finish); "lazy"
//   consumes only when the device reloads the read index (the GPU catching up while the host waits for room).
import { HSA_AMD_GPU_MEMORY_FAULT_EVENT, HSA_PACKET_TYPE_BARRIER_AND, HSA_PACKET_TYPE_INVALID, HSA_PACKET_TYPE_KERNEL_DISPATCH, HsaError, type HsaQueue } from "../../ffi/hsa.ts";
import { ptrOf } from "../../ffi/lib.ts";
import type { Kernel } from "../../kernels/ir.ts";
import { JsKernelFault, renderJs } from "../../kernels/render/js.ts";
import type { RocmAgent } from "../../backends/rocm/agent.ts";
import type { AmdgpuCode, AmdgpuKernelMeta } from "../../backends/rocm/kernarg.ts";

const DEVICE_BASE = 0x9000_0000_0000n;
const GPU = 0x6001n, CPU = 0x6002n, ISA = 0x7001n;
const POOL_VRAM = 0x8001n, POOL_LDS = 0x8002n, POOL_FINE = 0x8003n, POOL_KERNARG = 0x8004n;
export const HSA_STATUS_ERROR_EXCEPTION = 0x1016;

interface Alloc {
  base: bigint;
  bytes: number;
  data: ArrayBuffer;
  /** Where the allocation starts in `data` (host allocations are page-aligned, as the runtime's are). */
  start: number;
  pool: bigint;
  access: Set<bigint>;
}
/** One consumed packet: its ring slot, index, bytes, and the kernarg bytes of a dispatch. */
export interface LoggedPacket {
  index: bigint;
  slot: number;
  bytes: Uint8Array;
  kernarg?: Uint8Array;
  kernel?: string;
}

export interface FakeAgentSpec {
  gfx: string;
  wave: number;
  product: string;
  queueMax: number;
  ldsBytes: number;
}
export const MI300X: FakeAgentSpec = { gfx: "gfx942", wave: 64, product: "Fake MI300X", queueMax: 131072, ldsBytes: 65536 };
export const RX7900: FakeAgentSpec = { gfx: "gfx1100", wave: 32, product: "Fake RX 7900", queueMax: 131072, ldsBytes: 65536 };

export class FakeHsa {
  mode: "run" | "hang" | "lazy" = "run";
  /** Every consumed packet in order. */
  readonly log: LoggedPacket[] = [];
  /** Doorbell values in order. */
  readonly doorbells: bigint[] = [];
  /** Broken rules of the AQL protocol the device was caught at (must stay empty). */
  readonly violations: string[] = [];
  /** Overrides of what the loader reports for a symbol (to check the device compares it with the metadata). */
  loaderSays: Partial<{ kernargSize: number; groupSize: number; privateSize: number }> = {};
  initCount = 0;
  private next = DEVICE_BASE;
  private readonly allocs: Alloc[] = [];
  private readonly signals = new Map<bigint, { value: bigint }>();
  private handles = 0x100n;
  private readonly kernels = new Map<string, { kernel: Kernel; meta: AmdgpuKernelMeta }>();
  private readonly readers = new Map<bigint, string[]>();
  private readonly exes = new Map<bigint, { symbols: string[]; frozen: boolean }>();
  private readonly objects = new Map<bigint, string>();
  private queue: { q: HsaQueue; ring: ArrayBuffer; size: number; read: bigint; write: bigint; doorbell: bigint; onError?: (s: number, q: bigint) => void; error: boolean } | undefined;
  private eventHandlers: ((e: never) => void)[] = [];
  /** Keeps the fake queue's hsa_queue_t alive (real memory the device decodes). */
  private queueStruct: Uint8Array | undefined;

  constructor(readonly spec: FakeAgentSpec = MI300X) {}

  // ---- the compiler the device is given -----------------------------------------------------------------

  /** A stand-in code object for `k` with v5-style metadata; the processor runs `k` when dispatched. */
  readonly compiler = (k: Kernel, agent: RocmAgent): AmdgpuCode => {
    const symbol = `${k.name}.kd`;
    const pointers = k.buffers.length + (k.uses.checks ? 1 : 0);
    const args: AmdgpuKernelMeta["args"] = Array.from({ length: pointers }, (_, i) => ({ offset: 8 * i, size: 8, kind: "global_buffer", binding: i < k.buffers.length ? i : "fault" as const }));
    const h = 8 * pointers;
    for (const [i, a] of ["x", "y", "z"].entries()) {
      args.push({ offset: h + 4 * i, size: 4, kind: `hidden_block_count_${a}` });
      args.push({ offset: h + 12 + 2 * i, size: 2, kind: `hidden_group_size_${a}` });
      args.push({ offset: h + 18 + 2 * i, size: 2, kind: `hidden_remainder_${a}` });
      args.push({ offset: h + 40 + 8 * i, size: 8, kind: `hidden_global_offset_${a}` });
    }
    args.push({ offset: h + 64, size: 2, kind: "hidden_grid_dims" });
    args.push({ offset: h + 80, size: 8, kind: "hidden_hostcall_buffer" });
    const meta: AmdgpuKernelMeta = {
      name: k.name, symbol, kernargSize: h + 256, kernargAlign: 8,
      groupSegmentSize: k.shared.reduce((n, s) => n + s.count * 4, 0), privateSegmentSize: 0,
      wavefrontSize: agent.caps.subgroupSize, workgroupSize: [...k.workgroup], args,
    };
    this.kernels.set(symbol, { kernel: k, meta });
    return { elf: new TextEncoder().encode(`FAKE-ELF ${agent.isa} ${symbol} ${JSON.stringify(k.workgroup)}`), meta };
  };

  // ---- runtime ------------------------------------------------------------------------------------------

  init(): { ok: boolean; code: number; codeName: string } {
    this.initCount++;
    return { ok: true, code: 0, codeName: "HSA_STATUS_SUCCESS" };
  }
  shutDown(): void {
    this.initCount--;
  }
  agents(): bigint[] {
    return [CPU, GPU];
  }
  agentInfoU32(agent: bigint, attr: number): number {
    const gpu = agent === GPU;
    const t: Record<number, number> = {
      17: gpu ? 1 : 0, 2: gpu ? 1 : 0, 4: gpu ? 0 : 1, 6: this.spec.wave, 8: 1024, 14: this.spec.queueMax, 0xa002: 304,
    };
    if (!(attr in t)) throw new HsaError("hsa_agent_get_info", 0x1001);
    return t[attr];
  }
  agentInfo(agent: bigint, attr: number, bytes: number): Uint8Array {
    if (agent !== GPU || attr !== 9) throw new HsaError("hsa_agent_get_info", 0x1001);
    return new Uint8Array(Uint32Array.from([0xffffffff, 0xffffffff, 0xffffffff]).buffer).subarray(0, bytes);
  }
  agentName(agent: bigint, attr = 0): string {
    if (agent === CPU) return "Fake EPYC";
    return attr === 0xa009 ? this.spec.product : this.spec.gfx;
  }
  isas(agent: bigint): bigint[] {
    return agent === GPU ? [ISA] : [];
  }
  isaName(): string {
    return `amdgcn-amd-amdhsa--${this.spec.gfx}:sramecc+:xnack-`;
  }
  memoryPools(agent: bigint): bigint[] {
    return agent === GPU ? [POOL_VRAM, POOL_LDS] : [POOL_FINE, POOL_KERNARG];
  }
  memoryPoolInfoU32(pool: bigint, attr: number): number {
    if (attr === 0) return pool === POOL_LDS ? 3 : 0; // segment
    if (attr === 1) return pool === POOL_VRAM ? 4 : pool === POOL_FINE ? 2 : pool === POOL_KERNARG ? 3 : 0; // flags
    if (attr === 5) return pool === POOL_LDS ? 0 : 1; // alloc allowed
    throw new HsaError("hsa_amd_memory_pool_get_info", 0x1001);
  }
  memoryPoolInfoU64(pool: bigint, attr: number): bigint {
    if (attr === 2) return pool === POOL_LDS ? BigInt(this.spec.ldsBytes) : 192n << 30n;
    throw new HsaError("hsa_amd_memory_pool_get_info", 0x1001);
  }
  memoryPoolAllocate(pool: bigint, bytes: number | bigint): bigint {
    const n = Number(bytes);
    if (n > 1 << 30) throw new HsaError("hsa_amd_memory_pool_allocate", 0x1008);
    let base: bigint, data: ArrayBuffer, start = 0;
    if (pool === POOL_VRAM) {
      data = new ArrayBuffer(n);
      base = this.next;
      this.next += BigInt(Math.ceil(n / 4096) * 4096 + 4096);
    } else {
      data = new ArrayBuffer(n + 4096);
      const p = ptrOf(new Uint8Array(data));
      base = (p + 4095n) & ~4095n;
      start = Number(base - p);
    }
    this.allocs.push({ base, bytes: n, data, start, pool, access: new Set([pool === POOL_VRAM ? GPU : CPU]) });
    return base;
  }
  memoryPoolFree(ptr: bigint): void {
    const i = this.allocs.findIndex((a) => a.base === ptr);
    if (i < 0) throw new HsaError("hsa_amd_memory_pool_free", 0x1001);
    this.allocs.splice(i, 1);
  }
  agentsAllowAccess(agents: readonly bigint[], ptr: bigint): void {
    const a = this.allocs.find((x) => x.base === ptr);
    if (!a) throw new HsaError("hsa_amd_agents_allow_access", 0x1001);
    for (const g of agents) a.access.add(g);
  }
  memoryFill(ptr: bigint, value: number, count: number | bigint): void {
    new Uint32Array(this.view(ptr, Number(count) * 4, "fill").buffer, this.at(ptr).off, Number(count)).fill(value);
  }
  get liveAllocations(): number {
    return this.allocs.length;
  }
  get liveSignals(): number {
    return this.signals.size;
  }
  /** The allocation holding `addr`. */
  at(addr: bigint): { a: Alloc; off: number } {
    for (const a of this.allocs) if (addr >= a.base && addr < a.base + BigInt(a.bytes)) return { a, off: a.start + Number(addr - a.base) };
    throw new Error(`fake HSA: 0x${addr.toString(16)} is in no allocation`);
  }
  /** Bytes at a device address, as the GPU sees them (host allocations must have been opened to the GPU). */
  view(addr: bigint, n: number, what: string): Uint8Array {
    const { a, off } = this.at(addr);
    if (!a.access.has(GPU)) this.violations.push(`${what}: GPU access to 0x${addr.toString(16)} was never allowed`);
    if (off + n > a.start + a.bytes) throw new Error(`fake HSA: ${what}: ${n} bytes at 0x${addr.toString(16)} overrun the allocation`);
    return new Uint8Array(a.data, off, n);
  }
  /** Whether `addr` lies in memory of `pool`. */
  inPool(addr: bigint, pool: "kernarg" | "vram" | "fine"): boolean {
    const { a } = this.at(addr);
    return a.pool === { kernarg: POOL_KERNARG, vram: POOL_VRAM, fine: POOL_FINE }[pool];
  }

  // ---- signals ------------------------------------------------------------------------------------------

  signalCreate(initial: bigint | number = 1n): bigint {
    const h = this.handles++;
    this.signals.set(h, { value: BigInt(initial) });
    return h;
  }
  signalDestroy(s: bigint): void {
    if (!this.signals.delete(s)) throw new HsaError("hsa_signal_destroy", 0x1006);
  }
  signalValue(s: bigint): bigint {
    return this.sig(s).value;
  }
  private sig(s: bigint): { value: bigint } {
    const x = this.signals.get(s);
    if (!x) throw new Error(`fake HSA: no signal 0x${s.toString(16)}`);
    return x;
  }
  signalLoad(s: bigint): bigint {
    return this.sig(s).value;
  }
  signalAdd(s: bigint, d: bigint | number): void {
    this.sig(s).value += BigInt(d);
  }
  signalStore(s: bigint, v: bigint | number): void {
    const q = this.queue;
    if (q && s === q.doorbell) return this.ring(BigInt(v));
    this.sig(s).value = BigInt(v);
  }

  // ---- the queue ----------------------------------------------------------------------------------------

  queueCreate(agent: bigint, size: number, o: { onError?: (status: number, queue: bigint) => void } = {}): HsaQueue {
    if (agent !== GPU || size > this.spec.queueMax || (size & (size - 1)) !== 0) throw new HsaError("hsa_queue_create", 0x1002);
    const ring = new ArrayBuffer(size * 64);
    const words = new Uint32Array(ring);
    for (let i = 0; i < size; i++) words[i * 16] = HSA_PACKET_TYPE_INVALID;
    const doorbell = this.signalCreate(0n);
    this.queueStruct = new Uint8Array(40);
    const q: HsaQueue = {
      ptr: ptrOf(this.queueStruct),
      info: { type: 1, features: 1, base_address: ptrOf(new Uint8Array(ring)), doorbell_signal: doorbell, size, reserved1: 0, id: 1n },
      onError: null,
    };
    this.queue = { q, ring, size, read: 0n, write: 0n, doorbell, onError: o.onError, error: false };
    return q;
  }
  queueDestroy(): void {
    if (this.queue) this.signals.delete(this.queue.doorbell);
    this.queue = undefined;
  }
  queueLoadReadIndex(): bigint {
    const q = this.queue!;
    if (this.mode === "lazy") this.consume(q.write - 1n);
    return q.read;
  }
  queueLoadWriteIndex(): bigint {
    return this.queue!.write;
  }
  queueStoreWriteIndex(_q: HsaQueue, index: bigint): void {
    const q = this.queue!;
    const words = new Uint32Array(q.ring);
    // Packets become visible only when their headers are stored, after this: every new slot must still read INVALID.
    for (let i = q.write; i < index; i++) {
      const type = words[Number(i % BigInt(q.size)) * 16] & 0xff;
      if (type !== HSA_PACKET_TYPE_INVALID) this.violations.push(`slot of packet ${i} had a valid header before the write index was published`);
    }
    if (index - q.read > BigInt(q.size)) this.violations.push(`write index ${index} overruns the ring (read index ${q.read}, ${q.size} slots)`);
    q.write = index;
  }
  private ring(value: bigint): void {
    const q = this.queue!;
    this.doorbells.push(value);
    if (value !== q.write - 1n) this.violations.push(`doorbell ${value} is not the last write index ${q.write - 1n}`);
    if (this.mode === "run") this.consume(value);
  }
  /** The packet processor: consumes packets up to index `last`. */
  consume(last: bigint): void {
    const q = this.queue!;
    const words = new Uint32Array(q.ring);
    while (!q.error && q.read <= last) {
      const slot = Number(q.read % BigInt(q.size));
      const bytes = new Uint8Array(q.ring, slot * 64, 64);
      const dv = new DataView(q.ring, slot * 64, 64);
      const type = dv.getUint16(0, true) & 0xff;
      const entry: LoggedPacket = { index: q.read, slot, bytes: bytes.slice() };
      if (type === HSA_PACKET_TYPE_KERNEL_DISPATCH) this.dispatch(dv, entry);
      else if (type === HSA_PACKET_TYPE_BARRIER_AND) {
        for (let i = 0; i < 5; i++) {
          const dep = dv.getBigUint64(8 + 8 * i, true);
          if (dep !== 0n && this.sig(dep).value !== 0n) this.violations.push(`barrier-AND at ${q.read} waits on a signal that is not 0`);
        }
      } else {
        this.violations.push(`packet ${q.read} (slot ${slot}) has type ${type}`);
        return;
      }
      this.log.push(entry);
      if (q.error) return; // the queue stops at the faulting packet; its completion never fires
      const done = dv.getBigUint64(56, true);
      if (done !== 0n) this.sig(done).value -= 1n;
      if (done !== 0n && this.profiling && type === HSA_PACKET_TYPE_KERNEL_DISPATCH) {
        // A made-up clock: 100 ticks between dispatches, each taking 1000 ticks plus 10 per packet consumed so far.
        const start = this.clock += 100n;
        this.clock += 1000n + 10n * BigInt(this.log.length);
        this.stamps.set(done, { start, end: this.clock });
      }
      words[slot * 16] = HSA_PACKET_TYPE_INVALID; // the slot is free again
      q.read++;
    }
  }

  private dispatch(dv: DataView, entry: LoggedPacket): void {
    const obj = dv.getBigUint64(32, true), karg = dv.getBigUint64(40, true);
    const symbol = this.objects.get(obj);
    if (!symbol) throw new Error(`fake HSA: dispatch of unknown kernel object 0x${obj.toString(16)}`);
    const { kernel, meta } = this.kernels.get(symbol)!;
    entry.kernel = kernel.name;
    if (!this.inPool(karg, "kernarg")) this.violations.push(`${kernel.name}: kernarg segment outside the kernarg pool`);
    if (karg % BigInt(Math.max(16, meta.kernargAlign)) !== 0n) this.violations.push(`${kernel.name}: kernarg segment misaligned`);
    const args = this.view(karg, meta.kernargSize, `${kernel.name} kernargs`);
    entry.kernarg = args.slice();
    const av = new DataView(args.buffer, args.byteOffset, args.byteLength);
    const wg = [0, 1, 2].map((i) => dv.getUint16(4 + 2 * i, true));
    const items = [0, 1, 2].map((i) => dv.getUint32(12 + 4 * i, true));
    const grid = items.map((n, i) => n / wg[i]) as [number, number, number];
    if (wg.join() !== kernel.workgroup.join()) this.violations.push(`${kernel.name}: workgroup ${wg} in the packet`);
    for (const a of meta.args) {
      const axis = "xyz".indexOf(a.kind.slice(-1));
      if (a.kind.startsWith("hidden_block_count_") && av.getUint32(a.offset, true) !== grid[axis]) this.violations.push(`${kernel.name}: ${a.kind}`);
      if (a.kind.startsWith("hidden_group_size_") && av.getUint16(a.offset, true) !== wg[axis]) this.violations.push(`${kernel.name}: ${a.kind}`);
    }
    const ptrs = meta.args.filter((a) => a.kind === "global_buffer").map((a) => av.getBigUint64(a.offset, true));
    const js = renderJs(kernel, { subgroupSize: this.spec.wave });
    const views = js.bind(kernel.buffers.map((_, i) => {
      const { a, off } = this.at(ptrs[i]);
      if (!a.access.has(GPU)) this.violations.push(`${kernel.name}: binding ${i} in memory the GPU may not access`);
      return { buffer: a.data, offset: off, bytes: a.start + a.bytes - off };
    }));
    try {
      js.run(views, grid);
    } catch (e) {
      if (!(e instanceof JsKernelFault)) throw e;
      const word = this.view(ptrs[kernel.buffers.length], 4, "fault word");
      new DataView(word.buffer, word.byteOffset, 4).setUint32(0, e.code, true);
      this.queueError(HSA_STATUS_ERROR_EXCEPTION);
    }
  }
  /** The queue stops and the error callback runs on a later turn of the event loop. */
  queueError(status: number): void {
    const q = this.queue!;
    q.error = true;
    const cb = q.onError, ptr = q.q.ptr;
    if (cb) setTimeout(() => cb(status, ptr), 0);
  }
  /** A GPU memory fault reported through the system event handlers. */
  memoryFault(address: bigint): void {
    for (const h of this.eventHandlers) {
      setTimeout(() => (h as (e: unknown) => void)({ event_type: HSA_AMD_GPU_MEMORY_FAULT_EVENT, memory_fault: { agent: GPU, virtual_address: address, fault_reason_mask: 0x10 } }), 0);
    }
  }
  registerSystemEventHandler(handler: (e: never) => void): { ptr: bigint; close(): void } {
    this.eventHandlers.push(handler);
    return { ptr: 1n, close: () => {} };
  }

  // ---- profiling ----------------------------------------------------------------------------------------

  profiling = false;
  private clock = 0n;
  private readonly stamps = new Map<bigint, { start: bigint; end: bigint }>();
  /** Ticks per second of the system timestamp (HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY): 100 MHz. */
  systemInfoU64(attr: number): bigint {
    if (attr !== 3) throw new HsaError("hsa_system_get_info", 0x1001);
    return 100_000_000n;
  }
  profilingSetEnabled(_q: HsaQueue, on: boolean): void {
    this.profiling = on;
  }
  dispatchTime(agent: bigint, signal: bigint): { start: bigint; end: bigint } {
    const t = this.stamps.get(signal);
    if (agent !== GPU || !t) throw new HsaError("hsa_amd_profiling_get_dispatch_time", 0x1006);
    return t;
  }

  // ---- code objects -------------------------------------------------------------------------------------

  /** Wraps a real compiler (the amdgpu renderer's): its code objects load here, and their kernels run as JS. */
  wrap(compile: (k: Kernel, agent: RocmAgent) => AmdgpuCode): (k: Kernel, agent: RocmAgent) => AmdgpuCode {
    return (k, agent) => {
      const code = compile(k, agent);
      this.kernels.set(code.meta.symbol, { kernel: k, meta: code.meta });
      const known = this.elfSymbols.get(code.elf) ?? [];
      this.elfSymbols.set(code.elf, [...known, code.meta.symbol]);
      return code;
    };
  }
  private readonly elfSymbols = new WeakMap<Uint8Array, string[]>();

  codeObjectReaderFromMemory(code: Uint8Array): bigint {
    const real = this.elfSymbols.get(code);
    const m = real ? undefined : /^FAKE-ELF (\S+) (\S+)/.exec(new TextDecoder().decode(code));
    if (!real && !m) throw new HsaError("hsa_code_object_reader_create_from_memory", 0x1010);
    if (real && !(code[0] === 0x7f && code[1] === 0x45 && code[18] === 224)) this.violations.push("a code object that is not an AMDGPU ELF");
    const h = this.handles++;
    this.readers.set(h, real ?? [m![2]]);
    return h;
  }
  codeObjectReaderDestroy(r: bigint): void {
    if (!this.readers.delete(r)) throw new HsaError("hsa_code_object_reader_destroy", 0x1021);
  }
  executableCreate(profile: number): bigint {
    if (profile !== 0) this.violations.push(`executable created for profile ${profile}; the discrete GPU agent's is BASE (0)`);
    const h = this.handles++;
    this.exes.set(h, { symbols: [], frozen: false });
    return h;
  }
  executableLoadAgentCodeObject(exe: bigint, agent: bigint, reader: bigint): void {
    const e = this.exes.get(exe), sym = this.readers.get(reader);
    if (!e || !sym || agent !== GPU || e.frozen) throw new HsaError("hsa_executable_load_agent_code_object", 0x1011);
    e.symbols.push(...sym);
  }
  executableFreeze(exe: bigint): void {
    this.exes.get(exe)!.frozen = true;
  }
  executableDestroy(exe: bigint): void {
    if (!this.exes.delete(exe)) throw new HsaError("hsa_executable_destroy", 0x1011);
  }
  executableSymbol(exe: bigint, name: string, agent: bigint): bigint {
    const e = this.exes.get(exe);
    if (!e?.frozen || !e.symbols.includes(name) || agent !== GPU) throw new HsaError("hsa_executable_get_symbol_by_name", 0x1013);
    const h = this.handles++;
    this.objects.set(h, name);
    return h;
  }
  kernelInfo(symbol: bigint): { kernelObject: bigint; kernargSize: number; kernargAlign: number; groupSize: number; privateSize: number } {
    const name = this.objects.get(symbol)!;
    const m = this.kernels.get(name)!.meta;
    return {
      kernelObject: symbol, kernargSize: this.loaderSays.kernargSize ?? m.kernargSize, kernargAlign: m.kernargAlign,
      groupSize: this.loaderSays.groupSize ?? m.groupSegmentSize, privateSize: this.loaderSays.privateSize ?? m.privateSegmentSize,
    };
  }
}
