// The PTX device: libcuda's driver API through ffi/cuda.ts. One primary context and one non-blocking stream;
// everything the device does is ordered on that stream.
//
// - Memory: `device` and `upload` buffers are cuMemAlloc'd (zeroed). Host writes go through a pinned staging
//   ring as async copies on the stream, so a write is ordered before the next replay without a wait. Small
//   `upload` buffers (slots) live in slabs with a pinned host shadow instead (slots.ts): a write is a host
//   memcpy, and each recording or eager run starts with one copy per slab it binds.
//   `readback` buffers are mapped pinned host memory: kernels store into them directly and read() after a
//   synchronize is a plain memcpy (no driver call on the per-token path).
// - compile: the kernel is rendered to PTX (kernels/render/ptx.ts) and JIT-compiled by cuModuleLoadDataEx.
//   Identical PTX shares one module (module.ts loads it).
// - run: cuLaunchKernel / cuMemcpyDtoDAsync per step (eager). record: the same calls under
//   cuStreamBeginCapture -> cuStreamEndCapture -> cuGraphInstantiate (capture.ts); replay: cuGraphLaunch. Preparing steps
//   into launches and cuLaunchKernelEx (programmatic dependent launch) are launch.ts; the handles handles.ts;
//   the pinned fault words and read stage pinned.ts.
// - Collectives (a tensor-parallel rank, once backends/ptx/nccl.ts attached it to an NCCL group): a collective
//   step is an NCCL call on this stream; a recording holding one is captured together with the other ranks'
//   (the group pairs them and drives the capture through the "group capture" methods at the end of the class).
// - synchronize: polls cuStreamQuery (busy for `spinMicros`, then yielding every millisecond) up to the
//   timeout, since cuStreamSynchronize cannot be bounded. A timeout poisons (DeviceTimeout). With a mark
//   (Device.mark: an event recorded after a replay) it polls that event instead, so a step in flight waits for
//   itself and not for the steps launched behind it.
// - Faults: a failing check stores its code into its kernel's word of a host-mapped array, then traps. The
//   trap leaves a sticky CUDA error; the call that sees it finds the word and raises KernelFault naming the
//   kernel (DeviceLost when no word is set), and the device is poisoned: later calls throw Poisoned without
//   touching the driver.
import {
  CU_EVENT_DISABLE_TIMING, CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_PORTABLE, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, CU_STREAM_NON_BLOCKING,
  Cuda, CUDA_ERROR_NOT_READY, CUDA_STICKY_ERRORS, CudaError, type KernelArgType, openCuda,
} from "../../ffi/cuda.ts";
import { ptrView } from "../../ffi/lib.ts";
import { env } from "node:process";
import type { CollectiveDevice, CompiledKernel, DeviceBuffer, GroupStep, Recording } from "../device.ts";
import { DeviceLost, DeviceTimeout, ExecError, KernelFault, OutOfMemory, Poisoned, Unsupported } from "../errors.ts";
import { allZero } from "../bytes.ts";
import type { Kernel } from "../../kernels/ir.ts";
import type { TargetSet } from "../../kernels/target.ts";
import { capsFromAttributes, ptxArch } from "./caps.ts";
import { readAttributes } from "./attributes.ts";
import { type PtxDeviceOptions, resolveOptions } from "./options.ts";
export type { PtxDeviceOptions } from "./options.ts";
import { StagingRing } from "./staging.ts";
import { FaultWords, ReadStage } from "./pinned.ts";
import { SLOT_MAX, SlotSlabs } from "./slots.ts";
import { type HostSpan, PtxBuffer, PtxCompiled, PtxRecording } from "./handles.ts";
import { loadModule, renderModule } from "./module.ts";
import { endCapture, instantiate } from "./capture.ts";
import { cutAtCollectives, type Launch, LaunchEx, type PrepareContext, prepareLaunches, uploadSpans } from "./launch.ts";
import type { CollectiveCall, NcclGroup } from "./nccl.ts";

const CUDA_ERROR_OUT_OF_MEMORY = 2;
/** Codes after which the context cannot be trusted: the sticky ones, a watchdog kill, a dead context. */
const FATAL = new Set([...CUDA_STICKY_ERRORS, 3, 4, 46, 201, 702, 709, 999]);
const READ_CHUNK = 16 << 20;
/** A slot shadow's host range that a replay's head copy reads, until `mark` (the first after the replay) completes. */
type MarkedSpan = HostSpan & { mark: number };
/** Events Device.mark reuses in turn: more than two banks of a Driver's steps in flight (MAX_INSTANCES each). */
const MARKS = 256;
const ZERO_WRITE_MIN = 1 << 20;

/** One rank's prepared recording, waiting for the other ranks' (backends/ptx/nccl.ts pairs them). */
export interface PendingPart {
  readonly device: PtxDevice;
  readonly list: readonly unknown[];
  readonly rec: Recording;
}
/** This device's place in an NCCL group (backends/ptx/nccl.ts NcclGroup.open sets it). */
interface RankLink {
  group: NcclGroup;
  rank: number;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
/**
 * The context current on this thread. Several PtxDevices (one per GPU of a tensor-parallel group) share the
 * thread: each makes its own context current before touching the driver, which costs one compare when only
 * one device exists.
 */
let currentCtx: bigint | undefined;
/** After a call into a library that may make another context current (NCCL sets each communicator's device). */
export function forgetCurrentContext(): void {
  currentCtx = undefined;
}

export class PtxDevice implements CollectiveDevice {
  /** Replaced once when an NCCL group attaches (caps.collectives set). */
  target: TargetSet;
  poisoned: string | undefined;
  /** A replay is one graph launch: the GPU runs all of it with no host call. */
  readonly autonomous = true;
  /**
   * Graph launches queue on the stream back to back. H200 (session 19), `bench/decode.ts --ahead 1,2,4,8`: the 1B
   * 1180 / 1192 / 1203 / 1210 tok/s, qwen2.5-0.5b level (1649 / 1649 / 1624 / 1638); what it saves is the host's
   * time per token, which that loop barely has and the Driver has: `bench/driver.ts --steps-ahead 1,4,8` 1B 1124 /
   * 1130 / 1174 tok/s (host 78 / 58 / 29 µs a token), qwen2.5-0.5b 1556 / 1517 / 1592. With each step waiting for
   * its own mark (H100, session 47, two runs each, 4 / 8 in flight): stories260K 13.2k / 13.8k tok/s, the 1B 971 /
   * 980, qwen2.5-0.5b 1571 / 1532 (4 ahead of 8 there, as without marks).
   */
  readonly stepsAhead = 8;
  /** The PTX .target the kernels are rendered for. */
  readonly sm: number;
  readonly ordinal: number;
  private readonly dev: number;
  private readonly ctx: bigint;
  private readonly stream: bigint;
  private readonly ring: StagingRing;
  private readonly slots: SlotSlabs;
  /**
   * Slot shadows a replay or run may still be copying (until the stream is seen idle): the host ranges of the
   * head copies enqueued since, or "all". A write into one first waits for the idle stream; a write elsewhere
   * (another instance's slots, Engine StepOptions.instance) need not.
   */
  private slotsBusy: MarkedSpan[] | "all" = [];
  /**
   * Device.mark: events recorded after the work enqueued so far, reused in turn; the mark each stands for now, the
   * latest mark, and the latest one known to be complete (a wait for an earlier one returns at once).
   */
  private readonly markEvents: bigint[] = [];
  private readonly markAt: number[] = [];
  private marks = 0;
  private markDone = 0;
  /**
   * Host counters (bench/driver.ts prints them a token): µs inside cuGraphLaunch (it blocks on a full queue), slot
   * writes that waited for an idle stream and their µs. (Engine.stats() counts the replays.)
   */
  readonly stats = { launchMicros: 0, slotWaits: 0, slotWaitMicros: 0 };
  private readonly slotSlabs: boolean;
  private readonly spinMicros: number;
  private readonly timeoutMs: number;
  private readonly byKernel = new WeakMap<Kernel, PtxCompiled>();
  private readonly byText = new Map<string, PtxCompiled>();
  /** Host-mapped words the kernels' checks store their codes into. */
  private readonly faultWords: FaultWords;
  private readonly buffers = new Set<PtxBuffer>();
  private readonly recordings = new Set<PtxRecording>();
  /** Kernel lists enqueued since the stream was last seen idle (or their mark complete), in order (to name a faulting one). */
  private inflight: { kernels: PtxCompiled[]; mark: number }[] = [];
  private readonly readStage: ReadStage;
  private reading: Promise<void> = Promise.resolve();
  private readonly argTypes: KernelArgType[][] = [];
  private destroyed = false;
  /** Programmatic dependent launch mode (PtxDeviceOptions.pdl). */
  private readonly pdl: boolean | "exit";
  /** Launches with the programmatic-stream-serialization attribute (undefined: plain cuLaunchKernel only). */
  private readonly launchEx: LaunchEx | undefined;
  /** Set by an NCCL group (backends/ptx/nccl.ts): this device records collectives. */
  private link: RankLink | undefined;
  /** PtxDeviceOptions.carveout (undefined: the driver's choice). */
  private readonly carveout: number | undefined;

  /** Prefer `probePtx` (or `PtxDevice.open`); this takes an opened, initialized libcuda. */
  constructor(readonly cu: Cuda, opts: PtxDeviceOptions = {}) {
    this.ordinal = opts.ordinal ?? 0;
    this.spinMicros = opts.spinMicros ?? 20_000;
    this.timeoutMs = opts.timeoutMs ?? 600_000;
    this.dev = cu.device(this.ordinal);
    const attrs = readAttributes(cu, this.dev);
    const { ccMajor, ccMinor } = attrs;
    if (ccMajor < 8) throw new Unsupported(`ptx: compute capability ${ccMajor}.${ccMinor}; the PTX renderer needs sm_80 or newer`);
    this.sm = opts.sm ?? ptxArch(ccMajor, ccMinor);
    const caps = capsFromAttributes(attrs);
    this.ctx = cu.primaryCtxRetain(this.dev);
    cu.ctxSetCurrent(this.ctx);
    currentCtx = this.ctx;
    const mem = cu.memGetInfo();
    this.target = {
      backend: "ptx",
      device: cu.deviceName(this.dev),
      caps,
      memory: { totalBytes: Number(cu.deviceTotalMem(this.dev)), freeBytes: Number(mem.free) },
      // A display GPU with a kernel watchdog would need recordings split; compute GPUs (the H200) have none.
      watchdogBudget: attrs.execTimeout ? 256 << 20 : 0,
    };
    const { pdl, carveout, slotSlabs } = resolveOptions(opts, env);
    this.stream = cu.streamCreate(CU_STREAM_NON_BLOCKING);
    this.pdl = pdl;
    // Only through a real libcuda (a fake one in tests has no cuLaunchKernelEx to bind).
    this.launchEx = this.pdl !== false && this.sm >= 90 && cu instanceof Cuda ? LaunchEx.open(cu) : undefined;
    this.carveout = carveout;
    this.ring = new StagingRing(cu, this.stream, (e) => this.waitEvent(e));
    this.slots = new SlotSlabs(cu, caps.bindingAlign);
    this.slotSlabs = slotSlabs;
    this.readStage = new ReadStage(cu);
    this.faultWords = new FaultWords(cu);
  }

  /** Opens device `ordinal`; throws (LibraryNotFound, CudaError, Unsupported) when there is none. */
  static open(opts: PtxDeviceOptions = {}): PtxDevice {
    const cu = openCuda(opts.library);
    cu.init();
    return new PtxDevice(cu, opts);
  }

  /**
   * Joins an NCCL group as `rank` (backends/ptx/nccl.ts, before any entry is added): from here the target says
   * caps.collectives and recordings take collective steps, issued through the group's communicator.
   */
  attachGroup(group: NcclGroup, rank: number): void {
    if (this.link) throw new Unsupported("ptx: this device already belongs to an NCCL group");
    this.link = { group, rank };
    this.target = { ...this.target, caps: { ...this.target.caps, collectives: true } };
  }

  // ---- errors ----------------------------------------------------------------------------------------

  private alive(): void {
    if (this.poisoned !== undefined) throw new Poisoned("ptx", this.poisoned);
    this.bind();
  }
  /** Makes this device's context current (another device of a tp group may have run since). */
  private bind(): void {
    if (currentCtx === this.ctx) return;
    this.cu.ctxSetCurrent(this.ctx);
    currentCtx = this.ctx;
  }
  /** The kernel whose check wrote its fault word, preferring the work in flight (in launch order). */
  private findFault(): { kernel: string; code: number } | undefined {
    for (const c of [...this.inflight.flatMap((f) => f.kernels), ...this.byText.values()]) {
      const f = c.fault;
      if (f && f.words[f.index] !== 0) return { kernel: c.kernel.name, code: f.words[f.index] };
    }
    return undefined;
  }
  /** Turns a driver failure into the typed error to throw; fatal ones poison the device. */
  private failure(what: string, e: unknown): Error {
    if (e instanceof ExecError) return e;
    if (!(e instanceof CudaError)) return e as Error;
    if (!FATAL.has(e.code)) return new Unsupported(`ptx: ${what}: ${e.message}`);
    const f = this.findFault();
    if (f) {
      this.poisoned ??= `kernel ${f.kernel} failed check with code ${f.code} (${e.codeName})`;
      return new KernelFault("ptx", f.kernel, f.code);
    }
    this.poisoned ??= `${what}: ${e.codeName}`;
    return new DeviceLost("ptx", `${what}: ${e.message}`);
  }
  private guard<T>(what: string, f: () => T): T {
    this.alive();
    try {
      return f();
    } catch (e) {
      throw this.failure(what, e);
    }
  }
  private checkCode(what: string, code: number): void {
    if (code !== 0) throw new CudaError(what, code, this.cu.errorName(code));
  }

  /** Blocking, bounded wait for an event (only when the staging ring wraps within one burst of writes). */
  private waitEvent(event: bigint): void {
    const deadline = performance.now() + this.timeoutMs;
    for (;;) {
      const r = this.cu.fn.cuEventQuery(event);
      if (r === 0) return;
      if (r !== CUDA_ERROR_NOT_READY) this.checkCode("cuEventQuery", r);
      if (performance.now() > deadline) {
        this.poisoned ??= "a staging copy did not finish";
        throw new DeviceTimeout("ptx", "staging copy", this.timeoutMs);
      }
    }
  }
  /** Blocking, bounded wait for the stream to run dry (a slot write while a slot copy may be pending). */
  private waitIdle(what: string): void {
    const deadline = performance.now() + this.timeoutMs;
    for (;;) {
      const r = this.cu.fn.cuStreamQuery(this.stream);
      if (r === 0) return this.idle();
      if (r !== CUDA_ERROR_NOT_READY) this.checkCode("cuStreamQuery", r);
      if (performance.now() > deadline) {
        this.poisoned ??= `${what}: work did not finish within ${this.timeoutMs} ms`;
        throw new DeviceTimeout("ptx", what, this.timeoutMs);
      }
    }
  }
  /** The stream ran dry: staged bytes, slot shadows and the in-flight list are free. */
  private idle(): void {
    this.ring.idle();
    this.slotsBusy = [];
    this.inflight = [];
    this.markDone = this.marks;
  }
  /** Mark `m` is complete: so is everything enqueued before it (one stream), and the shadows and lists it covered. */
  private reached(m: number): void {
    if (m <= this.markDone) return;
    this.markDone = m;
    const busy = this.slotsBusy;
    if (busy !== "all") while (busy.length && busy[0].mark <= m) busy.shift();
    while (this.inflight.length && this.inflight[0].mark <= m) this.inflight.shift();
  }

  // ---- memory ----------------------------------------------------------------------------------------

  private buf(b: DeviceBuffer): PtxBuffer {
    if (!(b instanceof PtxBuffer) || !this.buffers.has(b)) throw new Unsupported("ptx: not a live buffer of this device");
    return b;
  }
  private range(b: DeviceBuffer, offset: number, bytes: number): PtxBuffer {
    const pb = this.buf(b);
    if (!Number.isInteger(offset) || !Number.isInteger(bytes) || offset < 0 || bytes < 0 || offset + bytes > pb.bytes) {
      throw new Unsupported(`ptx: range ${offset}+${bytes} outside a ${pb.bytes}-byte buffer`);
    }
    return pb;
  }

  alloc(bytes: number, usage: "device" | "upload" | "readback"): DeviceBuffer {
    this.alive();
    if (!Number.isInteger(bytes) || bytes < 0) throw new Unsupported(`ptx: cannot allocate ${bytes} bytes`);
    const n = Math.max(16, Math.ceil(bytes / 16) * 16);
    try {
      let b: PtxBuffer;
      if (usage === "readback") {
        const host = this.cu.memHostAlloc(n, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
        const view = new Uint8Array(ptrView(host, n));
        view.fill(0);
        b = new PtxBuffer(bytes, this.cu.memHostGetDevicePointer(host), view, host);
      } else if (usage === "upload" && bytes <= SLOT_MAX && this.slotSlabs) {
        const place = this.slots.alloc(bytes, (ptr, size) => this.cu.memsetD8Async(ptr, 0, size, this.stream));
        b = new PtxBuffer(bytes, place.ptr, undefined, 0n, place);
      } else {
        const ptr = this.cu.memAlloc(n);
        this.cu.memsetD8Async(ptr, 0, n, this.stream);
        b = new PtxBuffer(bytes, ptr);
      }
      this.buffers.add(b);
      return b;
    } catch (e) {
      if (e instanceof CudaError && e.code === CUDA_ERROR_OUT_OF_MEMORY) throw new OutOfMemory("ptx", bytes, e.message);
      throw this.failure("alloc", e);
    }
  }

  free(b: DeviceBuffer): void {
    if (this.poisoned !== undefined) return; // pending work may still reference it: leak rather than touch the driver
    this.bind();
    const pb = this.buf(b);
    this.buffers.delete(pb);
    pb.freed = true;
    this.guard("free", () => (pb.slot ? this.slots.free(pb.slot) : pb.host ? this.cu.memFreeHost(pb.hostPtr) : this.cu.memFree(pb.ptr)));
  }

  write(b: DeviceBuffer, offset: number, data: Uint8Array): void {
    this.alive();
    const pb = this.range(b, offset, data.byteLength);
    if (pb.host) {
      pb.host.set(data, offset);
      return;
    }
    if (pb.slot) {
      const at = pb.slot.slab.hostPtr + BigInt(pb.slot.offset + offset), end = at + BigInt(data.byteLength);
      const busy = this.slotsBusy;
      if (busy === "all" || busy.some((s) => s.lo < end && at < s.hi)) {
        const t0 = performance.now();
        this.guard("write", () => this.waitIdle("slot write"));
        this.stats.slotWaits++;
        this.stats.slotWaitMicros += (performance.now() - t0) * 1000;
      }
      pb.slot.shadow.set(data, offset);
      return;
    }
    this.guard("write", () => {
      const n = data.byteLength;
      if (n >= ZERO_WRITE_MIN && allZero(data)) {
        this.cu.memsetD8Async(pb.ptr + BigInt(offset), 0, n, this.stream);
        return;
      }
      const step = this.ring.half;
      for (let at = 0; at < n; at += step) {
        const chunk = data.subarray(at, Math.min(n, at + step));
        const src = this.ring.stage(chunk);
        this.cu.memcpyHtoDAsync(pb.ptr + BigInt(offset + at), src, chunk.byteLength, this.stream);
      }
    });
  }

  read(b: DeviceBuffer, offset: number, bytes: number): Promise<Uint8Array> {
    let pb: PtxBuffer;
    try {
      this.alive();
      pb = this.range(b, offset, bytes);
    } catch (e) {
      return Promise.reject(e);
    }
    if (pb.host) return Promise.resolve(pb.host.slice(offset, offset + bytes));
    // Kernels only read slots: the shadow is what the device has (or gets at the next replay).
    if (pb.slot) return Promise.resolve(pb.slot.shadow.slice(offset, offset + bytes));
    // Reads share one pinned staging buffer: each waits for the one before it.
    const r = this.reading.then(() => this.readDevice(pb, offset, bytes));
    this.reading = r.then(() => {}, () => {});
    return r;
  }
  private async readDevice(pb: PtxBuffer, offset: number, bytes: number): Promise<Uint8Array> {
    this.alive();
    const out = new Uint8Array(bytes);
    for (let at = 0; at < bytes; at += READ_CHUNK) {
      const n = Math.min(READ_CHUNK, bytes - at);
      const stage = this.guard("read", () => this.readStage.get(n));
      this.guard("read", () => this.cu.memcpyDtoHAsync(stage.ptr, pb.ptr + BigInt(offset + at), n, this.stream));
      await this.synchronize(this.timeoutMs);
      this.bind();
      out.set(stage.view.subarray(0, n), at);
    }
    return out;
  }

  // ---- kernels ---------------------------------------------------------------------------------------

  compile(kernel: Kernel): CompiledKernel {
    this.alive();
    const known = this.byKernel.get(kernel);
    if (known) return known;
    const mod = renderModule(kernel, this.target.caps, { sm: this.sm, pdl: this.launchEx ? this.pdl : false });
    let c = this.byText.get(mod.ptx);
    if (!c) {
      const m = mod;
      c = this.guard(`compile ${kernel.name}`, () => loadModule(this.cu, kernel, m, { carveout: this.carveout, faultWords: this.faultWords, fatal: (code) => FATAL.has(code) }));
      this.byText.set(mod.ptx, c);
    }
    const out = c.kernel === kernel ? c : new PtxCompiled(kernel, c.module, c.cuModule, c.func, c.faultPtr, c.fault);
    this.byKernel.set(kernel, out);
    return out;
  }

  /** This device as prepareLaunches sees it (the NCCL link as it is now). */
  private prepareContext(): PrepareContext {
    const link = this.link;
    return {
      caps: this.target.caps,
      range: (b, offset, bytes) => this.range(b, offset, bytes),
      owns: (c) => this.byKernel.get(c.kernel) === c,
      collective: link && ((s, send, recv) => link.group.call(link.rank, s, send, recv)),
      argTypes: this.argTypes,
    };
  }
  /** Enqueues launches on the stream (captured when a capture is active). */
  private enqueue(list: Launch[]): void {
    for (const l of list) {
      if (l.k === "collective") this.issue(l.call);
      else if (l.k === "copy") this.cu.memcpyDtoDAsync(l.dst, l.src, l.bytes, this.stream);
      else if (l.k === "upload") this.cu.memcpyHtoDAsync(l.dst, l.src, l.bytes, this.stream);
      else if (l.c.module.pdl && this.launchEx) {
        const r = this.launchEx.launch(l.c.func, l.grid, l.c.kernel.workgroup, l.c.module.dynamicShared, this.stream, l.args.params);
        this.checkCode("cuLaunchKernelEx", r);
      } else this.cu.launchKernel(l.c.func, l.grid, l.c.kernel.workgroup, l.c.module.dynamicShared, this.stream, l.args);
    }
  }
  /** One collective of this rank (alone in a group of one, else inside the group's ncclGroupStart/End). */
  private issue(call: CollectiveCall): void {
    this.bind();
    try {
      this.link!.group.issue(this.link!.rank, call, this.stream);
    } finally {
      forgetCurrentContext(); // NCCL makes its communicator's device current
    }
  }
  private kernelsOf(list: Launch[]): PtxCompiled[] {
    return list.flatMap((l) => (l.k === "kernel" ? [l.c] : []));
  }

  run(steps: GroupStep[]): void {
    this.alive();
    const list = prepareLaunches(steps, this.prepareContext());
    if (this.link && this.link.group.size > 1 && list.some((l) => l.k === "collective")) {
      // One thread issuing every rank's NCCL calls needs them in group calls across ranks: only recordings do that.
      throw new Unsupported("ptx: eager steps with collectives in a group of several GPUs (record them)");
    }
    if (this.inflight.length < 4096) this.inflight.push({ kernels: this.kernelsOf(list), mark: this.marks + 1 });
    this.busy(uploadSpans(list));
    this.guard("run", () => this.enqueue(list));
  }

  record(steps: GroupStep[]): Recording {
    this.alive();
    const list = prepareLaunches(steps, this.prepareContext());
    if (this.link && list.some((l) => l.k === "collective")) {
      // Every rank's part is captured together once all are in (at once in a group of one).
      const rec = this.keep(new PtxRecording(0n, steps.length, this.kernelsOf(list)));
      rec.pending = true;
      try {
        this.link.group.offer(this.link.rank, { device: this, list, rec });
      } catch (e) {
        this.recordings.delete(rec); // its entry is not made: nobody will release it
        throw e;
      }
      return rec;
    }
    return this.guard("record", () => {
      if (list.length === 0) return this.keep(new PtxRecording(0n, 0, []));
      this.cu.streamBeginCapture(this.stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
      let graph = 0n;
      try {
        this.enqueue(list);
      } finally {
        graph = endCapture(this.cu, this.stream); // always, so that the stream stays usable
      }
      const exec = instantiate(this.cu, this.stream, graph);
      return this.keep(new PtxRecording(exec, steps.length, this.kernelsOf(list), uploadSpans(list)));
    });
  }
  private keep(r: PtxRecording): PtxRecording {
    this.recordings.add(r);
    return r;
  }

  replay(rec: Recording): void {
    this.alive();
    if (!(rec instanceof PtxRecording) || !this.recordings.has(rec)) throw new Unsupported("ptx: not a live recording of this device");
    if (rec.failed !== undefined) throw new Unsupported(`ptx: this recording's group capture failed: ${rec.failed}`);
    if (rec.pending) throw new Unsupported("ptx: this recording waits for the other ranks of its NCCL group to record theirs");
    if (rec.exec === 0n) return;
    if (this.inflight.length < 4096) this.inflight.push({ kernels: rec.kernels, mark: this.marks + 1 });
    this.busy(rec.uploads);
    const t0 = performance.now();
    this.guard("replay", () => this.cu.graphLaunch(rec.exec, this.stream));
    this.stats.launchMicros += (performance.now() - t0) * 1000;
  }

  /** Notes the shadows a replay or run copies as busy until the stream is idle (undefined: all of them). */
  private busy(spans: HostSpan[] | undefined): void {
    if (this.slotsBusy === "all") return;
    if (!spans || this.slotsBusy.length + spans.length > 256) this.slotsBusy = "all";
    else for (const s of spans) this.slotsBusy.push({ lo: s.lo, hi: s.hi, mark: this.marks + 1 });
  }

  /**
   * A mark after the work enqueued so far (Device.mark): an event recorded on the stream (one driver call). A
   * Driver's steps in flight each wait for their own (Engine.step), so the first draw of a block of steps arrives
   * when its step is done, and the next block is launched behind the rest of this one: waiting for the whole
   * stream drained the queue at every block.
   */
  mark(): number {
    this.alive();
    const m = this.marks + 1, i = m % MARKS;
    this.guard("mark", () => {
      this.markEvents[i] ??= this.cu.eventCreate(CU_EVENT_DISABLE_TIMING);
      this.cu.eventRecord(this.markEvents[i], this.stream);
    });
    this.marks = m;
    this.markAt[i] = m;
    return m;
  }

  async synchronize(timeoutMs: number, mark?: number): Promise<void> {
    this.alive();
    if (mark !== undefined && mark <= this.markDone) return;
    // An event recorded again since stands for a later point of the same stream, which covers the mark too; a mark
    // this device never recorded, for the whole stream.
    const upTo = mark === undefined ? 0 : this.markAt[mark % MARKS] ?? 0;
    const event = mark !== undefined && upTo >= mark ? this.markEvents[mark % MARKS] : undefined;
    const t0 = performance.now();
    const spinUntil = t0 + this.spinMicros / 1000, deadline = t0 + timeoutMs;
    for (;;) {
      const r = event === undefined ? this.cu.fn.cuStreamQuery(this.stream) : this.cu.fn.cuEventQuery(event);
      if (r === 0) {
        if (event === undefined) this.idle();
        else this.reached(upTo);
        return;
      }
      if (r !== CUDA_ERROR_NOT_READY) {
        throw this.failure("synchronize", new CudaError(event === undefined ? "cuStreamQuery" : "cuEventQuery", r, this.cu.errorName(r)));
      }
      const now = performance.now();
      if (now > deadline) {
        this.poisoned ??= `work did not finish within ${timeoutMs} ms`;
        throw new DeviceTimeout("ptx", "synchronize", timeoutMs);
      }
      if (now > spinUntil) await sleep(1);
      if (this.poisoned !== undefined) throw new Poisoned("ptx", this.poisoned);
      this.bind();
    }
  }

  releaseRecording(rec: Recording): void {
    if (!(rec instanceof PtxRecording) || rec.released) return;
    rec.released = true;
    this.recordings.delete(rec);
    if (rec.pending) this.link?.group.withdraw(this.link.rank, rec);
    if (this.poisoned !== undefined || rec.exec === 0n) return;
    this.bind();
    this.guard("releaseRecording", () => this.cu.graphExecDestroy(rec.exec));
  }

  async destroy(): Promise<void> {
    if (this.destroyed) return;
    this.destroyed = true;
    if (this.poisoned === undefined) {
      try {
        await this.synchronize(this.timeoutMs);
        for (const r of [...this.recordings]) this.releaseRecording(r);
        for (const b of [...this.buffers]) this.free(b);
        const modules = new Set([...this.byText.values()].map((c) => c.cuModule));
        for (const m of modules) this.cu.moduleUnload(m);
        this.byText.clear();
        this.ring.release();
        this.markEvents.forEach((e) => this.cu.eventDestroy(e)); // (forEach skips the slots never used)
        this.slots.release();
        this.readStage.release();
        this.faultWords.release();
        this.cu.streamDestroy(this.stream);
      } catch {
        // Best effort: the context is released below either way.
      }
    }
    const faulted = this.poisoned !== undefined;
    this.poisoned ??= "destroyed";
    if (currentCtx === this.ctx) currentCtx = undefined; // released: the next device sets its own
    try {
      this.cu.primaryCtxRelease(this.dev);
    } catch {
      // A context that faulted may refuse; it is reset below.
    }
    // A sticky error lives as long as the context: reset it so that a later PtxDevice in this process gets a
    // fresh one (any other device on the same primary context was already dead with it).
    if (faulted) {
      try {
        this.cu.primaryCtxReset(this.dev);
      } catch {
        // Nothing more to do for a context that cannot even be reset.
      }
    }
  }

  // ---- group capture: backends/ptx/nccl.ts drives several devices' captures in lockstep through these ----

  /** A pending part's launches cut at its collectives: the stretch before each collective, and its call. */
  stretches(part: PendingPart): { launches: unknown; call?: CollectiveCall }[] {
    return cutAtCollectives(part.list as Launch[]);
  }
  beginCapture(): void {
    this.guard("group capture", () => this.cu.streamBeginCapture(this.stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  }
  /** Enqueues one stretch of `stretches` (captured while the capture is open). */
  enqueueStretch(launches: unknown): void {
    this.guard("group capture", () => this.enqueue(launches as Launch[]));
  }
  /** This rank's call of one collective (the group wraps the ranks' calls in ncclGroupStart/End). */
  issueCollective(call: CollectiveCall): void {
    this.guard("collective", () => this.issue(call));
  }
  /** Ends the open capture and returns its graph (throws when the capture failed; the stream is usable again). */
  endCapture(): bigint {
    this.bind();
    try {
      return endCapture(this.cu, this.stream);
    } catch (e) {
      throw this.failure("group capture", e);
    }
  }
  /** Instantiates a captured graph as `rec` (a pending part's recording), or discards it (`rec` undefined). */
  completeRecording(rec: Recording | undefined, graph: bigint): void {
    this.bind();
    if (!rec) {
      this.cu.fn.cuGraphDestroy(graph);
      return;
    }
    const r = rec as PtxRecording;
    this.guard("group capture", () => r.exec = instantiate(this.cu, this.stream, graph));
    r.pending = false;
  }
  /** Marks a pending part's recording as failed: replaying it says why. */
  failRecording(rec: Recording, why: string): void {
    (rec as PtxRecording).failed ??= why;
  }
}
