// A tensor-parallel group of executors that meet on the host: one Executor per rank (the JS device in CI, any
// backend in principle), each holding its shard of the weights, and the collectives combined on the host between
// them. It is itself an Executor, so the driver, the CLI and serve run a tp group exactly like one device.
//
// addEntry shards the graph (graph/passes/tp.ts), cuts it at its collectives (graph/stages.ts) and adds every
// stage as an entry of every rank; step runs stage by stage, all ranks concurrently, combining in between. This
// costs a readback and an upload per collective per rank per step: it is the simulated group that checks
// sharded graphs without GPUs, not the fast path. On NVIDIA GPUs the collectives belong inside each GPU's
// recording (NCCL calls are capturable into a CUDA graph: ffi/nccl.ts); that device path is not written yet.
// Its shape: the planner lowers a collective to a Program step of its own; since one thread driving several
// GPUs must issue the ranks' NCCL calls inside one ncclGroupStart/End, the ranks' CUDA graphs are captured
// together in lockstep (every rank's stream capturing, kernels issued rank by rank, each collective as one
// group call over the ranks' communicators from ncclCommInitAll), then replayed with one cuGraphLaunch per GPU.
//
// Errors: a rank's failure fails the step (the other ranks' entries are marked needing reset by their own
// engines only if they failed; resetState resets every rank); unload unloads every rank even when one throws.
import type { Graph } from "../graph/ir.ts";
import type { WeightMap, WeightStore } from "../graph/weights.ts";
import { shardGraph, type TpPlan } from "../graph/passes/tp.ts";
import { rankWeights } from "../graph/shard.ts";
import { runStages, type Staged, splitAtCollectives } from "../graph/stages.ts";
import type { Storage } from "../graph/dtype.ts";
import type { TargetSet } from "../kernels/target.ts";
import { ExecError, Unsupported } from "./errors.ts";
import {
  Engine, type EntryId, type EntryKey, type Executor, type ExecutorStats, type HostArray, type LoadOptions, type ProgramCompiler,
  type SlotValues, type StepOptions, type StepResult,
} from "./executor.ts";
import type { Device } from "./device.ts";
import { type BackendChoice, probeBackend } from "./open.ts";

interface GroupEntry {
  key: EntryKey;
  staged: Staged;
  /** ids[rank][stage] */
  ids: EntryId[][];
}

/** Time spent in the collectives of the last steps (host combine, readback and upload of their values). */
export interface GroupStats extends ExecutorStats {
  tp: number;
  /** Mean host microseconds per step spent combining collectives (the all-reduce cost of the simulated group). */
  collectiveMicrosPerStep: number;
  /** Stages per step of the last entry stepped (collective boundaries + 1). */
  stagesPerStep: number;
}

export class RankGroup implements Executor {
  private entries = new Map<EntryId, GroupEntry>();
  private byKey = new Map<EntryKey, EntryId>();
  private nextId = 1;
  /** Per group step (the last 64): host µs, of it the wait for rank 0's device, and the host's combine time. */
  private recent: { host: number; wait: number; combine: number }[] = [];
  private steps = 0;
  private lastStages = 0;

  /** `ranks[r]` runs rank r; the group owns them (unload unloads each). */
  constructor(readonly ranks: readonly Executor[], readonly plan: TpPlan) {
    if (ranks.length !== plan.tp) throw new Unsupported(`a tp ${plan.tp} group needs ${plan.tp} executors, got ${ranks.length}`);
  }

  /** Rank 0's target (every rank compiles for it; memory is one rank's), named as the group. */
  targetSet(): TargetSet {
    const t = this.ranks[0].targetSet();
    if (this.target?.base !== t) this.target = { base: t, named: { ...t, device: `${this.plan.tp} x ${t.device}` } };
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

  addEntry(key: EntryKey, graph: Graph): EntryId {
    const known = this.byKey.get(key);
    if (known !== undefined) return known;
    const staged = splitAtCollectives(shardGraph(graph, this.plan));
    const ids: EntryId[][] = this.ranks.map(() => []);
    try {
      for (let r = 0; r < this.ranks.length; r++) {
        staged.stages.forEach((s, k) => ids[r].push(this.ranks[r].addEntry(`${key}#tp${this.plan.tp}.${k}`, s.graph)));
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
      device: `${this.plan.tp} x ${s0.device}`,
      entries: this.entries.size,
      keys: [...this.entries.values()].map((e) => e.key),
      bytes: { weights: sum((s) => s.bytes.weights), state: sum((s) => s.bytes.state), entries: sum((s) => s.bytes.entries) },
      poisoned: all.find((s) => s.poisoned)?.poisoned,
      tp: this.plan.tp,
      // Per group step, not per stage: what a caller of step() sees.
      steps: this.steps,
      hostMicrosPerStep: avg(this.recent.map((x) => x.host)),
      waitMicrosPerStep: avg(this.recent.map((x) => x.wait)),
      collectiveMicrosPerStep: avg(this.recent.map((x) => x.combine)),
      stagesPerStep: this.lastStages,
    };
  }

  async unload(): Promise<void> {
    this.entries.clear();
    this.byKey.clear();
    const rs = await Promise.allSettled(this.ranks.map((e) => e.unload()));
    const bad = rs.find((r) => r.status === "rejected") as PromiseRejectedResult | undefined;
    if (bad) throw bad.reason;
  }
}

/**
 * Opens a tp group: on "js", `plan.tp` JS devices (the simulated group); on "ptx" (or "auto" with CUDA present),
 * GPUs 0..tp-1, one CUDA context and stream each. Anything else, or fewer GPUs than tp, is Unsupported saying
 * why; nothing opened stays open when it throws.
 */
export async function openRankGroup(backend: BackendChoice, plan: TpPlan, opts: { compile: ProgramCompiler; timeoutMs?: number }): Promise<RankGroup> {
  const tp = plan.tp;
  if (backend !== "auto" && backend !== "ptx" && backend !== "js") {
    throw new Unsupported(`tensor parallelism (tp ${tp}) runs on ptx (one GPU per rank) or js (a simulated group on the CPU), not ${backend}`);
  }
  const devices: Device[] = [];
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
  } catch (e) {
    await Promise.allSettled(devices.map((d) => d.destroy()));
    throw e;
  }
  return new RankGroup(devices.map((d) => new Engine(d, { compile: opts.compile, timeoutMs: opts.timeoutMs })), plan);
}
