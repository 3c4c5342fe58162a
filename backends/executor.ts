// One generic Engine<D> over a thin per-backend Device: the implementation of the execution contract (contract.ts,
// re-exported here with its error model: typed errors, poisoning, NeedsReset, every wait bounded by timeoutMs through
// backends/bound.ts). It loads weights once, compiles and records each entry's program per instance, writes slots,
// replays, waits and reads back.
import type { Graph } from "../graph/ir.ts";
import type { WeightMap, WeightStore } from "../graph/weights.ts";
import { byteSize, type DType } from "../graph/dtype.ts";
import type { TargetSet } from "../kernels/target.ts";
import type { Program } from "../kernels/program.ts";
import type { CompileOptions } from "../kernels/lower.ts";
import type { CollectiveDevice, CompiledKernel, Device, DeviceBuffer, GroupStep, Recording } from "./device.ts";
import { StateReset } from "./reset.ts";
import { ExecError, NeedsReset, Poisoned, Unsupported } from "./errors.ts";
import { Bound } from "./bound.ts";
import {
  type EntryId, type EntryKey, type Executor, type ExecutorStats, type HostArray, type Launched, type LoadOptions, MAX_INSTANCES,
  PARK_MARGIN_MS, PARK_MAX_MS, PARK_MIN_MS, type SlotValues, type StepOptions, type StepResult,
} from "./contract.ts";

export type { Device } from "./device.ts";
export * from "./contract.ts";

/** Turns a graph into a Program for a target (optimize, plan, lower). Injected so the engine stays generic. */
export type ProgramCompiler = (graph: Graph, target: TargetSet, opts?: CompileOptions) => Program;

export interface EngineOptions {
  compile: ProgramCompiler;
  /** Bound on every wait for the device, in milliseconds (600 s by default). */
  timeoutMs?: number;
  /** unload() destroys the device (default true); false when the device is shared and outlives the engine. */
  ownsDevice?: boolean;
}

interface StateBuf {
  buf: DeviceBuffer;
  bytes: number;
  users: Set<EntryId>;
}

/** One recording of an entry's program, with its buffers (see StepOptions.instance). */
interface Instance {
  /** Device buffer of each program buffer (weights and State shared with other entries). */
  bufs: DeviceBuffer[];
  /** Buffers this instance owns and frees on removal. */
  own: DeviceBuffer[];
  steps: GroupStep[];
  rec: Recording;
}

interface Entry {
  id: EntryId;
  key: EntryKey;
  program: Program;
  /** Instance 0 first; more are made on demand and share instance 0's buffers but slots and readbacks. */
  inst: Instance[];
  /** Each kernel of the program compiled once for all instances. */
  compiled: Map<object, CompiledKernel>;
  needsReset: boolean;
  bytes: number;
  /**
   * Milliseconds from replay to the device's end in the last two steps that saw it (0: not yet); a park is
   * sized by the smaller, so one slow step (a first replay uploading the graph) never sizes one.
   */
  deviceMs: [number, number];
}

const ARRAYS: Record<string, new (b: ArrayBuffer, o: number, n: number) => HostArray> = {
  f32: Float32Array, i32: Int32Array, u32: Uint32Array, f16: Uint16Array, bf16: Uint16Array,
  u8: Uint8Array, i8: Int8Array, bool: Uint8Array,
};

function hostArray(dtype: DType, bytes: Uint8Array): HostArray {
  const C = ARRAYS[dtype];
  if (!C) throw new Unsupported(`cannot read back a ${dtype} output`);
  const copy = bytes.slice(); // own, aligned storage
  return new C(copy.buffer, 0, copy.byteLength / byteSize(dtype as "f32", 1));
}

function slotBytes(v: HostArray | number, dtype: DType, name: string): Uint8Array {
  if (typeof v !== "number") return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
  const C = ARRAYS[dtype];
  if (!C || dtype === "f16" || dtype === "bf16") throw new Unsupported(`slot ${name}: give ${dtype} values as an array`);
  const a = new C(new ArrayBuffer(byteSize(dtype, 1)), 0, 1);
  a[0] = v;
  return new Uint8Array(a.buffer);
}

/** One generic implementation of the Executor over any Device. */
export class Engine<D extends Device> implements Executor {
  private readonly timeoutMs: number;
  private readonly ownsDevice: boolean;
  private readonly compileProgram: ProgramCompiler;
  private weights = new Map<string, DeviceBuffer>(); // by role key
  private weightBytes = 0;
  private state = new Map<string, StateBuf>();       // by State name, shared by the entries that carry it
  private entries = new Map<EntryId, Entry>();
  private byKey = new Map<EntryKey, EntryId>();
  private nextId = 1;
  /** resetState's recorded fills, by the State names they zero. */
  private readonly resets: StateReset;
  /** What waits for a synchronize to free (buffers and recordings that queued work may still use). */
  private afterSync: (() => void)[] = [];
  private replays = 0;
  private steps = 0;
  /** Work enqueued so far (launches, each a Launched.seq, and resets), and how much the latest synchronize covered. */
  private launches = 0;
  private synced = 0;
  /** The synchronize in progress, if any, and the latest that failed (with the launches it covered). */
  private syncing: Promise<void> | undefined;
  private failed: { upTo: number; err: unknown } | undefined;
  private readonly recent: number[] = [];
  private readonly recentWait: number[] = [];
  /** Milliseconds the last collect spent in synchronize, and when that synchronize returned. */
  private lastWait = 0;
  private lastSyncEnd = 0;
  /** Set when the engine gave up on a wait the device never finished; the device may not know it. */
  private abandoned: string | undefined;
  /** Bounds every device promise the engine awaits (timeoutMs); past it, poisons the engine: DeviceTimeout. */
  private readonly bound: Bound;

  constructor(readonly device: D, opts: EngineOptions) {
    this.timeoutMs = opts.timeoutMs ?? 600_000;
    this.compileProgram = opts.compile;
    this.ownsDevice = opts.ownsDevice ?? true;
    this.resets = new StateReset(device);
    this.bound = new Bound(this.timeoutMs, device.target.backend, (what) => this.abandoned ??= `${what} did not finish within ${this.timeoutMs} ms`);
  }

  /** Why the device is unusable (its own fault, or a wait the engine abandoned), or undefined. */
  private get poisoned(): string | undefined {
    return this.device.poisoned ?? this.abandoned;
  }

  /** Refuses work on a poisoned device without touching it. */
  private live(): void {
    const p = this.poisoned;
    if (p !== undefined) throw new Poisoned(this.device.target.backend, p);
  }

  targetSet(): TargetSet {
    return this.device.target;
  }

  stepsAhead(): number {
    return this.device.stepsAhead ?? 1;
  }

  async loadWeights(store: WeightStore, map: WeightMap, opts: LoadOptions = {}): Promise<void> {
    this.live();
    const roles = [...map].filter(([role]) => !this.weights.has(role));
    let totalBytes = 0;
    const seen = new Set<string>();
    for (const [role, tensor] of roles) {
      const info = store.info(tensor);
      if (!info) throw new Unsupported(`weight map binds ${role} to ${tensor}, which the model file lacks`);
      if (!seen.has(tensor)) totalBytes += info.byteLength;
      seen.add(tensor);
    }
    let done = 0, doneBytes = 0;
    // Roles bound to one tensor share its buffer (a tp group of one binds a role and its one-way split to it).
    const byTensor = new Map<string, DeviceBuffer>();
    // One tensor at a time: the store reads it (from the file, on demand), the device takes it, it is dropped.
    for (const [role, tensor] of roles) {
      let buf = byTensor.get(tensor);
      if (!buf) {
        const bytes = store.bytes(tensor);
        buf = this.device.alloc(bytes.byteLength, "device");
        this.device.write(buf, 0, bytes);
        byTensor.set(tensor, buf);
        this.weightBytes += bytes.byteLength;
        doneBytes += bytes.byteLength;
      }
      this.weights.set(role, buf);
      opts.onTensor?.(++done, roles.length, doneBytes, totalBytes);
    }
    await this.bound.wait("synchronize", this.syncNow());
  }

  addEntry(key: EntryKey, graph: Graph, opts?: CompileOptions): EntryId {
    this.live();
    const known = this.byKey.get(key);
    if (known !== undefined) return known;
    const program = this.compileProgram(graph, this.device.target, opts);
    const id = this.nextId++;
    try {
      const compiled = new Map<object, CompiledKernel>();
      const inst = this.instance(key, id, program, undefined, compiled);
      const e: Entry = { id, key, program, inst: [inst], compiled, needsReset: false, bytes: inst.own.reduce((a, b) => a + b.bytes, 0), deviceMs: [0, 0] };
      this.entries.set(id, e);
      this.byKey.set(key, id);
      return id;
    } catch (err) {
      for (const s of this.state.values()) s.users.delete(id);
      throw err;
    }
  }

  /**
   * Allocates an instance's buffers and records its steps. `first`: instance 0, whose weights, State and
   * scratch buffers a later instance binds (it allocates only slots and readbacks of its own); `compiled`: the
   * kernels compiled so far for the entry. On failure, frees what it allocated and throws.
   */
  private instance(key: EntryKey, id: EntryId, program: Program, first: Instance | undefined, compiled: Map<object, CompiledKernel>): Instance {
    const bufs: DeviceBuffer[] = [];
    const own: DeviceBuffer[] = [];
    try {
      for (const b of program.buffers) {
        if (first && b.kind !== "slot" && b.kind !== "readback") {
          bufs[b.id] = first.bufs[b.id];
        } else if (b.kind === "weight") {
          const w = this.weights.get(b.name);
          if (!w) throw new Unsupported(`entry ${key}: weight ${b.name} is not bound by the weight map`);
          if (w.bytes < b.bytes) throw new Unsupported(`entry ${key}: weight ${b.name} has ${w.bytes} bytes, plan needs ${b.bytes}`);
          bufs[b.id] = w;
        } else if (b.kind === "state") {
          let s = this.state.get(b.name);
          if (s && s.bytes !== b.bytes) throw new Unsupported(`entry ${key}: state ${b.name} is ${b.bytes} bytes, another entry made it ${s.bytes}`);
          if (!s) {
            const buf = this.device.alloc(b.bytes, "device");
            this.device.write(buf, 0, new Uint8Array(b.bytes));
            s = { buf, bytes: b.bytes, users: new Set() };
            this.state.set(b.name, s);
          }
          s.users.add(id);
          bufs[b.id] = s.buf;
        } else {
          const usage = b.kind === "slot" ? "upload" : b.kind === "readback" ? "readback" : "device";
          const buf = this.device.alloc(Math.max(b.bytes, 4), usage);
          own.push(buf);
          if (b.init) this.device.write(buf, 0, b.init);
          bufs[b.id] = buf;
        }
      }
      const steps: GroupStep[] = program.steps.map((s) => {
        const bind = (x: { buffer: number; offset: number; bytes: number }) => ({ buffer: bufs[x.buffer], offset: x.offset, bytes: x.bytes });
        if (s.k === "copy") return { k: "copy", src: bind(s.src), dst: bind(s.dst), work: s.work };
        if (s.k === "collective") return { ...s, src: bind(s.src), dst: bind(s.dst) };
        let c = compiled.get(s.kernel);
        if (!c) compiled.set(s.kernel, c = this.device.compile(s.kernel));
        return { k: "kernel", compiled: c, bindings: s.bindings.map(bind), grid: s.grid, work: s.work };
      });
      return { bufs, own, steps, rec: this.deviceFor(steps).record(steps) };
    } catch (err) {
      if (this.poisoned === undefined) for (const b of own) this.device.free(b);
      throw err;
    }
  }

  /** Instance `i` of an entry, recorded now if it is new. */
  private instanceOf(e: Entry, i: number): Instance {
    if (!(Number.isInteger(i) && i >= 0 && i < MAX_INSTANCES)) throw new ExecError(`entry ${e.key}: instance ${i} is not an integer in [0, ${MAX_INSTANCES})`);
    while (e.inst.length <= i) {
      const inst = this.instance(e.key, e.id, e.program, e.inst[0], e.compiled);
      e.inst.push(inst);
      e.bytes += inst.own.reduce((a, b) => a + b.bytes, 0);
    }
    return e.inst[i];
  }

  /**
   * Records only the steps of entry `id` that `keep` selects, on the entry's own buffers (to time a part of a
   * step apart, e.g. a tp group's collectives: backends/group.ts). The caller replays it on `this.device` and
   * releases it there; it must not run while a step of the entry is in flight.
   */
  recordPart(id: EntryId, keep: (s: GroupStep) => boolean): Recording {
    this.live();
    const steps = this.entry(id).inst[0].steps.filter(keep);
    return this.deviceFor(steps).record(steps);
  }

  /** The device as one that takes these steps: collectives only where the target says it records them. */
  private deviceFor(steps: GroupStep[]): CollectiveDevice {
    if (!this.device.target.caps.collectives && steps.some((s) => s.k === "collective")) {
      throw new Unsupported(`${this.device.target.backend}: this device does not record collectives`);
    }
    return this.device as unknown as CollectiveDevice;
  }

  private entry(id: EntryId): Entry {
    const e = this.entries.get(id);
    if (!e) throw new ExecError(`no entry ${id}`);
    return e;
  }

  async step(id: EntryId, slots: SlotValues, opts: StepOptions = {}): Promise<StepResult> {
    const l = this.launch(id, slots, opts);
    if (opts.queued) await Promise.resolve();
    return await this.finish(l);
  }

  /**
   * The first half of step: writes the slots and enqueues the entry's work, returning at once. A tp group
   * whose ranks meet inside their recordings (NCCL) launches every rank before it waits for any (a rank's
   * collective waits on the device for the others'). `finish` must follow, once per launch.
   */
  launch(id: EntryId, slots: SlotValues, opts: StepOptions = {}): Launched {
    this.live();
    const e = this.entry(id);
    if (e.needsReset) throw new NeedsReset(id);
    const t0 = performance.now();
    const instance = opts.instance ?? 0;
    const inst = this.instanceOf(e, instance);
    for (const p of e.program.slots) {
      const v = slots[p.name];
      if (v === undefined) throw new ExecError(`entry ${e.key}: slot ${p.name} has no value`);
      const prefix = typeof v === "object" && "prefix" in v;
      const data = slotBytes(prefix ? v.prefix : v as HostArray | number, p.dtype, p.name);
      const want = byteSize(p.dtype, p.shape.reduce((a, b) => a * b, 1));
      if (prefix ? data.byteLength > want || data.byteLength % byteSize(p.dtype, 1) !== 0 : data.byteLength !== want) {
        throw new ExecError(`entry ${e.key}: slot ${p.name} needs ${prefix ? "at most " : ""}${want} bytes, got ${data.byteLength}`);
      }
      if (data.byteLength) this.device.write(inst.bufs[p.buffer], p.offset, data);
    }
    // From here on the device may have written State: any failure leaves the entry needing a reset.
    let mark: number | undefined;
    try {
      if (opts.eager) this.deviceFor(inst.steps).run(inst.steps);
      else this.device.replay(inst.rec);
      this.replays++;
      mark = this.device.mark?.();
    } catch (err) {
      this.spoil(e);
      throw err;
    }
    const tRun = performance.now();
    return { id, instance, seq: ++this.launches, mark, t0, tRun, park: opts.park ?? false };
  }

  /**
   * The second half of step: waits (bounded) for a launch's work and reads its outputs back. Launches in
   * flight together finish in launch order; the first waits for the device (all enqueued work), the later ones
   * only read their outputs.
   */
  async finish(l: Launched): Promise<StepResult> {
    const e = this.entry(l.id), t0 = l.t0, tRun = l.tRun;
    try {
      const parkMs = l.park && this.device.autonomous ? Math.min(PARK_MAX_MS, ...e.deviceMs) - PARK_MARGIN_MS : 0;
      if (parkMs >= PARK_MIN_MS) await new Promise<void>((r) => setTimeout(r, parkMs));
      const parkedMicros = parkMs >= PARK_MIN_MS ? (performance.now() - tRun) * 1000 : 0;
      // One bound (one timer) for the wait and the readbacks together: a timer per await costs microseconds.
      const { outputs, waited: waits } = await this.bound.wait("synchronize", this.collect(e, l));
      const hostMicros = (performance.now() - t0) * 1000, waitMicros = waits ? this.lastWait * 1000 : 0;
      // A wait that found the device already done after a park says only that the device took less than the
      // park: the estimate halves (parking too long delays every token; too short only overlaps less), else the
      // step's time is what was seen (not by a launch that another's wait covered: its time is not its own).
      if (parkedMicros > 0 && this.lastWait < 0.2) e.deviceMs = [e.deviceMs[0] / 2, e.deviceMs[1] / 2];
      else if (waits) e.deviceMs = [e.deviceMs[1], Math.max(0, this.lastSyncEnd - tRun)];
      this.steps++;
      this.recent.push(hostMicros);
      this.recentWait.push(waitMicros);
      if (this.recent.length > 64) {
        this.recent.shift();
        this.recentWait.shift();
      }
      return { outputs, hostMicros, waitMicros, parkedMicros, submitMicros: (tRun - t0) * 1000 };
    } catch (err) {
      this.spoil(e);
      throw err;
    }
  }

  /** A step failed after it may have written State: the entry and every entry sharing its State need a reset. */
  private spoil(e: Entry): void {
    e.needsReset = true;
    for (const s of this.state.values()) if (s.users.has(e.id)) for (const u of s.users) this.entries.get(u)!.needsReset = true;
  }

  private async collect(e: Entry, l: Launched): Promise<{ outputs: Record<string, HostArray>; waited: boolean }> {
    const waited = await this.syncFor(l.seq, l.mark);
    const bufs = e.inst[l.instance].bufs;
    const outputs: Record<string, HostArray> = {};
    for (const p of e.program.outputs) {
      const n = byteSize(p.dtype, p.shape.reduce((a, b) => a * b, 1));
      outputs[p.name] = hostArray(p.dtype, await this.device.read(bufs[p.buffer], p.offset, n));
    }
    return { outputs, waited };
  }

  /**
   * Waits until launch `seq` is done; true when this call waited on the device itself. A synchronize waits for
   * everything enqueued before it, so a launch it covered needs no other (on WebGPU a synchronize with nothing
   * submitted waits out Deno's 10 ms timer), and one in progress is awaited, not doubled (steps finished
   * concurrently, as several `step` calls in flight are). With the launch's `mark` (Device.mark) it waits for
   * that launch and what came before it, not for the launches behind it.
   */
  private async syncFor(seq: number, mark?: number): Promise<boolean> {
    while (seq > this.synced) {
      // A launch made before a synchronize that failed shares its failure (its outputs are void).
      if (this.failed && seq <= this.failed.upTo) throw this.failed.err;
      if (this.syncing) {
        await this.syncing;
        continue;
      }
      const w0 = performance.now();
      await this.syncNow(mark === undefined ? undefined : { seq, mark });
      this.lastSyncEnd = performance.now();
      this.lastWait = this.lastSyncEnd - w0;
      return true;
    }
    return false;
  }

  /**
   * Synchronizes the device now: the launches made so far are covered by it (or share its failure); with `until`,
   * the launches up to until.seq, by waiting for its mark.
   */
  private async syncNow(until?: { seq: number; mark: number }): Promise<void> {
    const upTo = until?.seq ?? this.launches;
    const done = this.device.synchronize(this.timeoutMs, until?.mark);
    this.syncing = done;
    try {
      await done;
    } catch (err) {
      this.failed = { upTo, err };
      throw err;
    } finally {
      if (this.syncing === done) this.syncing = undefined;
    }
    this.synced = Math.max(this.synced, upTo);
    // Work enqueued while this synchronize waited is not covered by it: its frees wait for the next.
    if (upTo === this.launches && this.afterSync.length) {
      const frees = this.afterSync;
      this.afterSync = [];
      for (const f of frees) f();
    }
  }

  /** Waits for a synchronize in progress, then synchronizes if work was enqueued since. */
  private async drain(): Promise<void> {
    while (this.syncing) await this.syncing.catch(() => {});
    if (this.launches > this.synced) await this.syncNow();
  }

  /** The bytes a State buffer holds now (for checks against the oracle; not a per-token path). */
  async readState(name: string): Promise<Uint8Array> {
    this.live();
    const s = this.state.get(name);
    if (!s) throw new ExecError(`no state ${name}`);
    const read = async () => {
      await this.syncNow();
      return await this.device.read(s.buf, 0, s.bytes);
    };
    return await this.bound.wait("synchronize", read());
  }

  resetState(id?: EntryId): void {
    this.live();
    const targets = id === undefined ? [...this.entries.values()] : [this.entry(id)];
    const names = new Set<string>();
    for (const e of targets) for (const p of e.program.state) names.add(p.name);
    for (const b of targets.flatMap((e) => e.program.buffers.filter((x) => x.kind === "state"))) names.add(b.name);
    const live = [...names].filter((n) => this.state.has(n)).sort();
    this.resets.zero(live.join("\n"), live.map((n) => this.state.get(n)!));
    this.launches++; // enqueued work a synchronize covers, as a launch's
    for (const n of live) for (const u of this.state.get(n)!.users) this.entries.get(u)!.needsReset = false;
    for (const e of targets) e.needsReset = false;
  }

  removeEntry(id: EntryId): void {
    const e = this.entry(id);
    this.entries.delete(id);
    this.byKey.delete(e.key);
    const poisoned = this.poisoned !== undefined;
    const frees: (() => void)[] = [];
    for (const [n, s] of this.state) {
      s.users.delete(id);
      if (s.users.size === 0) {
        for (const rec of this.resets.forget(s.buf)) frees.push(() => this.device.releaseRecording(rec));
        frees.push(() => this.device.free(s.buf));
        this.state.delete(n);
      }
    }
    for (const inst of e.inst) {
      frees.push(() => this.device.releaseRecording(inst.rec));
      for (const b of inst.own) frees.push(() => this.device.free(b));
    }
    if (poisoned) return; // leak: pending work may reference them
    // Work still queued (a step not finished, a resetState's fills) may write these buffers: they go at the next
    // synchronize, not under it.
    if (this.launches > this.synced) this.afterSync.push(...frees);
    else for (const f of frees) f();
  }

  stats(): ExecutorStats {
    let state = 0, entries = 0;
    for (const s of this.state.values()) state += s.bytes;
    for (const e of this.entries.values()) entries += e.bytes;
    const avg = (xs: number[]) => xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0;
    const mean = avg(this.recent);
    return {
      backend: this.device.target.backend,
      device: this.device.target.device,
      entries: this.entries.size,
      keys: [...this.entries.values()].map((e) => e.key),
      bytes: { weights: this.weightBytes, state, entries },
      replays: this.replays,
      steps: this.steps,
      hostMicrosPerStep: mean,
      waitMicrosPerStep: avg(this.recentWait),
      poisoned: this.poisoned,
    };
  }

  async unload(): Promise<void> {
    // Queued work (a step never finished, a reset's fills) may still write what is about to be freed.
    if (this.poisoned === undefined) await this.bound.wait("synchronize", this.drain()).catch(() => {});
    const abandoned = this.abandoned !== undefined;
    if (this.poisoned === undefined) {
      for (const id of [...this.entries.keys()]) this.removeEntry(id);
      for (const f of this.afterSync.splice(0)) f();
      for (const w of new Set(this.weights.values())) this.device.free(w);
    }
    this.entries.clear();
    this.byKey.clear();
    this.weights.clear();
    this.state.clear();
    // A device with a wait still outstanding is not destroyed: destroy would wait on that same work.
    try {
      if (this.ownsDevice && !abandoned) await this.bound.wait("destroy", this.device.destroy());
    } finally {
      this.bound.close();
    }
  }
}

