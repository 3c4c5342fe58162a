// PtxDevice on a real GPU (skips without libcuda or a CUDA device): every IR feature kernel against the JS
// device, the kernel library's conformance cases against their references, capture (record + replay) against
// eager (run) bit for bit through the Engine on a Llama step, slot writes seen by each replay, readback and
// staging paths, and, in child processes (a fault kills the CUDA context of the process that sees it), a
// planted failing check -> KernelFault naming the kernel, poisoning and refusal, and the bounded wait.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Device } from "../../backends/device.ts";
import { Engine } from "../../backends/executor.ts";
import { probePtx } from "../../backends/ptx/mod.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { KernelBuilder } from "../../kernels/ir.ts";
import { traceLlama } from "../../llm/families/llama.ts";
import { cases as libraryCases } from "../kernels/cases.ts";
import { assertCase, runCase } from "../kernels/harness.ts";
import { type FeatureCase, featureCases } from "../devices/feature_kernels.ts";
import { randomLlama, TINY_LLAMA } from "./model.ts";
import { readAll, stepOf, upload } from "../devices/run.ts";
import { child, expectPhase } from "./child.ts";

const probe = probePtx();
const skip = typeof probe === "string" ? probe : false;
const dev = typeof probe === "string" ? undefined : probe;
const T = 60_000;
// bun's default per-test limit is 5 s; GPU tests include JIT compiles and child processes.
const opts = { skip, timeout: 300_000 };

test("PtxDevice reports its target", opts, () => {
  const t = dev!.target;
  assert.equal(t.backend, "ptx");
  assert.ok(t.device.length > 0);
  assert.equal(t.caps.subgroupSize, 32);
  assert.equal(t.caps.trap, true);
  assert.ok(t.caps.maxSharedBytes >= 48 * 1024);
  assert.ok(t.memory.totalBytes > 1e9);
  console.log(`ptx: ${t.device}, sm_${dev!.sm}, ${(t.memory.totalBytes / 2 ** 30).toFixed(1)} GiB, shared ${t.caps.maxSharedBytes} B`);
});

const features = featureCases();
// The feature kernels run on PTX against the JS device in tests/devices/ir.test.ts (every device, PTX's bounds here).

const libOk = libraryCases.filter((kc) => kc.fault === undefined);
test(`kernel library conformance cases (${libOk.length}) on PTX match their references`, opts, async () => {
  const bad: string[] = [];
  for (const kc of libOk) {
    try {
      assertCase(kc, await runCase(dev!, kc, T));
    } catch (e) {
      bad.push((e as Error).message.split("\n").slice(0, 4).join(" | "));
      if (dev!.poisoned) break;
    }
  }
  assert.deepEqual(bad, [], `${bad.length} of ${libOk.length} failed`);
});

/** The control kernel reads its bounds from binding 0: an upload (slot) buffer here. */
function slotted(c: FeatureCase) {
  const bufs = upload(dev!, c);
  const slot = dev!.alloc(c.inputs[0].byteLength, "upload");
  dev!.write(slot, 0, c.inputs[0]);
  bufs[0] = slot;
  return bufs;
}

test("record + replay equals run bit for bit; slot writes before each replay are seen by it", opts, async () => {
  const d = dev!;
  const chain = features.filter((c) => ["unary_f32", "binary_f32", "control", "subgroups_128", "vectors", "shared_barrier"].includes(c.name));
  const control = chain.find((c) => c.name === "control")!;
  const make = () => chain.map((c) => (c === control ? slotted(c) : upload(d, c)));
  const eagerBufs = make(), replayBufs = make();
  // A copy step feeds one kernel's output into the next kernel's input (x of binary_f32 <- y of unary_f32).
  const steps = (bufs: ReturnType<typeof make>) => {
    const list = chain.map((c, i) => stepOf(d, c, bufs[i]));
    const u = chain.indexOf(chain.find((c) => c.name === "unary_f32")!), b = chain.indexOf(chain.find((c) => c.name === "binary_f32")!);
    list.splice(b, 0, { k: "copy", src: { buffer: bufs[u][1], offset: 0, bytes: 1024 }, dst: { buffer: bufs[b][0], offset: 0, bytes: 1024 }, work: { bytes: 2048, flops: 0 } });
    return list;
  };
  const rec = d.record(steps(replayBufs));
  assert.equal(rec.steps, chain.length + 1);
  const slotOf = (bufs: ReturnType<typeof make>) => bufs[chain.indexOf(control)][0];
  for (const bounds of [[100, 1000], [37, 555], [128, 1024]]) {
    const p = new Uint8Array(Uint32Array.from(bounds).buffer);
    d.write(slotOf(eagerBufs), 0, p);
    d.write(slotOf(replayBufs), 0, p);
    d.run(steps(eagerBufs));
    d.replay(rec);
    await d.synchronize(T);
    const a = await Promise.all(eagerBufs.map((b) => readAll(d, b))), b = await Promise.all(replayBufs.map((x) => readAll(d, x)));
    a.forEach((bufs, i) => bufs.forEach((x, j) => assert.deepEqual(b[i][j], x, `${chain[i].name} binding ${j} with bounds ${bounds}`)));
    // The control kernel really saw this replay's bounds: its first output row sums x[g .. bound) step 7.
    const y = new Float32Array(b[chain.indexOf(control)][2].buffer), x = new Float32Array(control.inputs[1].buffer);
    let want = 0;
    for (let i = 5; i < bounds[1]; i += 7) want = Math.fround(want + x[i]);
    assert.equal(y[5], bounds[0] > 5 ? want : 0);
  }
  d.releaseRecording(rec);
  for (const bufs of [...eagerBufs, ...replayBufs]) for (const b of bufs) d.free(b);
});

test("readback buffers, odd-sized and large writes, reads of part of a buffer", opts, async () => {
  const d = dev!;
  const big = new Uint8Array(13 * (1 << 20) + 5); // past the staging ring's halves: waits and wraps
  for (let i = 0; i < big.length; i++) big[i] = (i * 2654435761) >>> 24;
  const a = d.alloc(big.length, "device");
  d.write(a, 0, big);
  d.write(a, 7, new Uint8Array([1, 2, 3]));
  big.set([1, 2, 3], 7);
  await d.synchronize(T);
  assert.deepEqual(await d.read(a, 0, big.length), big);
  assert.deepEqual(await d.read(a, 1 << 20, 33), big.subarray(1 << 20, (1 << 20) + 33));
  d.write(a, 4096, new Uint8Array(2 << 20)); // an all-zero write becomes a memset
  big.fill(0, 4096, 4096 + (2 << 20));
  assert.deepEqual(await d.read(a, 0, big.length), big);
  // A kernel writes straight into a readback (host-mapped) buffer.
  const b = new KernelBuilder("fill_readback", { workgroup: 64, grid: 2 });
  const src = b.buffer("src", "u32", "r"), dst = b.buffer("dst", "u32", "w");
  b.store(dst, b.gid.x, b.load(src, b.gid.x).mul(3).add(1));
  const k = b.build();
  const rb = d.alloc(512, "readback");
  d.run([{ k: "kernel", compiled: d.compile(k), grid: k.grid, work: { bytes: 0, flops: 0 }, bindings: [{ buffer: a, offset: 0, bytes: 512 }, { buffer: rb, offset: 0, bytes: 512 }] }]);
  await d.synchronize(T);
  const got = new Uint32Array((await d.read(rb, 0, 512)).buffer), inp = new Uint32Array(big.buffer.slice(0, 512));
  for (let i = 0; i < 128; i++) assert.equal(got[i], (Math.imul(inp[i], 3) + 1) >>> 0);
  d.free(a);
  d.free(rb);
});

test("Engine<PtxDevice>: a Llama step (bf16 weights) replayed equals eager bit for bit over 12 steps", opts, async () => {
  const { store, map, dtypeOf } = randomLlama(TINY_LLAMA, 7, true);
  const { tracer, logits } = traceLlama(TINY_LLAMA, { rows: 1, cap: 64 }, { dtypeOf });
  tracer.output("token", tracer.argmax(logits, 1));
  tracer.output("logits", logits);
  const eng = new Engine(dev as Device, { compile: compileGraph, timeoutMs: T });
  try {
    await eng.loadWeights(store, map);
    const id = eng.addEntry("decode", tracer.build());
    const run = async (eager: boolean) => {
      eng.resetState();
      const out: Float32Array[] = [];
      let tok = 3;
      for (let pos = 0; pos < 12; pos++) {
        const r = await eng.step(id, { token: new Int32Array([tok]), pos: new Int32Array([pos]) }, { eager });
        out.push(r.outputs.logits as Float32Array);
        tok = (r.outputs.token as Int32Array)[0];
      }
      return out;
    };
    const replayed = await run(false), eager = await run(true);
    replayed.forEach((l, i) => {
      assert.ok(l.every(Number.isFinite), `non-finite logits at step ${i}`);
      assert.deepEqual(l, eager[i], `step ${i}`);
    });
    const s = eng.stats();
    console.log(`ptx: tiny Llama step ${s.hostMicrosPerStep.toFixed(0)} µs host per step (mean of recent)`);
  } finally {
    await eng.unload();
  }
});

// ---- faults, in child processes ----------------------------------------------------------------------

test("a failing check traps: KernelFault names the kernel and code, the device is poisoned, later calls are refused", opts, () => {
  expectPhase.eager(child("eager"));
});

test("a check failing inside a replayed CUDA graph names its kernel among several with checks", opts, () => {
  expectPhase.graph(child("graph"));
});

test("Engine<PtxDevice>: a fault in a step poisons the engine; later steps are refused as Poisoned", opts, () => {
  expectPhase.engine(child("engine"));
});

const faultCases = libraryCases.flatMap((kc, i) => (kc.fault === undefined ? [] : [i]));
test(`the library's fault cases (${faultCases.length}) trap with their codes`, opts, () => {
  assert.ok(faultCases.length > 0);
  for (const i of faultCases) expectPhase.library(child(`library:${i}`));
});

test("synchronize is bounded: a spinning kernel raises DeviceTimeout and poisons", opts, () => {
  expectPhase.timeout(child("timeout"));
});

test("after a fault, destroy resets the primary context (whether a new device then works is reported)", opts, () => {
  const r = child("recover");
  assert.equal(r.fault, "KernelFault");
  // The driver documents sticky errors as unrecoverable short of a new process; report what this one does.
  console.log(`ptx: a new PtxDevice after a fault + destroy ${r.recovered ? "works" : `does not work (${r.error})`}`);
});

test("PtxDevice destroy", opts, async () => {
  await dev!.destroy();
  assert.notEqual(dev!.poisoned, undefined);
});
