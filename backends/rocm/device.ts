// The ROCm device: libhsa-runtime64 (ROCr) through ffi/hsa.ts. One GPU agent, one single-producer AQL queue;
// everything the device does is a packet on that queue.
//
// - Memory (agent.ts): `device` buffers from the GPU's coarse-grained pool (zeroed at allocation);
//   `upload` and `readback` buffers from a fine-grained host pool the GPU may access, so a slot write is a
//   host memcpy and read() after a synchronize is a plain copy. Host writes into device buffers are staged
//   in fine-grained memory and copied by a copy dispatch on the queue (copy.ts), so they are ordered like
//   every other step.
// - compile: the kernel is compiled to a code object for the agent's gfx target (the amdgpu renderer),
//   loaded through a code object reader into a frozen executable; the kernel descriptor symbol gives the
//   kernel object and the kernarg/group/private sizes, which must match the code object's metadata.
// - record: a prebuilt packet list (packets.ts): one dispatch packet per step, its kernarg segment written
//   once into kernarg memory, a barrier-AND packet before a step only where it depends on one since the last
//   barrier (kernels/hazards.ts), and a tail barrier-AND that releases to system scope and decrements the
//   device's completion signal. replay: the list copied into the ring, one doorbell. run: the same list with
//   a barrier before every step, built per call (eager). With `timestamps`, each recorded step has a
//   completion signal the profiler stamps, which stepTimes reads.
// - synchronize: waits for the completion signal to reach 0 (one count per submission), busy for
//   `spinMicros`, then yielding every millisecond (so the runtime's callbacks reach the JS thread), up to the
//   timeout; past it the device is poisoned (DeviceTimeout).
// - Faults: a failing check stores its code into its kernel's fault word (fine-grained host memory) and
//   traps; the queue error callback reports the queue error, and synchronize raises KernelFault naming the
//   kernel whose word is set (DeviceLost when none is). A GPU memory fault (system event) raises DeviceLost.
//   Both poison the device: later calls throw Poisoned without touching the runtime.
import {
  type Hsa, HSA_AMD_GPU_MEMORY_FAULT_EVENT, HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY, type HsaQueue, hsaStatusName, openHsa, HSA_STATUS_ERROR_OUT_OF_RESOURCES,
} from "../../ffi/hsa.ts";
import { type Callback, ptrView } from "../../ffi/lib.ts";
import { existsSync } from "node:fs";
import type { Kernel } from "../../kernels/ir.ts";
import type { TargetSet } from "../../kernels/target.ts";
import { type CompiledKernel, type Device, type DeviceBuffer, type DeviceStep, type Recording, type StepTime, stepTimesOf } from "../device.ts";
import { DeviceLost, DeviceTimeout, ExecError, KernelFault, OutOfMemory, Poisoned, Unsupported } from "../errors.ts";
import { describeAgent, gpuAgents, type RocmAgent } from "./agent.ts";
import { COPY_GROUPS, copyKernel } from "./copy.ts";
import { CodeObjects, type FaultWord, type RocmCompiled } from "./code.ts";
import { AqlRing, PacketList, SYSTEM_ACQUIRE, TAIL } from "./packets.ts";
import { buildRecording, dispatchInto, KERNARG_ALIGN, RocmBuffer, RocmRecording, type RecordingContext } from "./recording.ts";
import { type AmdgpuCompiler, loadAmdgpuCompiler } from "./render.ts";
import type { RocmOptions } from "./options.ts";

export type { AmdgpuCompiler } from "./render.ts";

/** What a caller of the ROCm device may set, plus the stand-ins the tests pass (a runtime, a compiler). */
export interface RocmDeviceOptions extends RocmOptions {
  /** An opened runtime instead of the library (tests pass a stand-in); probeRocm initializes it. */
  runtime?: Hsa;
  /** The kernel compiler (probeRocm's default: the amdgpu renderer through comgr; the constructor needs one). */
  compile?: AmdgpuCompiler;
}

const FAULT_WORDS = 1024;
/** Bytes of a staging half kept for a copy's length word and kernargs (a copy kernel's are under 512). */
const STAGING_SLACK = 2048;

function kfdMayExist(): boolean {
  try {
    return existsSync("/dev/kfd");
  } catch {
    return true;
  }
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const alignUp = (n: number, a: number) => Math.ceil(n / a) * a;

/**
 * Opens the device, or says why it cannot (no library, no ROCm agent, no compiler for its target) as a
 * string. The compiler is looked for only once an agent is there.
 */
export async function probeRocm(opts: RocmDeviceOptions = {}): Promise<RocmDevice | string> {
  // ROCr reaches the GPUs through /dev/kfd: without it no agent can exist, and loading the runtime (~0.1 s)
  // is skipped. (Where the path cannot even be checked, the runtime decides.)
  if (!opts.library && !opts.runtime && !kfdMayExist()) return "no ROCm agent (no /dev/kfd)";
  let hsa: Hsa;
  try {
    hsa = opts.runtime ?? openHsa(opts.library);
  } catch (e) {
    return `libhsa-runtime64 is not available: ${(e as Error).message.split("\n")[0]}`;
  }
  const init = hsa.init();
  if (!init.ok) {
    // 0x1008 is what ROCr answers without /dev/kfd (no AMD GPU, or no access to it).
    const why = init.code === HSA_STATUS_ERROR_OUT_OF_RESOURCES ? "no /dev/kfd or no access to it" : init.codeName;
    return `no ROCm agent (hsa_init: ${why})`;
  }
  let dev: RocmDevice | undefined;
  const fail = (why: string) => {
    try {
      hsa.shutDown();
    } catch {
      // The runtime is dropped either way.
    }
    return why;
  };
  try {
    if (gpuAgents(hsa).length <= (opts.agent ?? 0)) return fail(`no ROCm agent${opts.agent ? ` ${opts.agent}` : ""}`);
    const compile = opts.compile ?? await loadAmdgpuCompiler();
    if (typeof compile === "string") return fail(`rocm: ${compile}`);
    dev = new RocmDevice(hsa, { ...opts, compile });
    // The copy kernels every write needs: a target this build cannot compile for opens as absent (auto moves on).
    dev.compile(copyKernel("u32"));
    dev.compile(copyKernel("u8"));
    return dev;
  } catch (e) {
    const why = (e as Error).message.split("\n")[0];
    if (!dev) return fail(why);
    await dev.destroy();
    return why;
  }
}

export class RocmDevice implements Device {
  readonly target: TargetSet;
  poisoned: string | undefined;
  readonly agent: RocmAgent;
  private readonly timeoutMs: number;
  private readonly spinMicros: number;
  private readonly queue: HsaQueue;
  /** The queue's ring (tests read its doorbell count). */
  readonly ring: AqlRing;
  /** Counts submissions not yet complete: +1 per submission, -1 by each tail packet. */
  private readonly done: bigint;
  private readonly events: Callback;
  private queueError: number | undefined;
  private memoryFault: string | undefined;
  private readonly buffers = new Set<RocmBuffer>();
  private readonly code: CodeObjects;
  private readonly faultChunks: { ptr: bigint; words: Uint32Array; used: number }[] = [];
  private readonly recordings = new Set<RocmRecording>();
  /** Kernel lists submitted since the queue was last seen idle (to name a faulting one). */
  private inflight: RocmCompiled[][] = [];
  /** Releases of what eager runs and released recordings used, run once the queue is seen idle. */
  private transient: (() => void)[] = [];
  private submitted = 0;
  /** Timed recordings replayed since the queue was last idle. */
  private replayed: RocmRecording[] = [];
  /** Nanoseconds per profiler tick when the device times steps, else 0. */
  private readonly nsPerTick: number = 0;
  /** Something was submitted since the queue was last seen idle. */
  private busy = false;
  private staging: { ptr: bigint; view: Uint8Array; half: number; cur: number; used: number[]; fence: number[] } | undefined;
  private copies: { u32?: RocmCompiled; u8?: RocmCompiled } = {};
  private readonly stagingHalf: number;
  private readonly allBarriers: boolean;
  private destroyed = false;

  /** Prefer `probeRocm`; this takes an opened, initialized runtime. */
  constructor(readonly hsa: Hsa, opts: RocmDeviceOptions = {}) {
    this.timeoutMs = opts.timeoutMs ?? 600_000;
    this.spinMicros = opts.spinMicros ?? 20_000;
    if (!opts.compile) throw new Unsupported("rocm: RocmDevice needs a kernel compiler (probeRocm finds the amdgpu renderer's)");
    const compile = opts.compile;
    const gpus = gpuAgents(hsa);
    const index = opts.agent ?? 0;
    if (gpus.length <= index) throw new Unsupported(gpus.length ? `no ROCm agent ${index} (${gpus.length} present)` : "no ROCm agent");
    const agent = describeAgent(hsa, gpus[index]);
    if (typeof agent === "string") throw new Unsupported(`rocm: ${agent}`);
    this.agent = agent;
    this.code = new CodeObjects(hsa, agent, compile, () => this.faultWord());
    this.target = {
      backend: "rocm",
      device: `${agent.product} (${agent.gfx})`,
      caps: agent.caps,
      memory: { totalBytes: agent.deviceBytes },
      watchdogBudget: 0,
    };
    const ringPackets = opts.ringPackets ?? Math.min(agent.queueMaxSize, 4096);
    if (!Number.isInteger(ringPackets) || ringPackets < 2 || (ringPackets & (ringPackets - 1)) !== 0) {
      throw new Unsupported(`rocm: ring of ${ringPackets} packets (a power of two is needed)`);
    }
    this.stagingHalf = opts.stagingBytes ?? 4 << 20;
    this.allBarriers = opts.allBarriers ?? false;
    if (!(this.stagingHalf >= 4 * STAGING_SLACK && this.stagingHalf % 64 === 0)) throw new Unsupported(`rocm: staging of ${this.stagingHalf} bytes (at least ${4 * STAGING_SLACK}, a multiple of 64)`);
    // Runtime threads report through these; they only record what happened, synchronize raises it.
    this.events = hsa.registerSystemEventHandler((e) => {
      if (this.destroyed || e.event_type !== HSA_AMD_GPU_MEMORY_FAULT_EVENT || e.memory_fault.agent !== agent.gpu) return;
      this.memoryFault ??= `GPU memory fault at 0x${e.memory_fault.virtual_address.toString(16)} (reason 0x${e.memory_fault.fault_reason_mask.toString(16)})`;
    });
    // What is created here is released again if a later step fails: nothing half-made stays behind.
    const undo: (() => void)[] = [];
    try {
      this.done = hsa.signalCreate(0n);
      undo.push(() => hsa.signalDestroy(this.done));
      this.queue = hsa.queueCreate(agent.gpu, ringPackets, { onError: (status) => void (this.queueError ??= status) });
      undo.push(() => hsa.queueDestroy(this.queue));
      if (opts.timestamps) {
        hsa.profilingSetEnabled(this.queue, true);
        this.nsPerTick = 1e9 / Number(hsa.systemInfoU64(HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY));
      }
      this.ring = new AqlRing(hsa, this.queue);
      this.newFaultChunk();
    } catch (e) {
      this.destroyed = true;
      for (const u of undo.reverse()) {
        try {
          u();
        } catch {
          // Keep releasing the rest.
        }
      }
      throw e;
    }
  }

  // ---- errors ----------------------------------------------------------------------------------------

  private alive(): void {
    if (this.poisoned !== undefined) throw new Poisoned("rocm", this.poisoned);
  }
  /** The kernel whose check wrote its fault word, preferring the work in flight (in submission order). */
  private findFault(): { kernel: string; code: number } | undefined {
    for (const c of [...this.inflight.flat(), ...this.code.loaded()]) {
      const f = c.fault;
      if (f && f.words[f.index] !== 0) return { kernel: c.kernel.name, code: f.words[f.index] };
    }
    return undefined;
  }
  /** A fault the runtime reported (queue error, memory fault) as the error to throw; it poisons. */
  private reported(): ExecError | undefined {
    if (this.memoryFault !== undefined) {
      this.poisoned ??= this.memoryFault;
      return new DeviceLost("rocm", this.memoryFault);
    }
    if (this.queueError === undefined) return undefined;
    const f = this.findFault();
    if (f) {
      this.poisoned ??= `kernel ${f.kernel} failed check with code ${f.code} (${hsaStatusName(this.queueError)})`;
      return new KernelFault("rocm", f.kernel, f.code);
    }
    const why = `queue error ${hsaStatusName(this.queueError)}`;
    this.poisoned ??= why;
    return new DeviceLost("rocm", why);
  }
  /** Runs runtime calls; a failure there (an HsaError) poisons the device and becomes DeviceLost. */
  private guard<T>(what: string, f: () => T): T {
    this.alive();
    try {
      return f();
    } catch (e) {
      if (e instanceof ExecError) throw e;
      const msg = (e as Error).message;
      this.poisoned ??= `${what}: ${msg}`;
      throw new DeviceLost("rocm", `${what}: ${msg}`);
    }
  }
  private timeout(what: string, ms: number): DeviceTimeout {
    this.poisoned ??= `${what} did not finish within ${ms} ms`;
    return new DeviceTimeout("rocm", what, ms);
  }

  // ---- completion ------------------------------------------------------------------------------------

  /** Submissions still running (the completion signal's value). */
  private pending(): number {
    return Number(this.hsa.signalLoad(this.done));
  }
  /** The queue ran dry: kernel lists, eager kernargs and staging memory are free. */
  private idle(): void {
    this.busy = false;
    for (const r of this.replayed) r.timed = true;
    this.replayed = [];
    this.inflight = [];
    for (const release of this.transient) release();
    this.transient = [];
    if (this.staging) {
      this.staging.used.fill(0);
      this.staging.fence.fill(0);
    }
  }
  /** Blocking, bounded wait until at most `left` submissions are pending (write paths only). */
  private waitPending(left: number, what: string): void {
    const deadline = performance.now() + this.timeoutMs;
    for (;;) {
      const r = this.reported();
      if (r) throw r;
      const n = this.pending();
      if (n <= left) {
        if (n === 0) this.idle();
        return;
      }
      if (performance.now() > deadline) throw this.timeout(what, this.timeoutMs);
    }
  }
  private submit(list: PacketList, kernels: RocmCompiled[]): void {
    this.hsa.signalAdd(this.done, 1);
    this.submitted++;
    this.busy = true;
    if (this.inflight.length < 4096) this.inflight.push(kernels);
    if (!this.ring.submit(list, this.timeoutMs)) throw this.timeout("a free queue slot", this.timeoutMs);
  }

  // ---- memory ----------------------------------------------------------------------------------------

  private buf(b: DeviceBuffer): RocmBuffer {
    if (!(b instanceof RocmBuffer) || !this.buffers.has(b)) throw new Unsupported("rocm: not a live buffer of this device");
    return b;
  }
  private range(b: DeviceBuffer, offset: number, bytes: number): RocmBuffer {
    const rb = this.buf(b);
    if (!Number.isInteger(offset) || !Number.isInteger(bytes) || offset < 0 || bytes < 0 || offset + bytes > rb.bytes) {
      throw new Unsupported(`rocm: range ${offset}+${bytes} outside a ${rb.bytes}-byte buffer`);
    }
    return rb;
  }
  /** Fine-grained host memory the GPU may access, zeroed, with its host view. */
  private hostAlloc(pool: bigint, n: number): { ptr: bigint; view: Uint8Array } {
    const ptr = this.hsa.memoryPoolAllocate(pool, n);
    try {
      this.hsa.agentsAllowAccess([this.agent.gpu], ptr);
    } catch (e) {
      this.hsa.memoryPoolFree(ptr);
      throw e;
    }
    const view = new Uint8Array(ptrView(ptr, n));
    view.fill(0);
    return { ptr, view };
  }

  alloc(bytes: number, usage: "device" | "upload" | "readback"): DeviceBuffer {
    this.alive();
    if (!Number.isInteger(bytes) || bytes < 0) throw new Unsupported(`rocm: cannot allocate ${bytes} bytes`);
    const n = Math.max(16, alignUp(bytes, 16));
    let b: RocmBuffer;
    try {
      if (usage === "device") {
        const ptr = this.hsa.memoryPoolAllocate(this.agent.pools.device, n);
        try {
          this.hsa.memoryFill(ptr, 0, n / 4);
        } catch (e) {
          this.hsa.memoryPoolFree(ptr);
          throw e;
        }
        b = new RocmBuffer(bytes, ptr);
      } else {
        const h = this.hostAlloc(this.agent.pools.host, n);
        b = new RocmBuffer(bytes, h.ptr, h.view);
      }
    } catch (e) {
      if (e instanceof ExecError) throw e;
      // ROCr answers an exhausted pool with OUT_OF_RESOURCES or INVALID_ALLOCATION; neither poisons.
      throw new OutOfMemory("rocm", bytes, (e as Error).message);
    }
    this.buffers.add(b);
    return b;
  }

  free(b: DeviceBuffer): void {
    if (b instanceof RocmBuffer && b.freed) return;
    const rb = this.buf(b);
    rb.freed = true;
    this.buffers.delete(rb);
    if (this.poisoned !== undefined) return; // pending work may still reference it
    this.guard("free", () => this.hsa.memoryPoolFree(rb.ptr));
  }

  write(b: DeviceBuffer, offset: number, data: Uint8Array): void {
    this.alive();
    const rb = this.range(b, offset, data.byteLength);
    if (rb.host) {
      // A submitted step may still read the old bytes: host memory changes only once the queue is idle.
      if (this.busy && this.pending() > 0) this.waitPending(0, "write to a slot");
      rb.host.set(data, offset);
      return;
    }
    const step = this.stagingHalf - STAGING_SLACK;
    for (let at = 0; at < data.byteLength; at += step) {
      const chunk = data.subarray(at, Math.min(data.byteLength, at + step));
      const words = chunk.byteLength % 4 === 0 && (offset + at) % 4 === 0;
      const t = this.transfer(chunk.byteLength, words);
      t.view.set(chunk);
      t.copy(rb.ptr + BigInt(offset + at), t.ptr);
    }
  }

  /**
   * Room for `bytes` of data in the staging memory, with the copy's length word and kernargs beside it, and
   * the copy dispatch to submit. A full half is left for the other, which is reused once the last copy that
   * used it has run.
   */
  private transfer(bytes: number, words: boolean): { ptr: bigint; view: Uint8Array; copy: (dst: bigint, src: bigint) => void } {
    const st = this.staging ??= this.newStaging();
    const c = this.copyKernel(words ? "u32" : "u8");
    const data = alignUp(bytes, KERNARG_ALIGN);
    const need = data + KERNARG_ALIGN + alignUp(c.layout.bytes, KERNARG_ALIGN);
    if (need > st.half) throw new Unsupported(`rocm: a ${bytes}-byte copy and its ${c.layout.bytes} bytes of kernargs exceed a ${st.half}-byte staging half`);
    if (st.used[st.cur] + need > st.half) {
      st.fence[st.cur] = this.submitted;
      st.cur ^= 1;
      if (st.fence[st.cur]) this.waitPending(this.submitted - st.fence[st.cur], "staging memory");
      st.used[st.cur] = 0;
    }
    const base = st.cur * st.half + st.used[st.cur];
    st.used[st.cur] += need;
    const lenAt = base + data, argAt = lenAt + KERNARG_ALIGN;
    const at = (o: number) => st.ptr + BigInt(o);
    const copy = (dst: bigint, src: bigint) => {
      const dv = new DataView(st.view.buffer, st.view.byteOffset);
      dv.setUint32(lenAt, words ? bytes / 4 : bytes, true);
      const list = new PacketList(2);
      dispatchInto(list, c, [dst, src, at(lenAt)], [COPY_GROUPS, 1, 1], dv, argAt, at(argAt), SYSTEM_ACQUIRE);
      list.barrierAnd(TAIL, [], this.done);
      this.guard("copy", () => this.submit(list, [c]));
    };
    return { ptr: at(base), view: st.view.subarray(base, base + bytes), copy };
  }

  private newStaging(): NonNullable<RocmDevice["staging"]> {
    const half = this.stagingHalf;
    const h = this.allocating(2 * half, () => this.hostAlloc(this.agent.pools.kernarg, 2 * half));
    return { ptr: h.ptr, view: h.view, half, cur: 0, used: [0, 0], fence: [0, 0] };
  }
  /** Runs an allocation; the runtime's refusal becomes OutOfMemory (which does not poison). */
  private allocating<T>(bytes: number, f: () => T): T {
    this.alive();
    try {
      return f();
    } catch (e) {
      if (e instanceof ExecError) throw e;
      throw new OutOfMemory("rocm", bytes, (e as Error).message);
    }
  }

  read(b: DeviceBuffer, offset: number, bytes: number): Promise<Uint8Array> {
    let rb: RocmBuffer;
    try {
      this.alive();
      rb = this.range(b, offset, bytes);
    } catch (e) {
      return Promise.reject(e);
    }
    if (rb.host) return Promise.resolve(rb.host.slice(offset, offset + bytes));
    const r = this.reading.then(() => this.readDevice(rb, offset, bytes));
    this.reading = r.then(() => {}, () => {});
    return r;
  }
  private reading: Promise<void> = Promise.resolve();
  /** Device memory back to the host: word copies into staging memory, each synchronized, in chunks. */
  private async readDevice(rb: RocmBuffer, offset: number, bytes: number): Promise<Uint8Array> {
    const out = new Uint8Array(bytes);
    const chunk = (this.stagingHalf - STAGING_SLACK) & ~3;
    for (let at = 0; at < bytes;) {
      // Whole words covering [lo, hi): allocations are rounded up to 16 bytes, so they stay inside.
      const m = Math.min(chunk - 4, bytes - at);
      const lo = offset + at, hi = lo + m, from = lo & ~3;
      const n = alignUp(hi, 4) - from;
      const t = this.transfer(n, true);
      t.copy(t.ptr, rb.ptr + BigInt(from));
      await this.synchronize(this.timeoutMs);
      out.set(t.view.subarray(lo - from, hi - from), at);
      at += m;
    }
    return out;
  }

  // ---- kernels ---------------------------------------------------------------------------------------

  private newFaultChunk(): void {
    const h = this.hostAlloc(this.agent.pools.host, FAULT_WORDS * 4);
    this.faultChunks.push({ ptr: h.ptr, words: new Uint32Array(h.view.buffer, h.view.byteOffset, FAULT_WORDS), used: 0 });
  }
  private faultWord(): FaultWord {
    if (this.faultChunks[this.faultChunks.length - 1].used === FAULT_WORDS) this.newFaultChunk();
    const ch = this.faultChunks[this.faultChunks.length - 1];
    const index = ch.used++;
    return { words: ch.words, index, ptr: ch.ptr + BigInt(index * 4) };
  }

  private copyKernel(elem: "u32" | "u8"): RocmCompiled {
    return this.copies[elem] ??= this.compile(copyKernel(elem)) as RocmCompiled;
  }

  compile(kernel: Kernel): CompiledKernel {
    this.alive();
    return this.code.compile(kernel, (what, f) => this.guard(what, f));
  }

  /** What building a packet list needs of the device. */
  private readonly rec: RecordingContext = {
    caps: () => this.target.caps,
    range: (b, offset, bytes) => this.range(b, offset, bytes),
    owns: (c) => this.code.owns(c),
    copyKernel: (elem) => this.copyKernel(elem),
    kernarg: (bytes) => this.allocating(bytes, () => this.hostAlloc(this.agent.pools.kernarg, bytes)),
    freeKernarg: (ptr) => this.hsa.memoryPoolFree(ptr),
    signal: () => this.guard("timestamps", () => this.hsa.signalCreate(1n)),
    destroySignal: (sg) => this.hsa.signalDestroy(sg),
    done: () => this.done,
  };

  record(steps: DeviceStep[]): Recording {
    this.alive();
    const rec = buildRecording(this.rec, steps, this.allBarriers, this.nsPerTick > 0);
    this.recordings.add(rec);
    return rec;
  }

  replay(rec: Recording): void {
    this.alive();
    if (!(rec instanceof RocmRecording) || !this.recordings.has(rec)) throw new Unsupported("rocm: not a live recording of this device");
    if (rec.steps === 0) return;
    const r = this.reported();
    if (r) throw r;
    this.guard("replay", () => this.submit(rec.list, rec.kernels));
    if (rec.signals.length) this.replayed.push(rec);
  }

  /**
   * Device µs of each step of the recording's latest synchronized replay, from the start and end times the
   * packet processor stamped on each step's completion signal (RocmDeviceOptions.timestamps); undefined when
   * the device does not time steps or no replay of it has completed yet.
   */
  stepTimes(rec: Recording): StepTime[] | undefined {
    if (!(rec instanceof RocmRecording) || !rec.signals.length || !rec.timed || !this.nsPerTick) return undefined;
    this.alive();
    const ticks = new BigUint64Array(2 * rec.signals.length);
    rec.signals.forEach((sg, i) => {
      const t = this.guard("stepTimes", () => this.hsa.dispatchTime(this.agent.gpu, sg));
      ticks[2 * i] = t.start;
      ticks[2 * i + 1] = t.end;
    });
    return stepTimesOf(ticks, this.nsPerTick);
  }

  run(steps: DeviceStep[]): void {
    this.alive();
    if (steps.length === 0) return;
    const rec = buildRecording(this.rec, steps, true, false);
    if (rec.kernarg) this.transient.push(() => this.hsa.memoryPoolFree(rec.kernarg));
    this.guard("run", () => this.submit(rec.list, rec.kernels));
  }

  async synchronize(timeoutMs: number): Promise<void> {
    this.alive();
    const t0 = performance.now();
    const spinUntil = t0 + this.spinMicros / 1000, deadline = t0 + timeoutMs;
    for (;;) {
      const r = this.reported();
      if (r) throw r;
      if (!this.busy || this.pending() <= 0) {
        this.idle();
        return;
      }
      const now = performance.now();
      if (now > deadline) throw this.timeout("synchronize", timeoutMs);
      // The runtime's thread-safe callbacks (queue errors, memory faults) run only when the event loop turns.
      if (now > spinUntil) await sleep(1);
      this.alive();
    }
  }

  releaseRecording(rec: Recording): void {
    if (!(rec instanceof RocmRecording) || rec.released) return;
    rec.released = true;
    this.recordings.delete(rec);
    if (this.poisoned !== undefined) return;
    const release = () => {
      for (const sg of rec.signals) this.hsa.signalDestroy(sg);
      if (rec.kernarg) this.hsa.memoryPoolFree(rec.kernarg);
    };
    // Its packets may still be running: then its memory and signals are freed with the next idle queue.
    if (this.busy && this.pending() > 0) this.transient.push(release);
    else this.guard("releaseRecording", release);
  }

  async destroy(): Promise<void> {
    if (this.destroyed) return;
    const clean = this.poisoned === undefined;
    if (clean) {
      try {
        await this.synchronize(this.timeoutMs);
        for (const r of [...this.recordings]) this.releaseRecording(r);
        for (const b of [...this.buffers]) this.free(b);
        this.code.release();
        for (const ch of this.faultChunks) this.hsa.memoryPoolFree(ch.ptr);
        if (this.staging) this.hsa.memoryPoolFree(this.staging.ptr);
        this.idle();
      } catch {
        // Best effort: the queue and the runtime are released below either way.
      }
    }
    this.destroyed = true;
    this.poisoned ??= "destroyed";
    try {
      this.hsa.queueDestroy(this.queue);
      this.hsa.signalDestroy(this.done);
      // The system event handler stays registered (ROCr cannot remove one): `events` is never closed, and it
      // ignores a destroyed device.
      this.hsa.shutDown();
    } catch {
      // A runtime that faulted may refuse; nothing more to release.
    }
  }
}
