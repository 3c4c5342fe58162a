// The WebGPU device (Deno's built-in wgpu through navigator.gpu).
//
// Record once: pipelines (compile), bind groups and the dispatch list (record). Per step: the Engine writes
// slots with queue.writeBuffer, replay encodes the cached list into one command encoder and submits once (from
// the second replay of a recording on, the command buffer was encoded right after the previous submit, while
// the GPU ran it, so a step's host path is writes, one submit and one map); the
// list ends with copies of the recording's fault words and of the readback buffers it writes into the
// recording's own MAP_READ staging buffer, so synchronize only maps it (no further submit), and read() of a
// readback buffer afterwards returns that snapshot. A decode step is one submit and one map. Deno resolves every
// mapAsync (and onSubmittedWorkDone) only after a 10 ms sleep that follows its blocking device wait, which
// floored a step at ~10 ms whatever the GPU did; a staging buffer is therefore read as soon as the map has
// happened, without waiting for the promise (mappedEarly), and nothing else in a step maps.
//
// Ordering: all dispatches of a run share one compute pass (unless passPerDispatch). WebGPU orders storage
// writes between dispatches, and wgpu implements it: a STORAGE_READ_WRITE usage is not "ordered", so
// its tracker puts a barrier between consecutive dispatches that use a buffer read-write. Copies end the pass.
//
// Faults: every dispatch of a kernel with checks gets its own 4-byte word in its recording's fault buffer, at a
// stride of minStorageBufferOffsetAlignment (the finest a binding offset may be); the words accumulate across
// replays; synchronize raises KernelFault for the first non-zero word in submit and dispatch order and then
// clears that buffer with a queue write. The results of a faulted replay are garbage.
//
// Failures: device.lost poisons (the call that sees it throws DeviceLost, later ones Poisoned); mapAsync is
// bounded by the timeout (DeviceTimeout, poisons); validation errors (uncaptured, or caught by error scopes
// around compile and record) surface at synchronize as Unsupported, out-of-memory as OutOfMemory.
//
// Not one submit: an unaligned write() (offset or size not a multiple of 4) lands through a scratch buffer and
// a byte-copy dispatch, its own submit; an eager run() builds bind groups, a fault buffer, a staging buffer and
// copy parameters for that call only (temporaries, freed at the next synchronize); synchronize with nothing
// submitted waits on onSubmittedWorkDone. stats counts submits, maps, and host microseconds spent encoding.
//
// Here: the Device itself (state, memory, submits, synchronize). handles.ts holds its handles and records,
// record.ts builds steps into commands, pipelines.ts caches pipelines, encode.ts encodes command buffers,
// map.ts maps staging buffers, validation.ts collects WebGPU's asynchronous errors.
import type { Kernel } from "../../kernels/ir.ts";
import type { TargetSet } from "../../kernels/target.ts";
import { type CompiledKernel, type Device, type DeviceBuffer, type DeviceStep, type Recording, type StepTime, stepTimesOf } from "../device.ts";
import { DeviceLost, type ExecError, KernelFault, OutOfMemory, Poisoned, Unsupported } from "../errors.ts";
import { type Cmd, type Encoded, encode, encodeParts, type Timing } from "./encode.ts";
import { openGpu, type Opened, type WgpuFeatures, type WgpuOpenOptions } from "./target.ts";
import { B, ceil, COPY_DST, COPY_SRC, emptyTail, MAP_READ, type Pending, STORAGE, type Tail, tailBuffers, WgpuBuffer, WgpuCompiled, WgpuRecording, type WgpuStats } from "./handles.ts";
import { type BuildContext, kernelCopy, prepare } from "./record.ts";
import { Pipelines } from "./pipelines.ts";
import { type MapContext, mapRead, waitIdle } from "./map.ts";
import { GpuErrors } from "./validation.ts";

export type { WgpuStats } from "./handles.ts";

export interface WgpuOptions extends WgpuOpenOptions {
  /** End the compute pass after every dispatch (default: one pass per run of dispatches between copies). */
  passPerDispatch?: boolean;
  /** Bound on waits that take no timeout argument (read); 600 s by default. */
  timeoutMs?: number;
  /** Read a staging buffer as soon as its map has happened, before mapAsync's promise resolves (default true). */
  earlyMap?: boolean;
  /** Unroll the loops PTX unrolls before rendering WGSL (default true). */
  unroll?: boolean;
  /** A dispatch that reads and writes one buffer gets every binding declared read_write, not only those reads. */
  allReadWrite?: boolean;
  /**
   * Command buffers a replay of a recording is cut into, submitted one after another (default 1): the GPU starts
   * on the first while wgpu still validates and tracks the others' resources in their submits. On the H200 a
   * submit of the whole qwen2.5-0.5b step costs ~95 µs, and 3 parts measured no faster (1.54 vs 1.52 ms a token).
   */
  submitParts?: number;
}

/** A Device over Deno's WebGPU; see the top of backends/wgpu/device.ts for how it records, replays and fails. */
export class WgpuDevice implements Device {
  readonly target: TargetSet;
  /**
   * A step's submit, map and slot writes leave the GPU idle ~0.3-0.4 ms between synchronized steps; with steps
   * in flight it runs them back to back. H200, `bench/decode.ts --ahead 1,2,4,8` (session 19): qwen2.5-0.5b 754 /
   * 849 / 889 / 915 tok/s, the 1B 728 / 778 / 808 / 840.
   */
  readonly stepsAhead = 8;
  readonly features: WgpuFeatures;
  /** The underlying GPUDevice (tests use it to force a device loss). */
  readonly gpu: GPUDevice;
  readonly stats: WgpuStats = {
    submits: 0, replays: 0, eagerRuns: 0, dispatches: 0, maps: 0, encodeMicros: 0, lastEncodeMicros: 0, submitMicros: 0,
    mapMicros: 0, earlyMaps: 0, preEncodeMicros: 0, finishMicros: 0, pipelines: 0,
  };
  poisoned: string | undefined;
  private lostUnreported = false;
  private destroying = false;
  private readonly passPerDispatch: boolean;
  private readonly submitParts: number;
  private readonly timeoutMs: number;
  private readonly align: number;
  private readonly faultStride: number;
  private readonly compiled = new WeakMap<Kernel, WgpuCompiled>();
  private readonly pipelines: Pipelines;
  /** Work enqueued since the last synchronize, by recording (or eager run). */
  private pending: Pending[] = [];
  private seq = 0;
  /** Scratch buffers of unaligned writes and kernel copies, freed at the next synchronize. */
  private temps: GPUBuffer[] = [];
  /** Validation outcomes still to be looked at, and uncaptured errors. */
  private readonly errs: GpuErrors;
  /** What building a recording needs of this device (record.ts). */
  private readonly build: BuildContext;
  /** What mapping a staging buffer needs of this device (map.ts). */
  private readonly maps: MapContext;

  private constructor(o: Opened, opts: WgpuOptions) {
    this.gpu = o.device;
    this.target = o.target;
    this.features = o.features;
    this.passPerDispatch = opts.passPerDispatch ?? false;
    this.submitParts = Math.max(1, Math.floor(opts.submitParts ?? 1));
    this.timeoutMs = opts.timeoutMs ?? 600_000;
    this.align = Math.max(4, this.gpu.limits.minStorageBufferOffsetAlignment);
    this.faultStride = this.align;
    this.errs = new GpuErrors(this.gpu);
    this.pipelines = new Pipelines(this.gpu, this.target, this.features, opts.unroll ?? true, this.errs, this.stats);
    this.build = {
      gpu: this.gpu,
      features: this.features,
      align: this.align,
      faultStride: this.faultStride,
      allReadWrite: opts.allReadWrite ?? false,
      buf: (b) => this.buf(b),
      compile: (k) => this.compile(k),
      variant: (c, v) => this.pipelines.variant(c, v),
      scoped: (what, f) => this.errs.scoped(what, f),
    };
    this.maps = {
      gpu: this.gpu,
      stats: this.stats,
      earlyMap: opts.earlyMap ?? true,
      mappedOnce: new WeakSet<GPUBuffer>(),
      poison: (e) => this.poison(e),
      lost: () => {
        if (this.poisoned === undefined) return undefined;
        this.lostUnreported = false;
        return new DeviceLost(B, this.poisoned);
      },
    };
    this.gpu.lost.then((info) => {
      if (this.destroying || this.poisoned !== undefined) return;
      this.poisoned = `device lost (${info.reason}): ${info.message}`;
      this.lostUnreported = true;
    });
  }

  /** Opens the adapter's device; a string says why there is none (no navigator.gpu, no adapter). */
  static async open(opts: WgpuOptions = {}): Promise<WgpuDevice | string> {
    const o = await openGpu(opts);
    return typeof o === "string" ? o : new WgpuDevice(o, opts);
  }

  // ---- state -----------------------------------------------------------------------------------------

  private live(): void {
    if (this.poisoned === undefined) return;
    if (this.lostUnreported) {
      this.lostUnreported = false;
      throw new DeviceLost(B, this.poisoned);
    }
    throw new Poisoned(B, this.poisoned);
  }
  private poison(e: ExecError): ExecError {
    this.poisoned ??= e.message;
    return e;
  }
  private buf(b: DeviceBuffer): WgpuBuffer {
    if (!(b instanceof WgpuBuffer)) throw new Unsupported(`${B}: not a WebGPU device buffer`);
    if (b.freed) throw new Unsupported(`${B}: buffer used after free`);
    return b;
  }

  // ---- memory ----------------------------------------------------------------------------------------

  alloc(bytes: number, usage: "device" | "upload" | "readback"): DeviceBuffer {
    this.live();
    if (!Number.isInteger(bytes) || bytes < 0) throw new Unsupported(`${B}: cannot allocate ${bytes} bytes`);
    const size = Math.max(16, ceil(bytes, 16));
    const max = this.gpu.limits.maxBufferSize;
    if (size > max) {
      throw new Unsupported(`${B}: a buffer of ${bytes} bytes exceeds the adapter's maxBufferSize (${max}); the model does not fit this device as planned`);
    }
    let gpu: GPUBuffer | undefined;
    try {
      this.errs.scoped("alloc", () => {
        gpu = this.gpu.createBuffer({ size, usage: STORAGE | COPY_SRC | COPY_DST });
      });
    } catch (e) {
      throw new OutOfMemory(B, bytes, (e as Error).message);
    }
    return new WgpuBuffer(bytes, gpu!, size, usage);
  }

  free(b: DeviceBuffer): void {
    const w = this.buf(b);
    w.freed = true;
    w.gpu.destroy();
  }

  write(b: DeviceBuffer, offset: number, data: Uint8Array): void {
    this.live();
    const w = this.buf(b);
    if (offset < 0 || offset + data.byteLength > w.bytes) {
      throw new Unsupported(`${B}: write of ${data.byteLength} bytes at ${offset} outside a ${w.bytes}-byte buffer`);
    }
    w.dirty = true;
    w.writes++;
    if (data.byteLength === 0) return;
    if (offset % 4 === 0 && data.byteLength % 4 === 0) {
      // A view over a plain ArrayBuffer (device writes never come from shared memory); typed as such for
      // the default lib (outside this repo's deno.json), whose writeBuffer takes ArrayBuffer-backed views only.
      this.gpu.queue.writeBuffer(w.gpu, offset, data as Uint8Array<ArrayBuffer>);
      return;
    }
    // Unaligned: stage the bytes in a scratch buffer at the same phase and copy them in with a byte kernel.
    const phase = offset % 4;
    const scratch = this.gpu.createBuffer({ size: ceil(phase + data.byteLength, 16), usage: STORAGE | COPY_DST });
    const padded = new Uint8Array(ceil(phase + data.byteLength, 4));
    padded.set(data, phase);
    this.gpu.queue.writeBuffer(scratch, 0, padded);
    this.temps.push(scratch);
    const src = { gpu: scratch, offset: 0, size: scratch.size };
    const cmds: Cmd[] = [];
    const owned: GPUBuffer[] = [];
    kernelCopy(this.build, src, phase, { gpu: w.gpu, offset: offset - phase, size: 0 }, phase, data.byteLength, cmds, owned);
    this.temps.push(...owned);
    this.submit(cmds);
  }

  async read(b: DeviceBuffer, offset: number, bytes: number): Promise<Uint8Array> {
    this.live();
    const w = this.buf(b);
    if (offset < 0 || bytes < 0 || offset + bytes > w.bytes) {
      throw new Unsupported(`${B}: read of ${bytes} bytes at ${offset} outside a ${w.bytes}-byte buffer`);
    }
    if (w.snapshot && !w.dirty) return w.snapshot.slice(offset, offset + bytes);
    const a0 = offset - (offset % 4), a1 = ceil(offset + bytes, 4);
    const st = this.gpu.createBuffer({ size: Math.max(4, a1 - a0), usage: MAP_READ | COPY_DST });
    try {
      if (a1 > a0) {
        const enc = this.gpu.createCommandEncoder();
        enc.copyBufferToBuffer(w.gpu, a0, st, 0, a1 - a0);
        this.gpu.queue.submit([enc.finish()]);
        this.stats.submits++;
      }
      const m = await mapRead(this.maps, st, this.timeoutMs, "read");
      return m.slice(offset - a0, offset - a0 + bytes);
    } finally {
      st.destroy();
    }
  }

  // ---- kernels -----------------------------------------------------------------------------------------

  compile(kernel: Kernel): CompiledKernel {
    this.live();
    let c = this.compiled.get(kernel);
    if (c) return c;
    const caps = this.target.caps, [wx, wy, wz] = kernel.workgroup;
    const lim = this.gpu.limits;
    if (wx * wy * wz > lim.maxComputeInvocationsPerWorkgroup || wx > lim.maxComputeWorkgroupSizeX ||
      wy > lim.maxComputeWorkgroupSizeY || wz > lim.maxComputeWorkgroupSizeZ) {
      throw new Unsupported(`${B}: ${kernel.name}: workgroup ${kernel.workgroup.join("x")} exceeds the adapter's limits`);
    }
    const shared = kernel.shared.reduce((n, s) => n + s.count * (s.t === "f16" ? 2 : 4), 0);
    if (shared > caps.maxSharedBytes) {
      throw new Unsupported(`${B}: ${kernel.name}: ${shared} bytes of shared memory, the adapter allows ${caps.maxSharedBytes}`);
    }
    c = new WgpuCompiled(kernel);
    this.pipelines.variant(c, "n");
    this.compiled.set(kernel, c);
    return c;
  }

  /** compile(), then wait for the shader's compilation messages: a bad shader throws here, not at synchronize. */
  async compileAsync(kernel: Kernel): Promise<CompiledKernel> {
    const c = this.compile(kernel);
    await this.errs.drain();
    return c;
  }

  // ---- recording ---------------------------------------------------------------------------------------

  record(steps: DeviceStep[]): Recording {
    this.live();
    const { cmds, tail, owned } = prepare(this.build, steps, "record");
    return new WgpuRecording([...cmds, ...tail.copies], tail, owned, steps.length);
  }

  /** Encodes commands into one command buffer and submits it (timing each dispatch with a `q` into `timing`). */
  private submit(cmds: Cmd[], timing?: Timing): void {
    const e = encode(this.gpu, cmds, timing, this.passPerDispatch);
    this.stats.encodeMicros += e.micros;
    this.stats.finishMicros += e.finishMicros;
    this.stats.lastEncodeMicros = e.micros;
    this.submitEncoded(e);
  }

  private submitEncoded(e: Encoded): void {
    const t1 = performance.now();
    this.gpu.queue.submit([e.cb]);
    this.stats.submits++;
    this.stats.dispatches += e.dispatches;
    this.stats.submitMicros += (performance.now() - t1) * 1000;
  }

  /** Notes a submitted tail for the next synchronize (once per tail: its staging holds the latest copy). */
  private enqueue(tail: Tail, temp: GPUBuffer[] | undefined): void {
    let p = this.pending.find((x) => x.tail === tail);
    if (!p) this.pending.push(p = { tail, seq: 0, writes: [], temp });
    p.seq = ++this.seq;
    p.writes = tail.readbacks.map((r) => r.writes);
    for (const r of tail.readbacks) r.dirty = true;
  }

  replay(rec: Recording): void {
    this.live();
    if (!(rec instanceof WgpuRecording) || rec.released) throw new Unsupported(`${B}: not a live recording of this device`);
    const spare = rec.spare;
    rec.spare = undefined;
    if (spare) this.stats.lastEncodeMicros = 0;
    const encoded = spare ?? this.encodeParts(rec);
    if (!spare) {
      const micros = encoded.reduce((a, e) => a + e.micros, 0);
      this.stats.encodeMicros += micros;
      this.stats.lastEncodeMicros = micros;
    }
    for (const e of encoded) this.submitEncoded(e);
    this.stats.replays++;
    // A recording replayed again and again (a decode loop): encode its next command buffer now, while the GPU
    // runs this one, so the next step only submits. The list does not change between replays (slots are
    // queue writes, ordered before that submit).
    if (++rec.replays >= 2) {
      const t0 = performance.now();
      try {
        rec.spare = this.encodeParts(rec);
      } catch {
        rec.spare = undefined; // the next replay encodes, and reports what is wrong
      }
      this.stats.preEncodeMicros += (performance.now() - t0) * 1000;
    }
    this.enqueue(rec.tail, undefined);
  }

  /** A recording's commands as submitParts command buffers (the tail's copies end the last). */
  private encodeParts(rec: WgpuRecording): Encoded[] {
    const out = encodeParts(this.gpu, rec.list, rec.tail.timing, this.passPerDispatch, this.submitParts);
    for (const e of out) this.stats.finishMicros += e.finishMicros;
    return out;
  }

  run(steps: DeviceStep[]): void {
    this.live();
    const { cmds, tail, owned } = prepare(this.build, steps, "run");
    this.submit([...cmds, ...tail.copies], tail.timing);
    this.stats.eagerRuns++;
    this.enqueue(tail, owned);
  }

  async synchronize(timeoutMs: number): Promise<void> {
    this.live();
    const pending = this.pending.sort((a, b) => a.seq - b.seq);
    this.pending = [];
    // A tail with nothing to read (an eager zero fill: no fault words, readbacks or timestamps) is not mapped
    // when a later submit's staging is: the queue runs submits in order, so that map waits for it too. Its
    // staging buffer is new, and mapping one waits out Deno's 10 ms sleep (see mappedEarly): resetState's fills
    // cost the next step 10 ms that way.
    const read = pending.filter((p, i) => i === pending.length - 1 || !emptyTail(p.tail));
    let maps = new Map<Pending, Uint8Array>();
    try {
      // The staging copies ended each submit: mapping them waits for that work. Concurrent maps share Deno's tick.
      const got = await Promise.all(read.map((p) => mapRead(this.maps, p.tail.staging, timeoutMs, "synchronize")));
      maps = new Map(read.map((p, i) => [p, got[i]]));
      if (!pending.length) await waitIdle(this.maps, timeoutMs);
    } finally {
      for (const p of pending) if (p.temp) for (const b of [...tailBuffers(p.tail), ...p.temp]) b.destroy();
      for (const t of this.temps) t.destroy();
      this.temps = [];
    }
    await this.errs.drain();
    let fault: KernelFault | undefined;
    pending.forEach((p) => {
      const bytes = maps.get(p), t = p.tail;
      if (!bytes) return; // an empty tail: nothing to read
      t.readbacks.forEach((r, j) => {
        if (r.writes !== p.writes[j]) return; // written by the host since: the copy is stale
        r.snapshot = bytes.slice(t.at[j], t.at[j] + r.bytes);
        r.dirty = false;
      });
      if (t.timing) t.timing.ticks = new BigUint64Array(bytes.slice(t.timing.at, t.timing.at + 16 * t.timing.stepOf.length).buffer);
      if (!t.faults) return;
      const words = new Uint32Array(bytes.buffer, bytes.byteOffset, t.faults.size >> 2);
      let hit = false;
      for (let j = 0; j < t.names.length; j++) {
        const code = words[(j * this.faultStride) >> 2];
        if (code === 0) continue;
        fault ??= new KernelFault(B, t.names[j], code);
        hit = true;
      }
      // Fault words accumulate across replays until read; clear them (a queue write, ordered before later work).
      if (hit && !p.temp) this.gpu.queue.writeBuffer(t.faults, 0, new Uint8Array(t.faults.size));
    });
    if (fault) throw fault;
  }

  /**
   * Device µs of each step of the recording's latest synchronized replay, from the timestamps written at the
   * start and end of each kernel's compute pass (WgpuOptions.timestamps); copies are not timed (NaN). Undefined
   * when the device does not time steps or no replay has been synchronized.
   */
  stepTimes(rec: Recording): StepTime[] | undefined {
    if (!(rec instanceof WgpuRecording) || rec.released) return undefined;
    const t = rec.tail.timing;
    if (!t?.ticks) return undefined;
    const times = stepTimesOf(t.ticks, 1);
    const out: StepTime[] = Array.from({ length: t.steps }, () => ({ interval: NaN, busy: NaN }));
    t.stepOf.forEach((si, q) => {
      out[si] = times[q];
    });
    return out;
  }

  releaseRecording(rec: Recording): void {
    if (!(rec instanceof WgpuRecording) || rec.released) return;
    rec.released = true;
    rec.spare = undefined;
    // Work not yet synchronized may still use them: hand them to the next synchronize to free.
    const p = this.pending.find((x) => x.tail === rec.tail);
    if (p) p.temp = rec.owned;
    else for (const b of [...tailBuffers(rec.tail), ...rec.owned]) b.destroy();
  }

  destroy(): Promise<void> {
    this.destroying = true;
    this.poisoned ??= "destroyed";
    this.gpu.destroy();
    return Promise.resolve();
  }
}
