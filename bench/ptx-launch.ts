// Host cost of the PTX device's per-token path: N tiny dispatches issued one by one (run) against the same
// N replayed as one CUDA graph, and the whole token round trip (slot write, replay, synchronize, readback).
//   deno run -A bench/ptx-launch.ts [dispatches=64] [iterations=200]      (or: bun bench/ptx-launch.ts)
import process from "node:process";
import { probePtx } from "../backends/ptx/mod.ts";
import { KernelBuilder } from "../kernels/ir.ts";

const n = Number(process.argv[2] ?? 64), iters = Number(process.argv[3] ?? 200);
const dev = probePtx();
if (typeof dev === "string") {
  console.log(`no PTX device: ${dev}`);
  process.exit(0);
}

// y[i] = y[i] + slot[0], so each dispatch depends on the slot and the one before.
const b = new KernelBuilder("bump", { workgroup: 256, grid: 4 });
const slot = b.buffer("slot", "u32", "r"), y = b.buffer("y", "u32", "rw");
b.store(y, b.gid.x, b.load(y, b.gid.x).add(b.load(slot, 0)));
const k = b.build();
const compiled = dev.compile(k);
const slotBuf = dev.alloc(16, "upload"), yBuf = dev.alloc(4096, "device"), out = dev.alloc(16, "readback");
const step = { k: "kernel" as const, compiled, grid: k.grid, work: { bytes: 8192, flops: 0 }, bindings: [{ buffer: slotBuf, offset: 0, bytes: 16 }, { buffer: yBuf, offset: 0, bytes: 4096 }] };
const copy = { k: "copy" as const, src: { buffer: yBuf, offset: 0, bytes: 16 }, dst: { buffer: out, offset: 0, bytes: 16 }, work: { bytes: 32, flops: 0 } };
const steps = [...Array.from({ length: n }, () => step), copy];
const rec = dev.record(steps);
const one = new Uint8Array(new Uint32Array([1, 0, 0, 0]).buffer);
dev.write(slotBuf, 0, one);
await dev.synchronize(60_000);

async function time(label: string, body: () => void | Promise<void>): Promise<number> {
  for (let i = 0; i < 10; i++) await body();
  const t0 = performance.now();
  for (let i = 0; i < iters; i++) await body();
  const us = ((performance.now() - t0) * 1000) / iters;
  console.log(`${label.padEnd(44)} ${us.toFixed(1).padStart(9)} µs`);
  return us;
}

console.log(`${dev.target.device}: ${n} dispatches of a 1024-invocation kernel + one copy, ${iters} iterations`);
const eager = await time("eager: run + synchronize", async () => {
  dev.run(steps);
  await dev.synchronize(60_000);
});
const graph = await time("graph: replay + synchronize", async () => {
  dev.replay(rec);
  await dev.synchronize(60_000);
});
let token = 0;
await time("token: write slot, replay, sync, read 16 B", async () => {
  dev.write(slotBuf, 0, new Uint8Array(new Uint32Array([++token & 7, 0, 0, 0]).buffer));
  dev.replay(rec);
  await dev.synchronize(60_000);
  await dev.read(out, 0, 16);
});
// The host's share of a replay: the time inside replay() (cuGraphLaunch) alone, the device idle before it.
let issue = 0;
for (let i = 0; i < iters + 10; i++) {
  const t0 = performance.now();
  dev.replay(rec);
  if (i >= 10) issue += performance.now() - t0;
  await dev.synchronize(60_000);
}
console.log(`${"graph: replay() call alone".padEnd(44)} ${(issue * 1000 / iters).toFixed(1).padStart(9)} µs`);
console.log(`per dispatch: eager ${(eager / n).toFixed(2)} µs, replayed ${(graph / n).toFixed(2)} µs, replay call ${(issue * 1000 / iters / n).toFixed(3)} µs`);
dev.releaseRecording(rec);
await dev.destroy();
