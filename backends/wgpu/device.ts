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
import type { Kernel } from "../../kernels/ir.ts";
import { KernelError } from "../../kernels/ir.ts";
import type { TargetSet } from "../../kernels/target.ts";
import type { WgslShader } from "../../kernels/render/wgsl.ts";
import { RENDERERS } from "../../kernels/render/mod.ts";
import { type CompiledKernel, type Device, type DeviceBinding, type DeviceBuffer, type DeviceStep, type Recording, type StepTime, stepTimesOf } from "../device.ts";
import { DeviceLost, DeviceTimeout, type ExecError, KernelFault, OutOfMemory, Poisoned, Unsupported } from "../errors.ts";
import { COPY_BYTES, COPY_GROUPS, COPY_WORDS } from "./copy.ts";
import { type Cmd, type Encoded, encode, type Timing } from "./encode.ts";
import { openGpu, type Opened, type WgpuFeatures, type WgpuOpenOptions } from "./target.ts";

// GPUBufferUsage / GPUMapMode / GPUShaderStage values (the globals do not exist under Bun; this module must load there).
const MAP_READ = 0x1, COPY_SRC = 0x4, COPY_DST = 0x8, STORAGE = 0x80, QUERY_RESOLVE = 0x200, COMPUTE = 0x4;
const B = "wgpu";

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

export interface WgpuStats {
  submits: number;
  replays: number;
  eagerRuns: number;
  dispatches: number;
  maps: number;
  /** Host microseconds spent encoding command buffers in replay/run before their submit (total and last call;
   * 0 for a replay whose command buffer was encoded ahead). */
  encodeMicros: number;
  lastEncodeMicros: number;
  /** Host microseconds encoding a recording's next command buffer after a submit, while the GPU runs. */
  preEncodeMicros: number;
  /** Host microseconds inside queue.submit for those (lavapipe runs the work there, so it is device time). */
  submitMicros: number;
  /** Host microseconds waiting in synchronize/read for maps. */
  mapMicros: number;
  /** Maps read before mapAsync's promise resolved (see mappedEarly). */
  earlyMaps: number;
  /** Distinct compute pipelines made (kernels rendering to the same WGSL share one). */
  pipelines: number;
}

const ceil = (n: number, a: number) => Math.ceil(n / a) * a;

class WgpuBuffer implements DeviceBuffer {
  freed = false;
  /** Written since its last snapshot (by work or by write()): read() must copy and map. */
  dirty = false;
  /** Bumped by every write(), so a snapshot copied before a later write is never taken as current. */
  writes = 0;
  snapshot: Uint8Array | undefined;
  constructor(readonly bytes: number, readonly gpu: GPUBuffer, readonly size: number, readonly usage: string) {}
}

interface Variant {
  shader: WgslShader;
  pipeline: GPUComputePipeline;
  layout: GPUBindGroupLayout;
}
class WgpuCompiled implements CompiledKernel {
  /** "n" (as the kernel declares), "rw" (every binding read_write), or "rw:i,j" (those bindings read_write). */
  readonly variants = new Map<string, Variant>();
  constructor(readonly kernel: Kernel) {}
}

/**
 * What synchronize reads for one recording (or one eager run): its fault words (one per checked dispatch, and
 * which kernel owns each) and the readback buffers it writes, copied by the last commands of the same submit
 * into its own MAP_READ staging buffer (faults at 0, readback i at `at[i]`).
 */
interface Tail {
  faults: GPUBuffer | undefined;
  names: string[];
  readbacks: WgpuBuffer[];
  at: number[];
  staging: GPUBuffer;
  copies: Cmd[];
  /** Timestamps (device timing): the query set, the resolve buffer, where they land in the staging, which step
   * each pair brackets, and the values of the latest synchronized submit. */
  timing?: Timing;
}
interface Pending {
  tail: Tail;
  /** Order of the latest submit that filled the staging, and each readback's write count at that time. */
  seq: number;
  writes: number[];
  /** Free the tail's buffers (and these) after synchronize: an eager run's, or a released recording's. */
  temp: GPUBuffer[] | undefined;
}

class WgpuRecording implements Recording {
  released = false;
  replays = 0;
  /** The next replay's command buffers, encoded while the previous one ran. */
  spare: Encoded[] | undefined;
  constructor(
    /** The dispatches and copies, then the tail's copies. */
    readonly list: Cmd[],
    readonly tail: Tail,
    /** Buffers only this recording uses (copy parameters); destroyed on release. */
    readonly owned: GPUBuffer[],
    readonly steps: number,
  ) {}
}

function bounded<T>(p: Promise<T>, ms: number, timeout: () => Error): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const t = setTimeout(() => reject(timeout()), ms);
    p.then((v) => {
      clearTimeout(t);
      resolve(v);
    }, (e) => {
      clearTimeout(t);
      reject(e);
    });
  });
}

export class WgpuDevice implements Device {
  readonly target: TargetSet;
  readonly features: WgpuFeatures;
  /** The underlying GPUDevice (tests use it to force a device loss). */
  readonly gpu: GPUDevice;
  readonly stats: WgpuStats = {
    submits: 0, replays: 0, eagerRuns: 0, dispatches: 0, maps: 0, encodeMicros: 0, lastEncodeMicros: 0, submitMicros: 0,
    mapMicros: 0, earlyMaps: 0, preEncodeMicros: 0, pipelines: 0,
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
  private readonly pipelines = new Map<string, Variant>();
  /** Work enqueued since the last synchronize, by recording (or eager run). */
  private pending: Pending[] = [];
  private seq = 0;
  /** Scratch buffers of unaligned writes and kernel copies, freed at the next synchronize. */
  private temps: GPUBuffer[] = [];
  /** Validation outcomes still to be looked at (compile and record error scopes, compilation messages). */
  private checks: Promise<ExecError | undefined>[] = [];
  private errors: ExecError[] = [];
  private readonly zero16 = new Uint8Array(16);
  /** Staging buffers mapped once by awaiting mapAsync (see mappedEarly). */
  private readonly mappedOnce = new WeakSet<GPUBuffer>();
  private readonly earlyMap: boolean;
  private readonly unroll: boolean;
  private readonly allReadWrite: boolean;

  private constructor(o: Opened, opts: WgpuOptions) {
    this.gpu = o.device;
    this.target = o.target;
    this.features = o.features;
    this.passPerDispatch = opts.passPerDispatch ?? false;
    this.submitParts = Math.max(1, Math.floor(opts.submitParts ?? 1));
    this.timeoutMs = opts.timeoutMs ?? 600_000;
    this.earlyMap = opts.earlyMap ?? true;
    this.unroll = opts.unroll ?? true;
    this.allReadWrite = opts.allReadWrite ?? false;
    this.align = Math.max(4, this.gpu.limits.minStorageBufferOffsetAlignment);
    this.faultStride = this.align;
    this.gpu.lost.then((info) => {
      if (this.destroying || this.poisoned !== undefined) return;
      this.poisoned = `device lost (${info.reason}): ${info.message}`;
      this.lostUnreported = true;
    });
    this.gpu.addEventListener("uncapturederror", (ev) => {
      this.errors.push(typedError((ev as GPUUncapturedErrorEvent).error, "uncaptured"));
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
  private scoped(what: string, f: () => void): void {
    this.gpu.pushErrorScope("out-of-memory");
    this.gpu.pushErrorScope("validation");
    try {
      f();
    } finally {
      const v = this.gpu.popErrorScope(), m = this.gpu.popErrorScope();
      this.checks.push(Promise.all([v, m]).then(([a, b]) => a ? typedError(a, what) : b ? typedError(b, what) : undefined));
    }
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
      this.scoped("alloc", () => {
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
    this.kernelCopy(src, phase, { gpu: w.gpu, offset: offset - phase, size: 0 }, phase, data.byteLength, cmds, owned);
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
      const m = await this.map(st, this.timeoutMs, "read");
      return m.slice(offset - a0, offset - a0 + bytes);
    } finally {
      st.destroy();
    }
  }

  /** Maps a MAP_READ buffer (bounded), copies its bytes out and unmaps. */
  private async map(st: GPUBuffer, timeoutMs: number, what: string): Promise<Uint8Array> {
    const t0 = performance.now();
    const p = st.mapAsync(MAP_READ);
    p.catch(() => {}); // a timed-out map may still reject later
    const early = this.mappedEarly(st, p);
    if (early) {
      this.stats.maps++;
      this.stats.earlyMaps++;
      this.stats.mapMicros += (performance.now() - t0) * 1000;
      return early;
    }
    try {
      await bounded(p, timeoutMs, () => new DeviceTimeout(B, `${what} (mapAsync)`, timeoutMs));
    } catch (e) {
      if (e instanceof DeviceTimeout) throw this.poison(e);
      await Promise.resolve(); // let a pending device-lost callback land first
      if (this.poisoned !== undefined) {
        this.lostUnreported = false;
        throw new DeviceLost(B, this.poisoned);
      }
      throw this.poison(new DeviceLost(B, `${what}: mapAsync failed: ${(e as Error).message}`));
    }
    const out = new Uint8Array(st.getMappedRange().slice(0));
    st.unmap();
    this.mappedOnce.add(st);
    this.stats.maps++;
    this.stats.mapMicros += (performance.now() - t0) * 1000;
    return out;
  }

  /**
   * The bytes of a buffer whose mapAsync was just called, when the map has already happened. Deno's mapAsync
   * polls its first step at the call: it waits on the device (wgpu's blocking poll), which runs the map
   * callback, and only then sleeps 10 ms before it checks again and resolves the promise. The buffer is
   * mapped inside wgpu from that first poll on, so its range can be read and unmapped at once; the promise
   * resolves later, on its own. Only for a buffer that was mapped the ordinary way before (Deno keeps the map
   * mode from that one; before it, getMappedRange would panic); any refusal (a runtime that polls lazily,
   * work still running, a lost device) falls back to awaiting the promise.
   */
  private mappedEarly(st: GPUBuffer, p: Promise<void>): Uint8Array | undefined {
    if (!this.earlyMap || !this.mappedOnce.has(st)) return undefined;
    let out: Uint8Array;
    try {
      out = new Uint8Array(st.getMappedRange().slice(0));
    } catch {
      return undefined;
    }
    try {
      st.unmap();
    } catch {
      // unmapped already: the bytes read are the buffer's
    }
    p.then(() => {}, () => {});
    return out;
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
    this.variant(c, "n");
    this.compiled.set(kernel, c);
    return c;
  }

  /** compile(), then wait for the shader's compilation messages: a bad shader throws here, not at synchronize. */
  async compileAsync(kernel: Kernel): Promise<CompiledKernel> {
    const c = this.compile(kernel);
    await this.drainChecks();
    return c;
  }

  private variant(c: WgpuCompiled, v: string): Variant {
    let x = c.variants.get(v);
    if (x) return x;
    let shader: WgslShader;
    const readWrite = v === "rw" ? true : v.startsWith("rw:") ? v.slice(3).split(",").map(Number) : false;
    try {
      shader = RENDERERS.wgsl.render(c.kernel, this.target.caps, { enableSubgroups: this.features.enableSubgroups, readWrite, unroll: this.unroll });
    } catch (e) {
      if (e instanceof KernelError) throw new Unsupported(`${B}: ${e.message}`);
      throw e;
    }
    const name = c.kernel.name;
    const lim = this.gpu.limits.maxStorageBuffersPerShaderStage;
    if (shader.bindings.length > lim) {
      throw new Unsupported(`${B}: ${name}: ${shader.bindings.length} storage bindings, the adapter allows ${lim} per stage`);
    }
    // Kernels that render to the same WGSL (the same op in every layer) share one pipeline.
    const key = shader.code.slice(shader.code.indexOf("\n", shader.code.indexOf("// kernel ")));
    const same = this.pipelines.get(key);
    if (same) {
      c.variants.set(v, same);
      return same;
    }
    this.scoped(`compile ${name}`, () => {
      const module = this.gpu.createShaderModule({ label: name, code: shader.code });
      this.checks.push(module.getCompilationInfo().then((info) => {
        const errs = info.messages.filter((m) => m.type === "error");
        return errs.length ? new Unsupported(`${B}: ${name}: WGSL does not compile: ${errs.map((m) => m.message).join("; ")}`) : undefined;
      }, () => undefined));
      const layout = this.gpu.createBindGroupLayout({
        label: name,
        entries: shader.bindings.map((b) => ({
          binding: b.binding,
          visibility: COMPUTE,
          buffer: { type: b.access === "read" ? "read-only-storage" as const : "storage" as const },
        })),
      });
      const pipeline = this.gpu.createComputePipeline({
        label: name,
        layout: this.gpu.createPipelineLayout({ bindGroupLayouts: [layout] }),
        compute: { module, entryPoint: shader.entry },
      });
      x = { shader, pipeline, layout };
    });
    this.pipelines.set(key, x!);
    this.stats.pipelines++;
    c.variants.set(v, x!);
    return x!;
  }

  // ---- recording ---------------------------------------------------------------------------------------

  /** A binding's GPU range, checked against the adapter's limits and rounded up to 16 bytes (see wgsl.ts). */
  private range(b: DeviceBinding, what: string, copy = false): { gpu: GPUBuffer; offset: number; size: number; buf: WgpuBuffer } {
    const w = this.buf(b.buffer);
    if (b.offset < 0 || b.bytes < 0 || b.offset + b.bytes > w.bytes) {
      throw new Unsupported(`${B}: ${what}: range ${b.offset}+${b.bytes} outside a ${w.bytes}-byte buffer`);
    }
    if (copy) return { gpu: w.gpu, offset: b.offset, size: b.bytes, buf: w }; // copies bind aligned windows themselves
    if (b.offset % this.align !== 0) {
      throw new Unsupported(`${B}: ${what}: binding offset ${b.offset} is not a multiple of ${this.align} (caps.bindingAlign)`);
    }
    const size = Math.min(Math.max(16, ceil(b.bytes, 16)), w.size - b.offset);
    const max = this.gpu.limits.maxStorageBufferBindingSize;
    if (size > max) {
      throw new Unsupported(`${B}: ${what}: a binding of ${b.bytes} bytes exceeds the adapter's maxStorageBufferBindingSize (${max}); the planner must split it`);
    }
    return { gpu: w.gpu, offset: b.offset, size, buf: w };
  }

  private checkGrid(name: string, g: [number, number, number]): void {
    const m = this.gpu.limits.maxComputeWorkgroupsPerDimension;
    if (g.some((n) => n > m)) throw new Unsupported(`${B}: ${name}: grid ${g.join("x")} exceeds ${m} workgroups per dimension`);
  }

  /** Turns steps into commands: bind groups made here, fault words assigned in dispatch order. */
  private build(steps: DeviceStep[], faults: { buf?: GPUBuffer; names: string[]; stepOf?: number[] }, readbacks: Set<WgpuBuffer>, owned: GPUBuffer[]): Cmd[] {
    const cmds: Cmd[] = [];
    for (const [si, s] of steps.entries()) {
      if (s.k === "copy") {
        const a = this.range(s.src, `step ${si} copy source`, true), b = this.range(s.dst, `step ${si} copy destination`, true);
        if (s.src.bytes !== s.dst.bytes) throw new Unsupported(`${B}: step ${si}: copy of ${s.src.bytes} bytes into ${s.dst.bytes}`);
        if (b.buf.usage === "readback") readbacks.add(b.buf);
        const n = s.src.bytes;
        if (n === 0) continue;
        if (a.gpu !== b.gpu && n % 4 === 0 && a.offset % 4 === 0 && b.offset % 4 === 0) cmds.push({ k: "c", src: a.gpu, so: a.offset, dst: b.gpu, dOff: b.offset, n });
        else this.kernelCopy(a, 0, b, 0, n, cmds, owned);
        continue;
      }
      if (!(s.compiled instanceof WgpuCompiled)) throw new Unsupported(`${B}: step ${si}: kernel was not compiled by this device`);
      const k = s.compiled.kernel;
      if (s.bindings.length !== k.buffers.length) {
        throw new Unsupported(`${B}: ${k.name}: ${s.bindings.length} bindings for ${k.buffers.length} buffers`);
      }
      this.checkGrid(k.name, s.grid);
      const ranges = s.bindings.map((b, i) => this.range(b, `${k.name} binding ${i} (${k.buffers[i].name})`));
      // One GPUBuffer bound read-only and writable in one dispatch is a usage conflict: those read bindings are
      // declared read_write in a variant (the others, weights mostly, stay read-only: no usage barrier, and
      // read-only loads for the driver).
      const base = this.variant(s.compiled, "n");
      const writable = new Set(ranges.filter((_, i) => base.shader.bindings[i].access === "read_write").map((r) => r.gpu));
      const conflict = ranges.flatMap((r, i) => (base.shader.bindings[i].access === "read" && writable.has(r.gpu) ? [i] : []));
      const v = conflict.length ? this.variant(s.compiled, this.allReadWrite ? "rw" : `rw:${conflict.join(",")}`) : base;
      ranges.forEach((r, i) => {
        if (v.shader.bindings[i].access === "read_write" && r.buf.usage === "readback") readbacks.add(r.buf);
      });
      const entries: GPUBindGroupEntry[] = ranges.map((r, i) => ({ binding: i, resource: { buffer: r.gpu, offset: r.offset, size: r.size } }));
      if (v.shader.errorBinding >= 0) {
        entries.push({ binding: v.shader.errorBinding, resource: { buffer: faults.buf!, offset: faults.names.length * this.faultStride, size: 4 } });
        faults.names.push(k.name);
      }
      const q = faults.stepOf ? faults.stepOf.push(si) - 1 : undefined;
      cmds.push({ k: "d", pipeline: v.pipeline, group: this.gpu.createBindGroup({ label: k.name, layout: v.layout, entries }), grid: s.grid, q });
    }
    return cmds;
  }

  /** A dispatch copying n bytes from src+so to dst+dOff (offsets relative to the ranges' bases). */
  private kernelCopy(
    src: { gpu: GPUBuffer; offset: number; size: number }, so: number,
    dst: { gpu: GPUBuffer; offset: number; size: number }, dOff: number, n: number,
    cmds: Cmd[], owned: GPUBuffer[],
  ): void {
    const words = (src.offset + so) % 4 === 0 && (dst.offset + dOff) % 4 === 0 && n % 4 === 0;
    const unit = words ? 4 : 1;
    const c = this.compile(words ? COPY_WORDS : COPY_BYTES) as WgpuCompiled;
    // Bind whole aligned windows; the parameter buffer carries the residual offsets.
    const win = (r: { gpu: GPUBuffer; offset: number }, off: number) => {
      const start = r.offset + off, base = start - (start % this.align);
      return { base, rel: start - base, size: Math.min(ceil(start - base + n, 16), r.gpu.size - base) };
    };
    const a = win(src, so), b = win(dst, dOff);
    const prm = this.gpu.createBuffer({ size: 16, usage: STORAGE | COPY_DST });
    this.gpu.queue.writeBuffer(prm, 0, new Uint32Array([a.rel / unit, b.rel / unit, n / unit, 0]));
    owned.push(prm);
    const same = src.gpu === dst.gpu;
    const v = this.variant(c, same ? "rw" : "n");
    const group = this.gpu.createBindGroup({
      label: c.kernel.name,
      layout: v.layout,
      entries: [
        { binding: 0, resource: { buffer: src.gpu, offset: a.base, size: a.size } },
        { binding: 1, resource: { buffer: dst.gpu, offset: b.base, size: b.size } },
        { binding: 2, resource: { buffer: prm, offset: 0, size: 16 } },
      ],
    });
    cmds.push({ k: "d", pipeline: v.pipeline, group, grid: [Math.min(COPY_GROUPS, Math.max(1, Math.ceil(n / unit / 256))), 1, 1] });
  }

  private faultBuffer(steps: DeviceStep[]): GPUBuffer | undefined {
    let n = 0;
    for (const s of steps) {
      if (s.k === "kernel" && s.compiled instanceof WgpuCompiled && this.variant(s.compiled, "n").shader.errorBinding >= 0) n++;
    }
    if (n === 0) return undefined;
    return this.gpu.createBuffer({ size: ceil(n * this.faultStride, 16), usage: STORAGE | COPY_SRC | COPY_DST });
  }

  /** Builds steps into commands plus their tail (fault words and readbacks copied into a staging buffer). */
  private prepare(steps: DeviceStep[], what: string): { cmds: Cmd[]; tail: Tail; owned: GPUBuffer[] } {
    const faults = { buf: this.faultBuffer(steps), names: [] as string[], stepOf: this.features.timestamps ? [] as number[] : undefined };
    const readbacks = new Set<WgpuBuffer>();
    const owned: GPUBuffer[] = [];
    let cmds: Cmd[] = [];
    try {
      this.scoped(what, () => {
        cmds = this.build(steps, faults, readbacks, owned);
      });
    } catch (e) {
      faults.buf?.destroy();
      for (const o of owned) o.destroy();
      throw e;
    }
    const rbs = [...readbacks], at: number[] = [];
    let size = faults.buf?.size ?? 0;
    for (const r of rbs) {
      at.push(size);
      size += r.size;
    }
    let timing: Timing | undefined;
    const stepOf = faults.stepOf ?? [];
    if (stepOf.length) {
      const bytes = ceil(16 * stepOf.length, 256);
      const set = this.gpu.createQuerySet({ type: "timestamp", count: 2 * stepOf.length });
      const resolved = this.gpu.createBuffer({ size: bytes, usage: QUERY_RESOLVE | COPY_SRC });
      timing = { set, resolved, at: ceil(size, 8), stepOf, steps: steps.length };
      size = timing.at + bytes;
    }
    const staging = this.gpu.createBuffer({ size: Math.max(16, size), usage: MAP_READ | COPY_DST });
    const copies: Cmd[] = [];
    if (faults.buf) copies.push({ k: "c", src: faults.buf, so: 0, dst: staging, dOff: 0, n: faults.buf.size });
    rbs.forEach((r, i) => copies.push({ k: "c", src: r.gpu, so: 0, dst: staging, dOff: at[i], n: r.size }));
    if (timing) {
      copies.push({ k: "r", set: timing.set, count: 2 * stepOf.length, dst: timing.resolved });
      copies.push({ k: "c", src: timing.resolved, so: 0, dst: staging, dOff: timing.at, n: 16 * stepOf.length });
    }
    return { cmds, tail: { faults: faults.buf, names: faults.names, readbacks: rbs, at, staging, copies, timing }, owned };
  }

  private tailBuffers(t: Tail): (GPUBuffer | GPUQuerySet)[] {
    const out: (GPUBuffer | GPUQuerySet)[] = t.faults ? [t.faults, t.staging] : [t.staging];
    if (t.timing) out.push(t.timing.set, t.timing.resolved);
    return out;
  }

  record(steps: DeviceStep[]): Recording {
    this.live();
    const { cmds, tail, owned } = this.prepare(steps, "record");
    return new WgpuRecording([...cmds, ...tail.copies], tail, owned, steps.length);
  }

  /** Encodes commands into one command buffer and submits it (timing each dispatch with a `q` into `timing`). */
  private submit(cmds: Cmd[], timing?: Timing): void {
    const e = encode(this.gpu, cmds, timing, this.passPerDispatch);
    this.stats.encodeMicros += e.micros;
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

  /** A recording's commands as submitParts command buffers, cut at dispatches (the tail's copies end the last). */
  private encodeParts(rec: WgpuRecording): Encoded[] {
    const list = rec.list, parts = this.submitParts;
    if (parts <= 1) return [encode(this.gpu, list, rec.tail.timing, this.passPerDispatch)];
    const total = list.reduce((n, c) => n + (c.k === "d" ? 1 : 0), 0), per = Math.ceil(total / parts);
    const out: Encoded[] = [];
    let from = 0, seen = 0;
    for (let i = 0; i < list.length; i++) {
      if (list[i].k !== "d") continue;
      if (++seen % per === 0 && seen < total) {
        out.push(encode(this.gpu, list.slice(from, i + 1), rec.tail.timing, this.passPerDispatch));
        from = i + 1;
      }
    }
    out.push(encode(this.gpu, list.slice(from), rec.tail.timing, this.passPerDispatch));
    return out;
  }

  run(steps: DeviceStep[]): void {
    this.live();
    const { cmds, tail, owned } = this.prepare(steps, "run");
    this.submit([...cmds, ...tail.copies], tail.timing);
    this.stats.eagerRuns++;
    this.enqueue(tail, owned);
  }

  private async drainChecks(): Promise<void> {
    const checks = this.checks;
    this.checks = [];
    const found = (await Promise.all(checks)).filter((e): e is ExecError => e !== undefined);
    const errs = [...this.errors, ...found];
    this.errors = [];
    if (errs.length) throw errs[0];
  }

  /** Waits for submitted work when there is nothing to map (bounded like a map). */
  private async idle(timeoutMs: number): Promise<void> {
    const p = this.gpu.queue.onSubmittedWorkDone();
    p.catch(() => {});
    try {
      await bounded(p, timeoutMs, () => new DeviceTimeout(B, "synchronize (onSubmittedWorkDone)", timeoutMs));
    } catch (e) {
      if (e instanceof DeviceTimeout) throw this.poison(e);
      throw this.poison(new DeviceLost(B, `onSubmittedWorkDone failed: ${(e as Error).message}`));
    }
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
      const got = await Promise.all(read.map((p) => this.map(p.tail.staging, timeoutMs, "synchronize")));
      maps = new Map(read.map((p, i) => [p, got[i]]));
      if (!pending.length) await this.idle(timeoutMs);
    } finally {
      for (const p of pending) if (p.temp) for (const b of [...this.tailBuffers(p.tail), ...p.temp]) b.destroy();
      for (const t of this.temps) t.destroy();
      this.temps = [];
    }
    await this.drainChecks();
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
    else for (const b of [...this.tailBuffers(rec.tail), ...rec.owned]) b.destroy();
  }

  destroy(): Promise<void> {
    this.destroying = true;
    this.poisoned ??= "destroyed";
    this.gpu.destroy();
    return Promise.resolve();
  }
}

function emptyTail(t: Tail): boolean {
  return !t.faults && t.readbacks.length === 0 && !t.timing;
}

function typedError(e: GPUError, what: string): ExecError {
  const msg = `${B}: ${what}: ${e.message}`;
  if (e.constructor?.name === "GPUOutOfMemoryError") return new OutOfMemory(B, 0, msg);
  return new Unsupported(msg);
}
