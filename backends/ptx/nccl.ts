// The NCCL group of a tensor-parallel set of PtxDevices in one process: one communicator per GPU (from
// ncclCommInitAll: one thread drives every rank, so no unique id travels), each rank's collectives issued on
// its own device's stream, and the pairing of the ranks' recordings so that they are captured together.
//
// A rank's entry with collective steps is recorded in two moves: its PtxDevice prepares the launches and
// offers them here (PtxDevice.record), and once every rank has offered its part of the same entry (a tp group
// adds each entry to every rank in rank order: the k-th offer of each rank belongs together) the parts are
// captured in lockstep (capture, below) with each collective issued as one NCCL group call over the ranks
// (the pattern of nccl-tests' graph mode with several GPUs per thread). A group of one captures at once; its
// all-reduce is a copy, which is what one GPU can check of the real library (comm init, NCCL calls captured
// in a CUDA graph, replay, teardown). NCCL's guide warns that one thread launching several GPUs' captured
// graphs may deadlock in cudaGraphLaunch: not seen or excluded yet (no multi-GPU run so far).
//
// Errors: NcclError from ffi/nccl.ts for a failed NCCL call; open() says why as a string where the group
// cannot exist (no libnccl), so the caller falls back to the host path; abort() (a rank failed while others
// wait on it) aborts every communicator; close() destroys them (unless aborted) after every rank's work has
// finished, before the contexts go; libnccl itself is never unloaded.
import { NCCL_DTYPE, type Nccl, openNccl } from "../../ffi/nccl.ts";
import type { DType } from "../../graph/dtype.ts";
import type { CollectiveStep } from "../../kernels/program.ts";
import { Unsupported } from "../errors.ts";
import type { Recording } from "../device.ts";
import { forgetCurrentContext, type PendingPart, type PtxDevice } from "./device.ts";
import { env } from "node:process";

/** One prepared collective call of one rank: device addresses resolved. */
export interface CollectiveCall {
  op: CollectiveStep<unknown>["op"];
  dtype: keyof typeof NCCL_DTYPE;
  count: number;
  send: bigint;
  recv: bigint;
  /** Same on every rank for the same collective (op, dtype, count, buffers' offsets aside): warm-up bookkeeping. */
  key: string;
}

/** The NCCL element type of a graph dtype (a bool moves as bytes). */
function ncclType(d: DType): keyof typeof NCCL_DTYPE {
  if (d === "bool") return "u8";
  if (d in NCCL_DTYPE) return d as keyof typeof NCCL_DTYPE;
  throw new Unsupported(`ptx: NCCL has no ${d} collectives`);
}

/** Library names tried: POOT_NCCL_LIBRARY first when set, then the system's libnccl. */
export function ncclLibraryNames(): string[] {
  const own = env.POOT_NCCL_LIBRARY;
  return [...(own ? [own] : []), "libnccl.so.2", "libnccl.so"];
}

/** What the group calls of libnccl (ffi/nccl.ts Nccl; a test may stand in a fake that runs on fake CUDA). */
export type NcclApi = Pick<Nccl, "version" | "commInitAll" | "commDestroy" | "commAbort" | "allReduce" | "allGather" | "groupStart" | "groupEnd">;

export class NcclGroup {
  /** Offered parts per rank, oldest first. */
  private readonly queue: PendingPart[][];
  /** Collectives issued once outside a capture (NCCL connected their channels). */
  private readonly warm = new Set<string>();
  private closed = false;
  /** Why the communicators were aborted (then nothing more is issued and close() destroys nothing). */
  private aborted: string | undefined;

  private constructor(readonly nccl: NcclApi, readonly devices: readonly PtxDevice[], readonly comms: readonly bigint[]) {
    this.queue = devices.map(() => []);
  }

  /**
   * Opens communicators over `devices` (rank r on devices[r], each on its own GPU) and attaches each device.
   * Returns why not as a string where libnccl does not open (the caller keeps the host path).
   */
  static open(devices: readonly PtxDevice[], opts: { library?: string | readonly string[]; nccl?: NcclApi } = {}): NcclGroup | string {
    const ordinals = devices.map((d) => d.ordinal);
    if (new Set(ordinals).size !== ordinals.length) throw new Unsupported(`ptx: an NCCL group needs one GPU per rank, got ordinals ${ordinals.join(", ")}`);
    let nccl: NcclApi;
    try {
      nccl = opts.nccl ?? openNccl(opts.library ?? ncclLibraryNames());
    } catch (e) {
      return `libnccl is not available: ${(e as Error).message.split("\n")[0]}`;
    }
    let comms: bigint[];
    try {
      comms = nccl.commInitAll(ordinals);
    } finally {
      forgetCurrentContext();
    }
    const g = new NcclGroup(nccl, devices, comms);
    devices.forEach((d, r) => d.attachGroup(g, r));
    return g;
  }

  get size(): number {
    return this.devices.length;
  }

  /** NCCL's version as a number (23007 for 2.30.7). */
  version(): number {
    return this.nccl.version();
  }

  /** Rank `rank`'s call for a collective step whose buffers are at `send` and `recv`. */
  call(rank: number, s: CollectiveStep<unknown>, send: bigint, recv: bigint): CollectiveCall {
    if (s.ranks !== this.size) throw new Unsupported(`ptx: a collective over ${s.ranks} ranks in an NCCL group of ${this.size}`);
    if (rank < 0 || rank >= this.size) throw new Unsupported(`ptx: rank ${rank} of a group of ${this.size}`);
    const dtype = ncclType(s.dtype);
    if (s.op === "all_reduce" && !["f32", "f16", "bf16", "f64"].includes(dtype)) throw new Unsupported(`ptx: all_reduce of ${dtype}`);
    return { op: s.op, dtype, count: s.count, send, recv, key: `${s.op}:${dtype}:${s.count}` };
  }

  /** Issues rank `rank`'s call on `stream` (captured when the stream is capturing). */
  issue(rank: number, c: CollectiveCall, stream: bigint): void {
    if (this.aborted !== undefined) throw new Unsupported(`ptx: the NCCL group was aborted: ${this.aborted}`);
    const comm = this.comms[rank];
    if (c.op === "all_reduce") this.nccl.allReduce(c.send, c.recv, c.count, c.dtype, comm, stream);
    else this.nccl.allGather(c.send, c.recv, c.count, c.dtype, comm, stream);
  }

  /** Runs `issue(rank)` for every rank inside one ncclGroupStart/End (a group of one: just the call). */
  private together = (issue: (rank: number) => void): void => {
    if (this.size === 1) return issue(0);
    this.nccl.groupStart();
    try {
      for (let r = 0; r < this.size; r++) issue(r);
    } finally {
      try {
        this.nccl.groupEnd();
      } finally {
        forgetCurrentContext();
      }
    }
  };

  /** What a RankGroup over these devices calls (RankGroupOptions): close before the ranks unload, abort on a failure. */
  hooks(timeoutMs?: number): { beforeUnload: () => Promise<void>; abort: (why: string) => void } {
    return { beforeUnload: () => this.close(timeoutMs), abort: (why) => this.abort(why) };
  }

  /**
   * Aborts every communicator (once): NCCL's kernels waiting on a peer that failed return, so the other ranks'
   * streams run dry. The group issues nothing afterwards. Errors of the abort itself are ignored (a rank whose
   * context is dead may refuse).
   */
  abort(why: string): void {
    if (this.aborted !== undefined || this.closed) return;
    this.aborted = why;
    for (const c of this.comms) {
      try {
        this.nccl.commAbort(c);
      } catch {
        // Best effort, per communicator.
      }
    }
    forgetCurrentContext();
  }

  /** Rank `rank`'s part of the next group recording; the last rank's offer captures them all. */
  offer(rank: number, part: PendingPart): void {
    if (this.closed) throw new Unsupported("ptx: the NCCL group is closed");
    if (this.aborted !== undefined) throw new Unsupported(`ptx: the NCCL group was aborted: ${this.aborted}`);
    this.queue[rank].push(part);
    if (this.queue.some((q) => q.length === 0)) return;
    this.capture(this.queue.map((q) => q.shift()!));
  }

  /**
   * Captures the parts of one group recording (one per rank, in rank order), each into its own device's CUDA
   * graph. One thread drives every GPU, so the capture runs in lockstep: every rank's stream starts capturing,
   * then for each stretch between collectives every rank's launches are enqueued, and each collective goes out
   * as one group call (ncclGroupStart, every rank's call, ncclGroupEnd) across the ranks' streams. Each rank
   * then replays its graph with one cuGraphLaunch; a rank's NCCL kernels wait on the device for the others'.
   * Before its first capture each kind of collective is issued once eagerly on the same buffers (temps of the
   * arena, rewritten by every step), so NCCL connects its channels outside a capture.
   */
  private capture(parts: PendingPart[]): void {
    const devs = parts.map((p) => p.device);
    const runs = parts.map((p) => p.device.stretches(p));
    const fail = (why: string): never => {
      parts.forEach((p) => p.device.failRecording(p.rec, why));
      throw new Unsupported(`ptx: group capture: ${why}`);
    };
    for (const [r, rr] of runs.entries()) {
      if (rr.length !== runs[0].length) fail(`rank ${r} has ${rr.length - 1} collectives, rank 0 has ${runs[0].length - 1}`);
      rr.forEach((x, k) => {
        const a = x.call, b = runs[0][k].call;
        if (a?.key !== b?.key) fail(`collective ${k} of rank ${r} (${a?.key}) differs from rank 0's (${b?.key})`);
      });
    }
    try {
      runs[0].forEach((x, k) => {
        if (!x.call || this.warm.has(x.call.key)) return;
        this.together((r) => devs[r].issueCollective(runs[r][k].call!));
        this.warm.add(x.call.key);
      });
      const graphs: bigint[] = [];
      let began = 0;
      // Every capture that began ends (each stream stays usable); the first failure is raised (the enqueueing's
      // before an end's), and a failed capture's siblings are discarded.
      let err: unknown;
      try {
        for (const d of devs) {
          d.beginCapture();
          began++;
        }
        for (let k = 0; k < runs[0].length; k++) {
          devs.forEach((d, r) => d.enqueueStretch(runs[r][k].launches));
          if (runs[0][k].call) this.together((r) => devs[r].issueCollective(runs[r][k].call!));
        }
      } catch (e) {
        err = e;
      }
      for (let r = 0; r < began; r++) {
        try {
          graphs[r] = devs[r].endCapture();
        } catch (e) {
          err ??= e;
        }
      }
      if (err) {
        graphs.forEach((g, r) => g && devs[r].completeRecording(undefined, g));
        throw err;
      }
      devs.forEach((d, r) => d.completeRecording(parts[r].rec, graphs[r]));
    } catch (e) {
      parts.forEach((p) => p.device.failRecording(p.rec, (e as Error).message));
      throw e;
    }
  }

  /** A part released before its capture (its entry was removed): it leaves the queue. */
  withdraw(rank: number, rec: Recording): void {
    const q = this.queue[rank], i = q.findIndex((p) => p.rec === rec);
    if (i >= 0) q.splice(i, 1);
  }

  /**
   * Destroys the communicators once every rank's stream has run dry (bounded by timeoutMs per device); call it
   * after the ranks' recordings are released and before their devices are destroyed. Idempotent.
   */
  async close(timeoutMs = 600_000): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.aborted !== undefined) return; // ncclCommAbort freed them
    const bad = this.devices.some((d) => d.poisoned !== undefined);
    if (!bad) await Promise.allSettled(this.devices.map((d) => d.synchronize(timeoutMs)));
    const poisoned = bad || this.devices.some((d) => d.poisoned !== undefined);
    // libnccl stays loaded: the driver may run the destructors NCCL attached to released graphs (CUDA user
    // objects) after this returns, and those live in the library's code.
    try {
      if (poisoned) for (const c of this.comms) this.nccl.commAbort(c);
      else this.together((r) => this.nccl.commDestroy(this.comms[r]));
    } finally {
      forgetCurrentContext();
    }
  }
}
