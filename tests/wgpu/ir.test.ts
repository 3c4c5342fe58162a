// What the WGSL renderer promises beyond the kernel IR's contract, on the wgpu device (lavapipe in CI) against
// the JS device: a kernel whose invocations return before a barrier stays well-defined (the IR asks kernels not
// to; the renderer's `p_on` flag keeps such a kernel from hanging), checked against the lockstep path. The
// contract itself is tests/devices/ir.test.ts, on every device.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Kernel } from "../../kernels/ir.ts";
import { KernelBuilder } from "../../kernels/ir.ts";
import type { WgpuDevice } from "../../backends/wgpu/mod.ts";
import { bytesOf, jsLike, probe, runKernel, wordDiffs } from "./util.ts";

const dev = await probe();
const skip = typeof dev === "string" ? dev : false;
// The JS device in debug mode refuses a barrier that returned invocations skip; the lenient one runs it.
const jsLenient = jsLike(dev, false);

/** Runs k on both devices and compares every binding bytewise; all that differ are reported together. */
async function same(k: Kernel, inputs: Uint8Array[]): Promise<void> {
  const g = await runKernel(dev as WgpuDevice, k, inputs.map((b) => b.slice()));
  const j = await runKernel(jsLenient, k, inputs.map((b) => b.slice()));
  const bad: string[] = [];
  for (let i = 0; i < g.length; i++) {
    const d = wordDiffs(g[i], j[i]);
    if (d.length) bad.push(`binding ${i} (${k.buffers[i].name}): ${d.join(", ")}`);
  }
  assert.deepEqual(bad, [], `${k.name}: wgpu vs js`);
}

const zeros = (n: number) => new Uint8Array(Math.max(16, Math.ceil(n / 16) * 16));

test("wgpu ir: shared memory tree reduction, barriers, return before a barrier, passing check", { skip }, async () => {
  const k = new KernelBuilder("reduce_shared", { workgroup: 64, grid: 3 });
  const X = k.buffer("x", "f32", "r"), O = k.buffer("o", "f32", "w"), OB = k.buffer("ob", "u32", "w");
  const S = k.shared("s", "f32", 64), SB = k.shared("flag", "bool", 64);
  const l = k.lid.x, g = k.gid.x;
  k.sstore(S, l, 0);
  k.sstore(SB, l, false);
  k.barrier();
  k.if(l.ge(48), () => k.return()); // invocations 48..63 stop here but the others still reach every barrier
  k.check(l.lt(48), 9);
  k.sstore(S, l, k.load(X, g));
  k.sstore(SB, l, k.load(X, g).gt(0));
  k.barrier();
  for (const st of [32, 16, 8, 4, 2, 1]) {
    k.if(l.lt(st), () => {
      k.sstore(S, l, k.sload(S, l).add(k.sload(S, l.add(st))));
      k.sstore(SB, l, k.sload(SB, l).or(k.sload(SB, l.add(st))));
    });
    k.barrier();
  }
  k.if(l.eq(0), () => {
    k.store(O, k.wgid.x, k.sload(S, 0));
    k.store(OB, k.wgid.x, k.sload(SB, 0).cast("u32"));
  });
  const x = new Float32Array(192).map((_, j) => ((j * 37) % 19) - 9); // integers: any summation order is exact
  await same(k.build(), [bytesOf(x), zeros(12), zeros(12)]);
});

test("wgpu ir: a loop holding a barrier, with invocations returning inside it", { skip }, async () => {
  const k = new KernelBuilder("loop_barrier", { workgroup: 32, grid: 2 });
  const O = k.buffer("o", "u32", "w");
  const S = k.shared("s", "u32", 32);
  const l = k.lid.x;
  const acc = k.let(0, "u32");
  k.sstore(S, l, l);
  k.barrier();
  k.for(0, 8, 1, (r) => {
    k.if(l.eq(r.mul(3)), () => k.return()); // lanes 0, 3, 6, ... drop out in round r
    k.set(acc, acc.add(k.sload(S, l.add(r).mod(32))));
    k.barrier();
    k.sstore(S, l, k.sload(S, l).add(1));
    k.barrier();
  });
  k.store(O, k.gid.x, acc.add(1000));
  await same(k.build(), [zeros(64 * 4)]);
});
