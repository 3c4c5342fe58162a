// kernels/render/roll.ts: the JS renderer rolls the library's unrolled blocks back into loops, and the rolled
// kernel computes exactly what the unrolled one does: every kernel-library case (tests/kernels/cases.ts, its own
// inputs) and every kernel of every op case (tests/ops/cases.ts, seeded inputs of each binding's type) that
// rolls runs both ways on the JS renderer's scalar path, and every binding's bytes (or the fault) must match
// bit for bit. Blocks that must not roll (a local read after the run, constants that do not step, a read of
// the previous block's local) stay unrolled.
import { test } from "node:test";
import assert from "node:assert/strict";
import { type Kernel, KernelBuilder, u32 } from "../../kernels/ir.ts";
import { JsKernelFault, renderJs } from "../../kernels/render/js.ts";
import { rollLoops } from "../../kernels/render/roll.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { JS_DEVICE_CAPS } from "../../backends/js/device.ts";
import { cases as kernelCases } from "./cases.ts";
import { opCases } from "../ops/cases.ts";
import { Rng } from "./data.ts";

const caps = JS_DEVICE_CAPS;
const target = { backend: "js" as const, device: "roll test", caps, memory: { totalBytes: 2 ** 32 }, watchdogBudget: 0 };

/** Runs `k` (rolled or not) on copies of `inputs`; every binding's bytes after, or the fault's code. */
function run(k: Kernel, inputs: Uint8Array[], roll: boolean): Uint8Array[] | string {
  const bufs = inputs.map((b) => b.slice());
  const jk = renderJs(k, { subgroupSize: 1, roll });
  try {
    jk.run(jk.bind(bufs.map((b) => ({ buffer: b.buffer, offset: b.byteOffset, bytes: b.byteLength }))));
  } catch (e) {
    if (e instanceof JsKernelFault) return `fault ${e.code}`;
    throw e;
  }
  return bufs;
}

/** Asserts the rolled kernel's results equal the unrolled one's, byte for byte. */
function sameResults(k: Kernel, inputs: Uint8Array[]): void {
  const a = run(k, inputs, false), b = run(k, inputs, true);
  if (typeof a === "string" || typeof b === "string") return assert.equal(b, a, `${k.name}: faults differ`);
  a.forEach((x, i) => {
    const j = x.findIndex((v, n) => v !== b[i][n]);
    assert.equal(j, -1, `${k.name}: binding ${i} differs at byte ${j}`);
  });
}

/** Seeded bytes for a binding of `k`: floats in [-2, 2), 16-bit floats likewise, small integers (indices, positions). */
function fill(k: Kernel, binding: number, bytes: number, rng: Rng): Uint8Array {
  const out = new Uint8Array(Math.ceil(bytes / 16) * 16);
  const elem = k.buffers[binding].elem;
  if (elem === "f32") new Float32Array(out.buffer).forEach((_, i, a) => (a[i] = rng.uniform(-2, 2)));
  else if (elem === "f16" || elem === "bf16") {
    const f = new Float32Array(1), w = new Uint32Array(f.buffer);
    new Uint16Array(out.buffer).forEach((_, i, a) => {
      f[0] = rng.uniform(-2, 2);
      // bf16: the high half; f16: a normal value of exponent 14..15 with random mantissa
      a[i] = elem === "bf16" ? w[0] >>> 16 : (rng.uniform(0, 1) < 0.5 ? 0x8000 : 0) | 0x3800 | (rng.int(0, 2048) & 0x7ff);
    });
  } else if (elem === "i32" || elem === "u32") new Uint32Array(out.buffer).forEach((_, i, a) => (a[i] = rng.int(0, 4)));
  else out.forEach((_, i, a) => (a[i] = rng.int(0, 256)));
  return out;
}

test("roll: every kernel-library case that rolls gives the unrolled kernel's bytes", () => {
  let rolled = 0;
  for (const kc of kernelCases) {
    const k = kc.make(caps);
    if (rollLoops(k) === k) continue;
    rolled++;
    sameResults(k, kc.inputs());
  }
  assert.ok(rolled >= 1, `only ${rolled} library cases roll`);
});

test("roll: every op-case kernel that rolls gives the unrolled kernel's bytes, and the largest shrink", () => {
  let rolled = 0, before = 0, after = 0;
  const rng = new Rng("roll");
  for (const c of opCases()) {
    let steps;
    try {
      steps = compileGraph(c.graph, target).steps;
    } catch {
      continue; // cases the JS target refuses are the op harness's business
    }
    for (const s of steps) {
      if (s.k !== "kernel" || rollLoops(s.kernel) === s.kernel) continue;
      rolled++;
      before += renderJs(s.kernel, { subgroupSize: 1, roll: false }).source.length;
      after += renderJs(s.kernel, { subgroupSize: 1 }).source.length;
      sameResults(s.kernel, s.bindings.map((b, i) => fill(s.kernel, i, b.bytes, rng)));
    }
  }
  assert.ok(rolled >= 10, `only ${rolled} op-case kernels roll`);
  // the unrolled trips of the fused gemvs are most of their code
  assert.ok(after < 0.7 * before, `rolled kernels' source ${after} of ${before} bytes`);
});

/** `n` blocks: each loads x[c + i] (c stepping by `step`, or the constants `cs`), doubles it and stores it. */
function blocks(n: number, opts: { cs?: number[]; escape?: boolean; chain?: boolean; vec?: boolean } = {}): Kernel {
  const b = new KernelBuilder("blocks", { workgroup: 1, grid: 1 });
  const x = b.buffer("x", "f32", "r"), y = b.buffer("y", "f32", "rw");
  const acc = b.let(0, "f32", "acc");
  let last = b.let(0, "f32", "last");
  const vs = [];
  // one statement defining several variables (a vector load), block j reading the j-th
  const four = b.loadv(x, 40, 4);
  for (let j = 0; j < n; j++) {
    const c = opts.cs ? opts.cs[j] : 3 + 5 * j;
    const i = b.let(u32(c), "u32", "i");
    // enough statements per block to be worth a loop, reading x at i and i + 1 .. i + 3
    let v = b.let(b.load(x, i), "f32", "v");
    for (let q = 1; q < 4; q++) v = b.let(v.add(b.load(x, i.add(q))).mul(0.5), "f32", "v");
    if (opts.chain) v = b.let(v.add(last), "f32", "v");
    if (opts.vec) v = b.let(v.add(four[j % 4]), "f32", "v");
    b.set(acc, acc.add(v));
    b.store(y, i, v);
    last = v;
    vs.push(v);
  }
  b.store(y, 0, acc);
  if (opts.escape) b.store(y, 1, vs[0]);
  // pad past the size below which kernels are left alone
  for (let q = 0; q < 200; q++) b.store(y, 2, acc.add(q));
  return b.build();
}
const forCount = (k: Kernel) => k.body.filter((s) => s.k === "for").length;
const blockInputs = () => [Float32Array.from({ length: 64 }, (_, i) => i * 0.25 - 3), new Float32Array(64)].map((a) => new Uint8Array(a.buffer));

test("roll: stepping blocks become one loop with the same results", () => {
  const k = blocks(6);
  const r = rollLoops(k);
  assert.equal(forCount(r), 1);
  assert.ok(r.body.length < k.body.length - 20);
  sameResults(k, blockInputs());
});

test("roll: blocks stay unrolled when a local is read after them, constants do not step, one reads the last, or each reads another result of one vector load", () => {
  for (const opts of [{ escape: true }, { cs: [3, 8, 14, 19, 24, 29] }, { chain: true }, { vec: true }]) {
    const k = blocks(opts.vec ? 4 : 6, opts);
    const r = rollLoops(k);
    // a run that starts after the first block may still roll (the first block's local or constant differs)
    assert.ok(forCount(r) <= 1, JSON.stringify(opts));
    if (opts.chain || opts.vec) assert.equal(forCount(r), 0, JSON.stringify(opts));
    sameResults(k, blockInputs());
  }
});

test("roll: small kernels come back as they are", () => {
  const b = new KernelBuilder("small", { workgroup: 1, grid: 1 });
  const y = b.buffer("y", "f32", "w");
  for (let j = 0; j < 8; j++) b.store(y, j, b.let(u32(j), "u32").cast("f32"));
  const k = b.build();
  assert.equal(rollLoops(k), k);
});
