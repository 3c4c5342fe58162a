// What a kernel boundary costs a memory-bound decode step, and how much of it one persistent kernel could win
// back (issue 18: the small shapes' distance to the roofline). A decode step is a chain of weight streams that
// depend on each other (each gemv reads the x the one before wrote); this times that chain with the compute
// stripped out, so only the streams and their boundaries are left:
//   pdl      one kernel per stream, launched with programmatic dependent launch (as poot's PTX decode runs),
//            griddepcontrol.wait before it reads the previous stream's word;
//   early    the same, its first loads issued before griddepcontrol.wait (weights never depend on the previous
//            kernel; session 27 found this slower inside the real gemvs);
//   persist  one kernel for the whole chain: a grid of c blocks a multiprocessor, every block streaming its
//            share of each stream, a grid-wide barrier (a release add and an acquire spin on one counter) in
//            place of each boundary;
//   prefetch the same, each block's first loads of the next stream issued before it enters the barrier
//            (what a megakernel does to keep the memory busy across a boundary);
//   mega     one block a multiprocessor whose loader thread bulk-copies the block's share of every stream into a
//            ring of shared-memory buffers as far ahead as the ring holds (weights never wait), while its 256
//            consumer threads wait per stream for what --dep says, then sum their share from shared memory
//            (Hazy Research's megakernel pattern without its compute; boundary_ptx.ts megaPtx). Its words are
//            checked on the host on a run from zeroed words; a wrong one is printed and the run exits 1.
// Each stream: 256-thread blocks, 16-byte loads, --unroll loads in flight a thread, a sum a thread, a warp and
// block reduction and one word stored a block (a gemv's epilogue); the next stream adds the first block's word
// (the dependency). "one stream" reads all the chain's bytes as one stream: the ceiling. The chains: each
// shape's layer (q/k/v, attention as a 128 KiB read, o, gate/up, down, bf16) times its layers, then the head.
// Every byte of a chain is distinct memory (far past L2), as a model's weights are.
//
//   deno run -A bench/boundary.ts [--shape qwen2.5-0.5b,llama-3.2-1b] [--unroll 8] [--threads 256] [--cpt 16,32]
//     [--blocks 1,2,4] [--ring 12x16,4x16] [--dep all,one,none,ll] [--reps 50]
// (--threads x --cpt: a pdl/early stream's blocks and 16-byte chunks a thread, which set its grid as a gemv's
// team and rows set its; --blocks: the persistent grid's blocks a multiprocessor, capped at what its registers
// let be resident at once; --ring: mega's buffers x KiB each, up to 224 KiB in all; --dep: what a mega block
// waits for before a stream (megaPtx: every block's stream before, the next block's, nothing, every block's
// word polled as it lands); --reps: graph replays timed, two chains each. README "Session 32" has the H200's rows.)
import process, { exit } from "node:process";
import { intList, parseFlags } from "./flags.ts";
import { CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, CU_FUNC_ATTRIBUTE_NUM_REGS, KernelArgs, openCuda } from "../ffi/cuda.ts";
import { LaunchEx } from "../backends/ptx/launch.ts";
import { isShapeName, type ShapeName } from "./shapes.ts";
import { boundaryPtx, chainOf, MEGA_T, type MegaDep, megaPtx, T } from "./boundary_ptx.ts";

const { values: flags } = parseFlags("bench/boundary.ts", {
  options: {
    shape: { type: "string", default: "qwen2.5-0.5b,llama-3.2-1b" },
    unroll: { type: "string", default: "8" },
    cpt: { type: "string", default: "16,32" },
    blocks: { type: "string", default: "1,2,4" },
    threads: { type: "string", default: "256" },
    ring: { type: "string", default: "12x16,4x16" },
    dep: { type: "string", default: "all,one,none,ll" },
    reps: { type: "string", default: "50" },
  },
});
/** A bad flag: one line naming it, exit status 2 (as parseFlags does). */
function bad(flag: string, why: string): never {
  console.error(`bench/boundary.ts: --${flag}: ${why}`);
  exit(2);
}
const ints = (s: string, flag: string): number[] => {
  try {
    return intList(flag, s);
  } catch (e) {
    return bad(flag, (e as Error).message.replace(/^--\S+: /, ""));
  }
};
const shapes = flags.shape.split(",");
for (const s of shapes) if (!isShapeName(s)) bad("shape", `unknown shape ${s}`);
const U = ints(flags.unroll, "unroll")[0], CPTS = ints(flags.cpt, "cpt"), BLOCKS = ints(flags.blocks, "blocks");
const REPS = ints(flags.reps, "reps")[0], THREADS = ints(flags.threads, "threads");
const RINGS = flags.ring.split(",").map((r) => {
  const m = /^(\d+)x(\d+)$/.exec(r.trim());
  if (!m || +m[1] < 1 || +m[2] < 1 || +m[1] * +m[2] > 224) bad("ring", `${r} is not BUFFERSxKIB with at most 224 KiB in all`);
  return { nb: +m[1], kib: +m[2] };
});
const DEPS = flags.dep.split(",").map((d) => ["all", "one", "none", "ll"].includes(d) ? d as MegaDep : bad("dep", `${d} is not all, one, none or ll`));
// a block reduces through 8 words of shared memory (boundary_ptx.ts): whole warps, at most 256 threads
for (const t of THREADS) if (t % 32 || t > 256) bad("threads", `${t} is not a multiple of 32 up to 256`);

// ---- device ----
const cu = (() => {
  try {
    const c = openCuda();
    c.init();
    return c;
  } catch (e) {
    console.error(`bench/boundary.ts: needs libcuda and an sm_90 GPU: ${(e as Error).message.split("\n")[0]}`);
    exit(1);
  }
})();
const dev = cu.device(0);
const ctx = cu.primaryCtxRetain(dev);
cu.ctxSetCurrent(ctx);
const sms = cu.deviceAttribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
const lx = LaunchEx.open(cu);
if (!lx) (console.error("bench/boundary.ts: this libcuda has no cuLaunchKernelEx"), exit(1));
const stream = cu.streamCreate();
const fn = (ptx: string, name: string) => {
  const { module } = cu.moduleLoadDataEx(ptx);
  return cu.moduleGetFunction(module, name);
};
const ptx = boundaryPtx(U);
const stageFns = new Map(THREADS.map((t) => [t, { pdl: fn(ptx.stage(false, t), "stage_pdl"), early: fn(ptx.stage(true, t), "stage_early") }]));
const fPersist = fn(ptx.chain(false), "chain_persist"), fPrefetch = fn(ptx.chain(true), "chain_prefetch");
const megaFns = RINGS.flatMap(({ nb, kib }) =>
  DEPS.map((dep) => {
    const f = fn(megaPtx(nb, kib << 10, dep), "chain_mega");
    cu.funcSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nb * kib << 10);
    return { f, nb, kib, dep };
  })
);
const regs = cu.funcGetAttribute(CU_FUNC_ATTRIBUTE_NUM_REGS, fPrefetch);
const resident = Math.min(Math.floor(65536 / (Math.ceil(regs / 8) * 8 * T)), 2048 / T);
console.log(`\n== ${cu.deviceName(dev)}: ${sms} SMs; ${U} loads in flight a thread; persistent kernel ${regs} registers (${resident} blocks an SM resident)`);

/** µs per chain: `record` launches one chain; captured `per` times in a graph, replayed. */
function time(record: () => void, per = 2): number {
  cu.streamBeginCapture(stream);
  for (let i = 0; i < per; i++) record();
  const exec = cu.graphInstantiate(cu.streamEndCapture(stream));
  for (let i = 0; i < 3; i++) cu.graphLaunch(exec, stream);
  cu.streamSynchronize(stream);
  const a = cu.eventCreate(), b = cu.eventCreate();
  cu.eventRecord(a, stream);
  for (let i = 0; i < REPS; i++) cu.graphLaunch(exec, stream);
  cu.eventRecord(b, stream);
  cu.eventSynchronize(b);
  const ms = cu.eventElapsedTime(a, b);
  cu.graphExecDestroy(exec);
  return (ms * 1000) / (REPS * per);
}

for (const shape of shapes) {
  const c = chainOf(shape as ShapeName);
  const sizes = [...Array.from({ length: c.layers }, () => c.layer).flat(), c.head];
  const total = sizes.reduce((a, b) => a + b, 0);
  const w = cu.memAlloc(total);
  cu.memsetD32(w, 1, total / 4); // mega's check counts 4 a chunk
  const firsts: number[] = [];
  let at = 0;
  for (const b of sizes) (firsts.push(at / 16), at += b);
  const tab = new Uint32Array(sizes.flatMap((b, i) => [firsts[i], b / 16]));
  const dtab = cu.memAlloc(tab.byteLength);
  cu.memcpyHtoD(dtab, tab);
  const maxGrid = Math.max(sms * 8, ...sizes.map((b) => Math.ceil(b / 16 / (Math.min(...THREADS) * Math.min(...CPTS)))));
  const outWords = sizes.length * maxGrid + 1;
  const out = cu.memAlloc(outWords * 4), cnt = cu.memAlloc(16 + 4 * sms);
  cu.memcpyHtoD(out, new Uint32Array(outWords));
  const zero = () => cu.memcpyHtoD(cnt, new Uint32Array(4 + sms));
  zero();
  const rows: [string, number][] = [];
  const chainArgs = new KernelArgs(["u64", "u64", "u32", "u64", "u64"]);
  const persist = (f: bigint, grid: number, ns: number, tabAt: bigint) => {
    chainArgs.set(0, w), chainArgs.set(1, tabAt), chainArgs.set(2, ns), chainArgs.set(3, cnt), chainArgs.set(4, out);
    cu.launchKernel(f, [grid, 1, 1], [T, 1, 1], 0, stream, chainArgs.params); // plainly: the next launch must not overlap
  };
  // the ceiling: every byte as one stream on a full persistent grid
  const one = new Uint32Array([0, total / 16]), oneTab = cu.memAlloc(8);
  cu.memcpyHtoD(oneTab, one);
  rows.push(["one stream (ceiling)", time(() => persist(fPersist, sms * resident, 1, oneTab))]);
  for (const [tb, fs] of stageFns) for (const cpt of CPTS) {
    for (const [label, f] of [["pdl", fs.pdl], ["early", fs.early]] as const) {
      const args = sizes.map((b, i) => {
        const grid = Math.max(32, Math.ceil(b / 16 / (tb * cpt)));
        const a = new KernelArgs(["u64", "u32", "u64", "u64"], [w + BigInt(firsts[i] * 16), b / 16, i ? out + BigInt((i - 1) * maxGrid * 4) : out + BigInt((outWords - 1) * 4), out + BigInt(i * maxGrid * 4)]);
        return { a, grid };
      });
      rows.push([`${label}, ${tb}x${cpt} chunks`, time(() => {
        for (const { a, grid } of args) {
          const r = lx!.launch(f, [grid, 1, 1], [tb, 1, 1], 0, stream, a.params);
          if (r !== 0) throw new Error(`cuLaunchKernelEx: ${cu.errorName(r)}`);
        }
      })]);
    }
  }
  for (const bl of BLOCKS.filter((b) => b <= resident)) {
    for (const [label, f] of [["persist", fPersist], ["prefetch", fPrefetch]] as const) {
      rows.push([`${label}, ${bl} blocks an SM`, time(() => persist(f, sms * bl, sizes.length, dtab))]);
    }
  }
  const mega = (f: bigint, nb: number, kib: number, tabAt: bigint, ns: number) => {
    chainArgs.set(0, w), chainArgs.set(1, tabAt), chainArgs.set(2, ns), chainArgs.set(3, cnt), chainArgs.set(4, out);
    cu.launchKernel(f, [sms, 1, 1], [MEGA_T + 32, 1, 1], nb * kib << 10, stream, chainArgs.params);
  };
  const wrong: string[] = [];
  for (const { f, nb, kib, dep } of megaFns) {
    // one run from zeroed words: each stream's words sum to 4 a chunk plus the words its blocks depended on
    cu.memcpyHtoD(out, new Uint32Array(outWords));
    mega(f, nb, kib, dtab, sizes.length);
    cu.streamSynchronize(stream);
    const ll = dep === "ll", pairs = new Uint32Array(sizes.length * sms * (ll ? 2 : 1));
    cu.memcpyDtoH(pairs, out);
    const words = ll ? pairs.filter((_, i) => i % 2 === 0) : pairs;
    if (ll && new Set(pairs.filter((_, i) => i % 2)).size !== 1) wrong.push(`mega ll ${nb}x${kib}: the words' tags differ`);
    for (let s = 0; s < sizes.length && wrong.length < 3; s++) {
      let sum = 0;
      for (let b = 0; b < sms; b++) sum = (sum + words[s * sms + b]) >>> 0;
      let deps = 0;
      const prev = (b: number) => words[(s - 1) * sms + b];
      let before = 0;
      for (let b = 0; s && b < sms; b++) before = (before + prev(b)) >>> 0;
      for (let b = 0; s && b < sms; b++) deps = (deps + (dep === "all" ? prev(0) : dep === "one" ? prev(b) : dep === "ll" ? before : 0)) >>> 0;
      const want = (4 * (sizes[s] / 16) + deps) >>> 0;
      if (sum !== want) wrong.push(`mega ${nb}x${kib} dep ${dep}: stream ${s} sums to ${sum}, not ${want}`);
    }
    if (f === megaFns[0].f) rows.push([`mega one stream, ${nb}x${kib} KiB`, time(() => mega(f, nb, kib, oneTab, 1))]);
    rows.push([`mega ${dep}, ${nb}x${kib} KiB ring`, time(() => mega(f, nb, kib, dtab, sizes.length))]);
  }
  for (const x of wrong) console.error(`bench/boundary.ts: WRONG ${x}`);
  if (wrong.length) process.exitCode = 1;
  const flag = new Uint32Array(4);
  cu.memcpyDtoH(flag, cnt);
  const gb = total / 1e9;
  console.log(`\n${shape}: ${sizes.length} streams, ${gb.toFixed(3)} GB a chain${flag[2] ? ` (a ${flag[2] === 2 ? "mega buffer" : "barrier"} wait timed out)` : ""}`);
  console.log(`${"variant".padEnd(30)} ${"µs/chain".padStart(10)} ${"TB/s".padStart(7)} ${"µs/stream over ceiling".padStart(24)}`);
  const ceil = rows[0][1];
  for (const [label, us] of rows) {
    console.log(`${label.padEnd(30)} ${us.toFixed(1).padStart(10)} ${(gb / us * 1e3).toFixed(2).padStart(7)} ${((us - ceil) / sizes.length).toFixed(2).padStart(24)}`);
  }
  for (const p of [w, dtab, out, cnt, oneTab]) cu.memFree(p);
}
cu.streamDestroy(stream);
cu.primaryCtxRelease(dev);
