// A stand-in for libnccl (backends/ptx/nccl.ts NcclApi) over one FakeCuda per rank, so a tensor-parallel group's
// device path (collectives recorded inside each rank's graph, captured in lockstep, replayed one launch per
// rank) runs without GPUs. A collective is an op on its rank's fake stream: it leaves a copy of its input and
// blocks until every rank's op of the same call has done so, then the last to arrive computes the result
// (all_reduce: an f32 sum in rank order, as graph/collective.ts's oracle; all_gather: the ranks' bytes in rank
// order) and every rank's op writes it to its own output and unblocks its stream. `calls` logs the API calls in
// order (group calls, which rank's collective, commInit/Destroy) for checks of the call order. commAbort lets
// every waiting collective return without a result, as NCCL's abort does.
import { Engine, type ProgramCompiler } from "../../backends/executor.ts";
import { RankGroup } from "../../backends/group.ts";
import { PtxDevice } from "../../backends/ptx/mod.ts";
import { type NcclApi, NcclGroup } from "../../backends/ptx/nccl.ts";
import type { Cuda } from "../../ffi/cuda.ts";
import type { NCCL_DTYPE, NCCL_OP } from "../../ffi/nccl.ts";
import type { TpPlan } from "../../graph/passes/tp.ts";
import type { Kernel } from "../../kernels/ir.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { entryName } from "../../kernels/render/ptx.ts";
import { FakeCuda } from "./fake_cuda.ts";

interface Meeting {
  inputs: (Uint8Array | undefined)[];
  result?: Uint8Array;
  taken: number;
}

export class FakeNccl implements NcclApi {
  readonly calls: string[] = [];
  private depth = 0;
  /** Collectives each rank has reached so far (the k-th of every rank meet). */
  private readonly reached: number[];
  private readonly meetings = new Map<number, Meeting>();
  /** The meeting a rank's blocked op waits in. */
  private readonly waiting: (number | undefined)[];
  private aborted = false;

  constructor(readonly cus: readonly FakeCuda[]) {
    this.reached = cus.map(() => 0);
    this.waiting = cus.map(() => undefined);
  }

  version(): number {
    return 23007;
  }
  commInitAll(devices: readonly number[]): bigint[] {
    this.calls.push(`commInitAll ${devices.join(",")}`);
    if (devices.length !== this.cus.length) throw new Error(`fake nccl: ${devices.length} devices for ${this.cus.length} fake GPUs`);
    return devices.map((_, r) => BigInt(0x100 + r));
  }
  private rank(comm: bigint): number {
    const r = Number(comm) - 0x100;
    if (!(r >= 0 && r < this.cus.length)) throw new Error(`fake nccl: no communicator ${comm}`);
    return r;
  }
  commDestroy(comm: bigint): void {
    this.calls.push(`commDestroy ${this.rank(comm)}`);
  }
  /** Like NCCL's: a collective waiting for its peers returns (its output left as it was). */
  commAbort(comm: bigint): void {
    this.calls.push(`commAbort ${this.rank(comm)}`);
    this.aborted = true;
    for (const cu of this.cus) cu.drain();
  }
  groupStart(): void {
    this.depth++;
    this.calls.push("groupStart");
  }
  groupEnd(): void {
    if (this.depth-- <= 0) throw new Error("fake nccl: groupEnd without groupStart");
    this.calls.push("groupEnd");
  }

  allReduce(send: bigint, recv: bigint, count: number, dtype: keyof typeof NCCL_DTYPE, comm: bigint, _stream: bigint, op: keyof typeof NCCL_OP = "sum"): void {
    if (dtype !== "f32" || op !== "sum") throw new Error(`fake nccl: all_reduce ${op} of ${dtype}`);
    this.collective("allReduce", this.rank(comm), send, recv, count * 4, (ins) => {
      const out = new Float32Array(count);
      for (const b of ins) {
        const v = new Float32Array(b.buffer, b.byteOffset, count);
        for (let i = 0; i < count; i++) out[i] = Math.fround(out[i] + v[i]);
      }
      return new Uint8Array(out.buffer);
    });
  }
  allGather(send: bigint, recv: bigint, count: number, dtype: keyof typeof NCCL_DTYPE, comm: bigint, _stream: bigint): void {
    const size = dtype === "f32" || dtype === "i32" || dtype === "u32" ? 4 : dtype === "f16" || dtype === "bf16" ? 2 : dtype === "f64" ? 8 : 1;
    const bytes = count * size;
    this.collective("allGather", this.rank(comm), send, recv, bytes, (ins) => {
      const out = new Uint8Array(bytes * ins.length);
      ins.forEach((b, r) => out.set(b, r * bytes));
      return out;
    });
  }

  private collective(name: string, r: number, send: bigint, recv: bigint, bytes: number, combine: (ins: Uint8Array[]) => Uint8Array): void {
    if (this.cus.length > 1 && this.depth === 0) throw new Error(`fake nccl: ${name} of rank ${r} outside a group call (one thread, several GPUs)`);
    this.calls.push(`${name} ${r}`);
    const cu = this.cus[r];
    cu.enqueue(() => {
      if (this.aborted) return true;
      let k = this.waiting[r];
      if (k === undefined) {
        k = this.reached[r]++;
        this.waiting[r] = k;
        let m = this.meetings.get(k);
        if (!m) this.meetings.set(k, m = { inputs: this.cus.map(() => undefined), taken: 0 });
        m.inputs[r] = cu.bytesAt(send, bytes).slice();
        if (m.inputs.every((x) => x)) {
          m.result = combine(m.inputs as Uint8Array[]);
          // The others' streams were blocked on this meeting: let them go on.
          this.cus.forEach((c, o) => o !== r && c.drain());
        }
      }
      const m = this.meetings.get(k)!;
      if (!m.result) return false;
      cu.bytesAt(recv, m.result.byteLength).set(m.result);
      this.waiting[r] = undefined;
      if (++m.taken === this.cus.length) this.meetings.delete(k);
      return true;
    });
  }
}

/**
 * A tp group of PtxDevices over fake CUDA (one FakeCuda per rank) and a FakeNccl, on the device path: every
 * kernel a rank compiles is registered with its fake, so the fake runs exactly it.
 */
export function fakeGroup(tp: number, plan: TpPlan, compile: ProgramCompiler = compileGraph): { group: RankGroup; nccl: FakeNccl; cus: FakeCuda[] } {
  const cus = Array.from({ length: tp }, () => new FakeCuda());
  const devs = cus.map((cu, r) => {
    const d = new PtxDevice(cu as unknown as Cuda, { ordinal: r, spinMicros: 1000 });
    const own = d.compile.bind(d);
    d.compile = (k: Kernel) => {
      cu.kernels.set(entryName(k.name), k);
      cu.loading = k;
      try {
        return own(k);
      } finally {
        cu.loading = undefined;
      }
    };
    return d;
  });
  const nccl = new FakeNccl(cus);
  const g = NcclGroup.open(devs, { nccl });
  if (typeof g === "string") throw new Error(g);
  const ranks = devs.map((d) => new Engine(d, { compile, timeoutMs: 20_000 }));
  return { group: new RankGroup(ranks, plan, g.hooks(20_000)), nccl, cus };
}
