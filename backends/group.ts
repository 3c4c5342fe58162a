// A tensor-parallel group of executors, one per rank, each holding its shard of the weights. It is itself an
// Executor, so the driver, the CLI and serve run a tp group exactly like one device. Two paths, chosen by what
// the ranks' devices can do (never by backend name):
//
// - device ("collectives": every rank's target has caps.collectives: PTX ranks with an NCCL group,
//   backends/ptx/nccl.ts): addEntry shards the graph (graph/passes/tp.ts) and adds it whole to every rank; the
//   planner lowers each collective to a Program step, which the rank records as an NCCL call on its own stream
//   inside its CUDA graph (the ranks' graphs captured together in lockstep). step launches every rank (slot
//   writes, one cuGraphLaunch per GPU) before it waits for any, and reads rank 0's outputs: no host combine,
//   no readback of partial sums.
// - host (everything else: the JS device in CI, Vulkan, a machine without libnccl): addEntry also cuts the
//   sharded graph at its collectives (graph/stages.ts) and adds every stage as an entry of every rank; step runs
//   stage by stage, all ranks concurrently, combining on the host in between. This costs a readback and an
//   upload per collective per rank per step: correct everywhere, slower than one device.
//
// Errors: a rank's failure fails the step (the other ranks' entries are marked needing reset by their own
// engines only if they failed; resetState resets every rank); unload unloads every rank even when one throws.
// On the device path a rank that fails while the others wait for it in a collective makes the group abort its
// communicators (the others' NCCL kernels return; their results are garbage): that step throws the rank's error
// and the group refuses every later step (Poisoned): reopen it.
import type { Graph } from "../graph/ir.ts";
import type { WeightMap, WeightStore } from "../graph/weights.ts";
import { shardGraph, type TpPlan } from "../graph/passes/tp.ts";
import { rankWeights } from "../graph/shard.ts";
import { runStages, type Staged, splitAtCollectives } from "../graph/stages.ts";
import type { Storage } from "../graph/dtype.ts";
import type { TargetSet } from "../kernels/target.ts";
import type { CompileOptions } from "../kernels/lower.ts";
import { ExecError, Poisoned, Unsupported } from "./errors.ts";
import {
  Engine, type EntryId, type EntryKey, type Executor, type ExecutorStats, type HostArray, type Launched, type LoadOptions,
  type ProgramCompiler, type SlotValues, type StepOptions, type StepResult,
} from "./executor.ts";
import type { Device, Recording } from "./device.ts";
import { type BackendChoice, probeBackend } from "./open.ts";
import { PtxDevice } from "./ptx/device.ts";
import { NcclGroup } from "./ptx/nccl.ts";
import { env } from "node:process";

interface GroupEntry {
  key: EntryKey;
  /** The host path's stages (undefined on the device path: one entry per rank). */
  staged?: Staged;
  /** ids[rank][stage] */
  ids: EntryId[][];
}

/** How a group meets: in each rank's recording ("device": NCCL) or between stages on the host. */
export type CollectivePath = "device" | "host";

export interface RankGroupOptions {
  /** "host" keeps the host path even where the devices record collectives (a check, or a fallback). */
  path?: CollectivePath;
  /** Why the device path is not available (said by stats() when the host path runs). */
  hostReason?: string;
  /** Runs after every entry is removed and before the ranks unload (an NCCL group closes here). */
  beforeUnload?: () => Promise<void>;
  /**
   * Called once when a rank's step fails on the device path while the others may wait for it in a collective
   * (an NCCL group aborts its communicators so their kernels return).
   */
  abort?: (why: string) => void;
}

/** Time spent in the collectives of the last steps (host combine, readback and upload of their values). */
export interface GroupStats extends ExecutorStats {
  tp: number;
  /** Mean host microseconds per step spent combining collectives (the all-reduce cost of the simulated group). */
  collectiveMicrosPerStep: number;
  /** Stages per step of the last entry stepped (collective boundaries + 1; 1 on the device path). */
  stagesPerStep: number;
  /** Where the collectives run, and why not on the device when they run on the host. */
  collectives: CollectivePath;
  hostReason?: string;
}

export class RankGroup implements Executor {
  private entries = new Map<EntryId, GroupEntry>();
  private byKey = new Map<EntryKey, EntryId>();
  private nextId = 1;
  /** Per group step (the last 64): host µs, of it the wait for rank 0's device, and the host's combine time. */
  private recent: { host: number; wait: number; combine: number }[] = [];
  private steps = 0;
  private lastStages = 0;

  /** Where this group's collectives run (see the top of this file). */
  readonly path: CollectivePath;
  private readonly hostReason: string | undefined;
  private readonly beforeUnload: (() => Promise<void>) | undefined;
  private readonly abortCollectives: ((why: string) => void) | undefined;
  /** Set once the device path's collectives were aborted after a rank failed: every later step is refused. */
  private broken: string | undefined;

  /** `ranks[r]` runs rank r; the group owns them (unload unloads each). */
  constructor(readonly ranks: readonly Executor[], readonly plan: TpPlan, opts: RankGroupOptions = {}) {
    if (ranks.length !== plan.tp) throw new Unsupported(`a tp ${plan.tp} group needs ${plan.tp} executors, got ${ranks.length}`);
    const capable = ranks.every((e) => e instanceof Engine && e.targetSet().caps.collectives);
    if (opts.path === "device" && !capable) throw new Unsupported("the device path needs every rank's device to record collectives (PTX with NCCL)");
    this.path = capable && opts.path !== "host" ? "device" : "host";
    this.hostReason = this.path === "host" ? opts.hostReason ?? (capable ? "asked for the host path" : "the ranks' devices do not record collectives") : undefined;
    this.beforeUnload = opts.beforeUnload;
    this.abortCollectives = opts.abort;
  }

  /** The group's device name: "2 x NVIDIA H200", with " + NCCL" where the collectives run on the devices. */
  private named(device: string): string {
    return `${this.plan.tp} x ${device}${this.path === "device" ? " + NCCL" : ""}`;
  }

  /** Rank 0's target (every rank compiles for it; memory is one rank's), named as the group. */
  targetSet(): TargetSet {
    const t = this.ranks[0].targetSet();
    if (this.target?.base !== t) this.target = { base: t, named: { ...t, device: this.named(t.device) } };
    return this.target.named;
  }
  private target?: { base: TargetSet; named: TargetSet };

  /**
   * Loads each rank's shard (graph/shard.ts rankWeights) tensor by tensor in lockstep: every rank takes its part
   * of one model tensor before the next is read, so a store that builds or reads tensors on demand (a synthetic
   * model, a file read lazily) produces each one once, not once per rank, and the host holds one at a time.
   */
  async loadWeights(store: WeightStore, map: WeightMap, opts: LoadOptions = {}): Promise<void> {
    const tp = this.plan.tp;
    let last: { name: string; bytes: Uint8Array } | undefined;
    const once: WeightStore = {
      tensors: () => store.tensors(),
      info: (n) => store.info(n),
      bytes: (n) => (last?.name === n ? last.bytes : (last = { name: n, bytes: store.bytes(n) }).bytes),
    };
    const views = this.ranks.map((_, r) => rankWeights(once, map, this.plan.roles, r, tp));
    const total = map.size;
    let totalBytes = 0, done = 0, doneBytes = 0;
    for (const t of new Set(map.values())) totalBytes += store.info(t)?.byteLength ?? 0;
    for (const [key, tensor] of map) {
      const bytes = store.info(tensor)?.byteLength ?? 0;
      await Promise.all(this.ranks.map((e, r) => {
        // This role's entries in the rank's map: the whole tensor and/or this rank's part of it.
        const sub: WeightMap = new Map([...views[r].map].filter(([k]) => k === key || k.startsWith(`${key}/`)));
        return e.loadWeights(views[r].store, sub);
      }));
      last = undefined;
      opts.onTensor?.(++done, total, doneBytes += bytes, totalBytes);
    }
  }

  addEntry(key: EntryKey, graph: Graph, opts?: CompileOptions): EntryId {
    const known = this.byKey.get(key);
    if (known !== undefined) return known;
    const sharded = shardGraph(graph, this.plan);
    const staged = this.path === "host" ? splitAtCollectives(sharded) : undefined;
    const ids: EntryId[][] = this.ranks.map(() => []);
    try {
      for (let r = 0; r < this.ranks.length; r++) {
        if (!staged) ids[r].push(this.ranks[r].addEntry(`${key}#tp${this.plan.tp}`, sharded, opts));
        else staged.stages.forEach((s, k) => ids[r].push(this.ranks[r].addEntry(`${key}#tp${this.plan.tp}.${k}`, s.graph, opts)));
      }
    } catch (e) {
      ids.forEach((row, r) => row.forEach((id) => this.ranks[r].removeEntry(id)));
      throw e;
    }
    const id = this.nextId++;
    this.entries.set(id, { key, staged, ids });
    this.byKey.set(key, id);
    return id;
  }

  private entry(id: EntryId): GroupEntry {
    const e = this.entries.get(id);
    if (!e) throw new ExecError(`no entry ${id}`);
    return e;
  }

  async step(id: EntryId, slots: SlotValues, opts: StepOptions = {}): Promise<StepResult> {
    const e = this.entry(id);
    if (!e.staged) return await this.stepDevice(e, slots, opts);
    const t0 = performance.now();
    let wait = 0;
    const { outputs, combineMicros } = await runStages(e.staged, this.ranks.length, () => slots as Record<string, Storage>, async (r, k, s) => {
      // no park: a stage is a fraction of the step and the ranks step one after another
      const res = await this.ranks[r].step(e.ids[r][k], s as SlotValues, { eager: opts.eager });
      if (r === 0) wait += res.waitMicros;
      return res.outputs as Record<string, Storage>;
    });
    const hostMicros = (performance.now() - t0) * 1000;
    this.recent.push({ host: hostMicros, wait, combine: combineMicros });
    if (this.recent.length > 64) this.recent.shift();
    this.steps++;
    this.lastStages = e.staged.stages.length;
    return { outputs: outputs[0] as Record<string, HostArray>, hostMicros, waitMicros: wait, parkedMicros: 0 };
  }

  /**
   * The device path: every rank launched (its collectives wait on the device for the others'), then every
   * rank finished; rank 0's outputs are the group's (a collective's result is the same on every rank).
   */
  private async stepDevice(e: GroupEntry, slots: SlotValues, opts: { eager?: boolean }): Promise<StepResult> {
    if (opts.eager && this.ranks.length > 1) {
      // One thread issuing several GPUs' NCCL calls must group them across ranks: only a recording does that.
      throw new Unsupported(`eager steps of a ${this.ranks.length}-rank group on the device path (its recordings run the collectives)`);
    }
    if (this.broken !== undefined) throw new Poisoned(this.ranks[0].targetSet().backend, this.broken);
    const t0 = performance.now();
    const ranks = this.ranks as Engine<never>[];
    const launched: Launched[] = [];
    let failed: unknown;
    // A rank that fails while others wait in a collective for it would hold them until their timeout: the
    // group aborts its communicators at once instead (NCCL's kernels then return), and is broken from then on.
    const abort = (r: number, err: unknown) => {
      if (this.broken !== undefined || ranks.length === 1) return;
      this.broken = `rank ${r} failed (${(err as Error).message.split("\n")[0]}); the group's collectives were aborted`;
      this.abortCollectives?.(this.broken);
    };
    try {
      for (let r = 0; r < ranks.length; r++) launched.push(ranks[r].launch(e.ids[r][0], slots, { eager: opts.eager }));
    } catch (err) {
      failed = err;
      if (launched.length > 0) abort(launched.length, err);
    }
    const done = await Promise.allSettled(launched.map((l, r) => ranks[r].finish(l).catch((err) => {
      abort(r, err);
      throw err;
    })));
    const bad = done.find((x) => x.status === "rejected") as PromiseRejectedResult | undefined;
    if (failed !== undefined) throw failed;
    if (bad) throw bad.reason;
    const r0 = (done[0] as PromiseFulfilledResult<StepResult>).value;
    const hostMicros = (performance.now() - t0) * 1000;
    this.recent.push({ host: hostMicros, wait: r0.waitMicros, combine: 0 });
    if (this.recent.length > 64) this.recent.shift();
    this.steps++;
    this.lastStages = 1;
    return { outputs: r0.outputs, hostMicros, waitMicros: r0.waitMicros, parkedMicros: 0 };
  }

  /**
   * Device microseconds per step of entry `id`'s collectives alone: on the device path each rank's collective
   * steps recorded apart (on the entry's buffers) and replayed `reps` times on every rank, timed from launch to
   * the last rank's completion; on the host path the host's combine time per step (stats()). What a step spends
   * in its collectives, without the kernels between them (nothing overlaps them in a step either).
   */
  async collectiveMicros(id: EntryId, reps = 20): Promise<number> {
    const e = this.entry(id);
    if (e.staged) return this.stats().collectiveMicrosPerStep;
    const ranks = this.ranks as Engine<Device>[];
    const recs: Recording[] = [];
    try {
      ranks.forEach((r, i) => recs.push(r.recordPart(e.ids[i][0], (s) => s.k === "collective")));
      const once = async () => {
        ranks.forEach((r, i) => r.device.replay(recs[i]));
        for (const r of ranks) await r.device.synchronize(600_000);
      };
      await once(); // warm: the first launch uploads the graphs
      const t0 = performance.now();
      for (let k = 0; k < reps; k++) await once();
      return ((performance.now() - t0) * 1000) / reps;
    } finally {
      recs.forEach((rec, i) => ranks[i].device.releaseRecording(rec));
    }
  }

  resetState(id?: EntryId): void {
    if (id === undefined) {
      for (const e of this.ranks) e.resetState();
      return;
    }
    const g = this.entry(id);
    g.ids.forEach((row, r) => row.forEach((x) => this.ranks[r].resetState(x)));
  }

  removeEntry(id: EntryId): void {
    const g = this.entry(id);
    this.entries.delete(id);
    this.byKey.delete(g.key);
    g.ids.forEach((row, r) => row.forEach((x) => this.ranks[r].removeEntry(x)));
  }

  /** One State buffer of the whole group: every rank's part joined along its split axis (for checks only). */
  async readState(name: string): Promise<Uint8Array[]> {
    return await Promise.all(this.ranks.map((e) => {
      const read = (e as { readState?: (n: string) => Promise<Uint8Array> }).readState;
      if (!read) throw new Unsupported(`rank executor cannot read state ${name}`);
      return read.call(e, name);
    }));
  }

  stats(): GroupStats {
    const all = this.ranks.map((e) => e.stats());
    const s0 = all[0];
    const sum = (f: (s: ExecutorStats) => number) => all.reduce((a, s) => a + f(s), 0);
    const avg = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);
    return {
      ...s0,
      device: this.named(s0.device),
      entries: this.entries.size,
      keys: [...this.entries.values()].map((e) => e.key),
      bytes: { weights: sum((s) => s.bytes.weights), state: sum((s) => s.bytes.state), entries: sum((s) => s.bytes.entries) },
      poisoned: this.broken ?? all.find((s) => s.poisoned)?.poisoned,
      tp: this.plan.tp,
      // Per group step, not per stage: what a caller of step() sees.
      steps: this.steps,
      hostMicrosPerStep: avg(this.recent.map((x) => x.host)),
      waitMicrosPerStep: avg(this.recent.map((x) => x.wait)),
      collectiveMicrosPerStep: avg(this.recent.map((x) => x.combine)),
      stagesPerStep: this.lastStages,
      collectives: this.path,
      ...(this.hostReason ? { hostReason: this.hostReason } : {}),
    };
  }

  async unload(): Promise<void> {
    // Entries first (an NCCL group's communicators must outlive the graphs that hold their calls), then the
    // hook (closing them), then the ranks.
    let first: unknown;
    for (const id of [...this.entries.keys()]) {
      try {
        this.removeEntry(id);
      } catch (e) {
        first ??= e;
      }
    }
    this.entries.clear();
    this.byKey.clear();
    try {
      await this.beforeUnload?.();
    } catch (e) {
      first ??= e;
    }
    const rs = await Promise.allSettled(this.ranks.map((e) => e.unload()));
    const bad = rs.find((r) => r.status === "rejected") as PromiseRejectedResult | undefined;
    if (first !== undefined) throw first;
    if (bad) throw bad.reason;
  }
}

/** Options of openRankGroup. */
export interface OpenGroupOptions {
  compile: ProgramCompiler;
  timeoutMs?: number;
  /**
   * "auto" (default): the device path where the ranks can record collectives (PTX with libnccl), else the
   * host path; "device": the device path or an Unsupported error saying why not; "host": the host path. The
   * environment variable POOT_TP_COLLECTIVES (auto, device, host) sets the default.
   */
  collectives?: "auto" | CollectivePath;
}

/**
 * Opens a tp group: on "js", `plan.tp` JS devices (the simulated group); on "ptx" (or "auto" with CUDA present),
 * GPUs 0..tp-1, one CUDA context and stream each, joined by an NCCL group where libnccl opens (the device
 * path). Anything else, or fewer GPUs than tp, is Unsupported saying why; nothing opened stays open when it
 * throws.
 */
export async function openRankGroup(backend: BackendChoice, plan: TpPlan, opts: OpenGroupOptions): Promise<RankGroup> {
  const tp = plan.tp;
  if (backend !== "auto" && backend !== "ptx" && backend !== "js") {
    throw new Unsupported(`tensor parallelism (tp ${tp}) runs on ptx (one GPU per rank) or js (a simulated group on the CPU), not ${backend}`);
  }
  const want = opts.collectives ?? collectivesFromEnv();
  const devices: Device[] = [];
  let nccl: NcclGroup | undefined;
  let hostReason: string | undefined;
  try {
    for (let r = 0; r < tp; r++) {
      const name = backend === "auto" ? "ptx" : backend;
      const d = await probeBackend(name, name === "ptx" ? { ptx: { ordinal: r } } : {});
      if (typeof d === "string") {
        const hint = backend === "auto" ? " (--backend js runs a simulated group on the CPU)" : "";
        throw new Unsupported(`tp ${tp} needs ${tp} ${name === "ptx" ? "CUDA GPUs" : "devices"}; rank ${r}: ${d}${hint}`);
      }
      devices.push(d);
    }
    if (want === "host") hostReason = "asked for the host path";
    else if (devices.every((d) => d instanceof PtxDevice)) {
      let g: NcclGroup | string;
      try {
        g = NcclGroup.open(devices as PtxDevice[]);
      } catch (e) {
        if (want === "device") throw e;
        g = `NCCL could not open communicators: ${(e as Error).message.split("\n")[0]}`;
      }
      if (typeof g === "string") hostReason = g;
      else nccl = g;
    } else hostReason = `${devices[0].target.backend} devices do not record collectives (NCCL is for ptx ranks)`;
    if (want === "device" && !nccl) throw new Unsupported(`tp ${tp}: the device path is not available: ${hostReason}`);
  } catch (e) {
    await nccl?.close(opts.timeoutMs).catch(() => {});
    await Promise.allSettled(devices.map((d) => d.destroy()));
    throw e;
  }
  const ranks = devices.map((d) => new Engine(d, { compile: opts.compile, timeoutMs: opts.timeoutMs }));
  return new RankGroup(ranks, plan, { hostReason, ...nccl?.hooks(opts.timeoutMs) });
}

function collectivesFromEnv(): "auto" | CollectivePath {
  const v = env.POOT_TP_COLLECTIVES;
  if (v === undefined || v === "" || v === "auto") return "auto";
  if (v === "device" || v === "host") return v;
  throw new Unsupported(`POOT_TP_COLLECTIVES=${v}: expected auto, device or host`);
}
