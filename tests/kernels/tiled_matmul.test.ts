// The shared-memory tiled matmul (kernels/lib/tiled_matmul.ts) on every device present, through the real path
// (compileGraph, an Engine, record, replay): matmuls at 1, 63, 64, 200 and 300 rows with odd n and k (and a
// 16-byte-aligned k for the vector loads), every weight type, + bias and + residual, each element against the
// oracle (graph/eval) within graph/tolerance's matmul bound; the lowering is told to take the tiled kernel from
// one row (tiledMinRows 1) and the test checks it did. Batch invariance: rows computed alone (M = 1) and inside
// a batch of 300 are bit-identical. Layouts fit each target's limits; the default lowering picks the kernel
// from TILED_MIN_ROWS rows and keeps matmul.ts below. A missing device reports a skip. (Under Bun the JS device
// runs rows 1/63/64 only and leaves the layout sweep to Deno: the same kernels, at twice the time. Every case here
// is a forced variant, so on lavapipe the vulkan and wgpu backends deal the cases and layouts between them:
// tests/devices/index.ts softwareShare.)
import { test } from "node:test";
import process from "node:process";
import assert from "node:assert/strict";
import { Engine } from "../../backends/executor.ts";
import { compileGraph, type CompileOptions, TILED_MIN_ROWS } from "../../kernels/lower.ts";
import { evaluate } from "../../graph/eval.ts";
import { assertClose, assertMeaningful } from "../../graph/tolerance.ts";
import type { DType, Storage } from "../../graph/dtype.ts";
import { openDevice, selectedBackends, slowDevice, softwareShare } from "../devices/index.ts";
import { CaseBuilder, type OpCase, rng } from "../ops/cases.ts";
import { loadCaseWeights } from "../ops/load.ts";
import { tiledFits, tiledLayout, tiledSlice } from "../../kernels/lib/tiled_matmul.ts";
import { JS_CAPS } from "../../kernels/target.ts";
import type { Device } from "../../backends/device.ts";
import { prefillDefault } from "../../llm/driver.ts";

const FLOATS = ["f32", "f16", "bf16"] as const;
const BLOCKS = ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k"] as const;
const ROWS = [1, 63, 64, 200, 300];

function cases(heavy: boolean): OpCase[] {
  const out: OpCase[] = [];
  let seed = 1;
  const add = (name: string, f: (b: CaseBuilder) => OpCase) => out.push(f(new CaseBuilder(name, rng(seed++ * 104729))));
  const rows = heavy ? ROWS : [1, 63, 64];
  for (const w of FLOATS) {
    for (const m of rows) add(`tiled ${w} ${m}x67x131`, (b) => b.done({ y: b.t.matmul(b.input("f32", [m, 131]), b.weight(w, [67, 131])) }));
    add(`tiled ${w} 200x33x96 (vector loads)`, (b) => b.done({ y: b.t.matmul(b.input("f32", [200, 96]), b.weight(w, [33, 96])) }));
  }
  for (const w of BLOCKS) {
    const k = w.endsWith("_k") ? 256 : 96;
    for (const m of heavy ? rows : [1, 64]) add(`tiled ${w} ${m}x37x${k}`, (b) => b.done({ y: b.t.matmul(b.input("f32", [m, k]), b.weight(w, [37, k])) }));
  }
  add("tiled + residual 70x40x64", (b) => {
    const x = b.input("f32", [70, 64]);
    return b.done({ y: b.t.add(b.input("f32", [70, 40]), b.t.matmul(x, b.weight("f32", [40, 64]))) });
  });
  add("tiled + bias 65x41x64", (b) => {
    const x = b.input("f32", [65, 64]);
    return b.done({ y: b.t.add(b.t.matmul(x, b.weight("bf16", [41, 64])), b.weight("f32", [41])) });
  });
  return out;
}

/** Runs a case on the engine; checks every output against the oracle; returns the outputs' bytes. */
async function run(eng: Engine<Device>, c: OpCase): Promise<Record<string, Uint8Array>> {
  const consts = await loadCaseWeights(eng, c);
  const id = eng.addEntry(`tiled:${c.name}`, c.graph);
  try {
    const want = evaluate(c.graph, { consts, slots: c.slots, state: {} }, { bounds: "worst" });
    const got = await eng.step(id, c.slots);
    const out: Record<string, Uint8Array> = {};
    for (const [name, x] of Object.entries(want.output)) {
      const d: DType = c.graph.nodes[c.graph.outputs[name]].dtype;
      assertMeaningful(`${c.name} ${name}`, d, x, want.bounds!.output[name]);
      assertClose(`${c.name} ${name}`, d, got.outputs[name] as Storage, x, want.bounds!.output[name]);
      out[name] = new Uint8Array(got.outputs[name].buffer.slice(0));
    }
    return out;
  } finally {
    eng.removeEntry(id);
  }
}

/**
 * Runs cases on a device under compile options, each first checked to lower as `lowered` says (by its kernel
 * names); returns the failures.
 */
async function runCases(dev: Device, opts: CompileOptions, cs: OpCase[], lowered: (names: string[], c: OpCase) => boolean): Promise<string[]> {
  const eng = new Engine(dev, { compile: (g, t) => compileGraph(g, t, opts), timeoutMs: 60_000, ownsDevice: false });
  const failures: string[] = [];
  try {
    for (const c of cs) {
      const names = compileGraph(c.graph, dev.target, opts).steps.flatMap((st) => st.k === "kernel" ? [st.kernel.name] : []);
      if (!lowered(names, c)) failures.push(`${c.name}: lowered to ${names.join(", ")}`);
      try {
        const t0 = performance.now();
        await run(eng, c);
        if (process.env.POOT_TIMES) console.log(`${dev.target.backend} ${c.name}: ${(performance.now() - t0).toFixed(0)} ms`);
      } catch (e) {
        failures.push(`${c.name}: ${(e as Error).message.split("\n")[0]}`);
        if (dev.poisoned) break;
      }
    }
  } finally {
    await eng.unload();
  }
  return failures;
}

const FORCE: CompileOptions = { gemv: false, tiled: true, tiledMinRows: 1, mma: "off" };

test("tiled layouts fit the limits: wgpu's 16 KiB / 256 invocations take a smaller tile for wide block slices", () => {
  const wgpu = { ...JS_CAPS, maxWorkgroupSize: 256, maxSharedBytes: 16384 };
  for (const w of [...FLOATS, ...BLOCKS]) {
    for (const caps of [JS_CAPS, wgpu]) {
      const l = tiledLayout(caps, w, 300, 37)!;
      assert.ok(l, `${w}: a layout`);
      assert.ok((l.bm / l.tm) * (l.bn / l.tn) <= caps.maxWorkgroupSize);
      assert.ok((l.bm + l.bn) * l.bk * 4 <= caps.maxSharedBytes, `${w}: ${JSON.stringify(l)} within ${caps.maxSharedBytes} bytes`);
    }
  }
  assert.deepEqual(tiledLayout(wgpu, "q6_k", 4096, 4096), { bm: 16, bn: 16, tm: 1, tn: 1, bk: 128 });
  assert.equal(tiledLayout({ ...JS_CAPS, maxSharedBytes: 1024 }, "q6_k", 300, 37), undefined);
  // large batches take the largest tile, small grids smaller ones
  assert.deepEqual(tiledLayout(JS_CAPS, "f32", 32768, 768), { bm: 128, bn: 128, tm: 8, tn: 8, bk: 16 });
  assert.deepEqual(tiledLayout(JS_CAPS, "f32", 512, 2048), { bm: 64, bn: 64, tm: 4, tn: 4, bk: 16 });
  assert.deepEqual(tiledLayout(JS_CAPS, "f32", 128, 768), { bm: 16, bn: 16, tm: 1, tn: 1, bk: 16 });
});

test(`the default lowering takes the tiled kernel from ${TILED_MIN_ROWS} rows, matmul.ts below, MMA where it applies`, () => {
  const target = { backend: "js" as const, device: "js", caps: JS_CAPS, memory: { totalBytes: 2 ** 30 }, watchdogBudget: 0 };
  const names = (m: number, w: "f32" | "bf16" = "f32", opts: CompileOptions = {}, caps = JS_CAPS) => {
    const c = new CaseBuilder("lower", rng(5));
    const g = c.done({ y: c.t.matmul(c.input("f32", [m, 64]), c.weight(w, [40, 64])) }).graph;
    return compileGraph(g, { ...target, caps }, opts).steps.flatMap((s) => s.k === "kernel" ? [s.kernel.name] : []);
  };
  const gpu = { ...JS_CAPS, subgroupSize: 32 }; // JS_CAPS' subgroups are not one lane: a GPU's choices
  assert.ok(names(TILED_MIN_ROWS, "f32", {}, gpu).some((n) => n.startsWith("tiled_matmul_")));
  assert.ok(!names(TILED_MIN_ROWS - 1, "f32", {}, gpu).some((n) => n.startsWith("tiled_matmul_")));
  assert.ok(!names(300, "f32", {}, { ...JS_CAPS, subgroupSize: 1 }).some((n) => n.startsWith("tiled_matmul_")), "the JS device keeps matmul.ts");
  assert.ok(names(300, "f32", { tiled: true }, { ...JS_CAPS, subgroupSize: 1 }).some((n) => n.startsWith("tiled_matmul_")));
  assert.ok(!names(300, "f32", { tiled: false }, gpu).some((n) => n.startsWith("tiled_matmul_")));
  // the Driver's prefill chunks follow: wide ones where the tiled kernel (or MMA) takes them
  assert.deepEqual(prefillDefault(gpu), [512, 32, 8]);
  assert.deepEqual(prefillDefault({ ...JS_CAPS, subgroupSize: 1 }), [32, 8]);
  const mma = names(300, "bf16", {}, { ...gpu, mma: true });
  assert.ok(mma.some((n) => n.startsWith("mma_")) && !mma.some((n) => n.startsWith("tiled_")), mma.join(", "));
});

for (const backend of selectedBackends()) {
  const dev = await openDevice(backend);
  const skip = typeof dev === "string" ? dev : false;
  // The JS device under Bun runs the same renderer output as under Deno, ~2x slower: the short row list there.
  const heavy = typeof dev !== "string" && !slowDevice(dev) && !(backend === "js" && "Bun" in globalThis);
  test(`tiled matmul on ${backend}: rows ${heavy ? ROWS.join("/") : "1/63/64"}, every weight type, vs the oracle`, { skip, timeout: 600_000 }, async () => {
    if (typeof dev === "string") return;
    assert.deepEqual(await runCases(dev, FORCE, softwareShare(dev, cases(heavy)), (names) => names.some((nm) => nm.startsWith("tiled_matmul_"))), []);
  });

  const layoutSkip = skip || (backend === "js" && "Bun" in globalThis ? "runs under Deno (the same JS kernels)" : false);
  test(`tiled matmul on ${backend}: every tile layout (128x128 of 8x8 down to 32x32 of 2x2) vs the oracle`, { skip: layoutSkip, timeout: 600_000 }, async () => {
    if (typeof dev === "string") return;
    const failures: string[] = [];
    for (const [bm, bn, tm, tn] of softwareShare(dev, [[128, 128, 8, 8], [128, 64, 8, 4], [64, 64, 4, 4], [64, 32, 4, 2], [32, 32, 2, 2]])) {
      let seed = bm * 7 + bn;
      const add = (name: string, f: (b: CaseBuilder) => OpCase) => f(new CaseBuilder(name, rng(seed++)));
      const cs = [
        add(`${bm}x${bn} f32 200x67x131`, (b) => b.done({ y: b.t.matmul(b.input("f32", [200, 131]), b.weight("f32", [67, 131])) })),
        add(`${bm}x${bn} bf16 150x130x96`, (b) => b.done({ y: b.t.matmul(b.input("f32", [150, 96]), b.weight("bf16", [130, 96])) })),
        add(`${bm}x${bn} q4_k 140x70x256`, (b) => b.done({ y: b.t.matmul(b.input("f32", [140, 256]), b.weight("q4_k", [70, 256])) })),
      ];
      failures.push(...await runCases(dev, { ...FORCE, tiledTile: { bm, bn, tm, tn } }, cs, (names, c) => {
        // q4_k's 64-wide slice: the large tiles exceed some targets' shared memory and fall back
        const fits = tiledFits(dev.target.caps, { bm, bn, tm, tn, bk: tiledSlice(c.name.includes("q4_k") ? "q4_k" : "f32") });
        return fits === names.some((nm) => nm.endsWith(`_${bm}x${bn}_${tm}x${tn}`));
      }));
    }
    assert.deepEqual(failures, []);
  });

  test(`tiled matmul on ${backend}: a row alone and inside a batch of 300 are bit-identical`, { skip, timeout: 600_000 }, async () => {
    if (typeof dev === "string") return;
    const eng = new Engine(dev, { compile: (g, t) => compileGraph(g, t, FORCE), timeoutMs: 60_000, ownsDevice: false });
    try {
      for (const w of ["f32", "q4_k"] as const) {
        const k = w === "q4_k" ? 256 : 131, n = 45, M = 300;
        const r = rng(w === "f32" ? 11 : 12);
        const x = Float32Array.from({ length: M * k }, () => r(-2, 2));
        const mk = (rows: Float32Array, m: number): OpCase => {
          const c = new CaseBuilder(`inv ${w}`, rng(13)); // the same seed: the same weight bytes
          const weight = c.weight(w, [n, k]);
          c.slots.x = rows;
          return c.done({ y: c.t.matmul(c.t.slot("x", { kind: "Input", dtype: "f32", shape: [m, k] }), weight) });
        };
        const all = new Float32Array((await run(eng, mk(x, M))).y.buffer);
        for (const row of [0, 1, 63, 64, 150, 299]) {
          const alone = new Float32Array((await run(eng, mk(x.slice(row * k, row * k + k), 1))).y.buffer);
          assert.deepEqual(new Uint32Array(alone.buffer), new Uint32Array(all.slice(row * n, row * n + n).buffer), `${w} row ${row}`);
        }
      }
    } finally {
      await eng.unload();
    }
  });
}
