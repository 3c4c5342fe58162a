// The one op harness: every op case (tests/ops/cases.ts) on every device present, through the real path
// (optimize, plan, lower, record, replay on an Engine), against the oracle (graph/eval) with the tier-2 bound
// of graph/tolerance ("worst" mode for one op or a short chain, "expected" for the fused layer-deep blocks, which
// are also held, device and oracle both, to the same bound around a float64 evaluation, block_f64.ts); State
// after each step too. Every bound must be finite and at most MAX_BOUND_FRACTION of the value's scale: the first
// test (no device) prints how many float elements have an infinite bound (must be 0) and the largest
// bound-to-value ratio. Replay (capture) and eager runs must agree bit for bit; what that proves differs per
// device: on js and wgpu, replay and eager run the same code (it proves the recording keeps every step and its
// slot values), on vulkan eager is the same recording split into one submit per step (it proves the barriers
// between submits and inside a recording agree), on ptx eager launches kernels one by one while replay is a
// CUDA graph (the only device where capture is a separate code path). A missing device reports a skip.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Engine } from "../../backends/executor.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { evaluate } from "../../graph/eval.ts";
import { assertClose, assertMeaningful, boundStats, floats, MAX_BOUND_FRACTION } from "../../graph/tolerance.ts";
import type { DType } from "../../graph/dtype.ts";
import { type Storage, storageFromBytes } from "../../graph/dtype.ts";
import { openDevice, selectedBackends, slowDevice } from "../devices/index.ts";
import { Unsupported } from "../../backends/errors.ts";
import { opCases } from "./cases.ts";
import { loadCaseWeights } from "./load.ts";

// POOT_OP_CASES=a,b: only the cases whose name contains one of them (a device run of one kernel's cases).
const only = (globalThis as { process?: { env: Record<string, string | undefined> } }).process?.env.POOT_OP_CASES?.split(",").filter(Boolean);
const cases = opCases().filter((c) => !only || only.some((o) => c.name.includes(o)));
// POOT_TIMES=1: each case's milliseconds per device (what CI's lavapipe compiles cost, case by case).
const times = (globalThis as { process?: { env: Record<string, string | undefined> } }).process?.env.POOT_TIMES;

/**
 * Holds a result to the float64 evaluation of a fused block: |value − exact| within the element's bound.
 * Returns the largest |value − exact| / bound.
 */
function checkExact(what: string, d: DType, got: Storage, exact: Float64Array, bound: Float32Array): number {
  const v = floats(d, got);
  let worst = 0;
  for (let i = 0; i < exact.length; i++) {
    const diff = Math.abs(v[i] - exact[i]);
    if (!(diff <= bound[i])) throw new Error(`${what}: element ${i}: ${v[i]}, float64 ${exact[i]}, |diff| ${diff} > bound ${bound[i]}`);
    if (diff > 0) worst = Math.max(worst, diff / bound[i]);
  }
  return worst;
}

test(`op harness bounds: finite and at most ${MAX_BOUND_FRACTION} of the value's scale (oracle only)`, () => {
  let elements = 0, infinite = 0, maxRatio = 0, worst = "", exactRatio = 0, exactChecked = 0;
  const bad: string[] = [];
  for (const c of cases) {
    const exact = c.exact?.();
    const consts: Record<string, Storage> = {};
    for (const w of c.weights) consts[w.role] = storageFromBytes(w.dtype, w.bytes);
    let state: Record<string, Storage> = {};
    let stateBounds: Record<string, Float32Array> | undefined;
    for (let s = 0; s < (c.steps ?? 1); s++) {
      const slots = { ...c.slots, ...(c.slotsAt?.(s) ?? {}) };
      const want = evaluate(c.graph, { consts, slots, state, stateBounds }, { bounds: c.bounds ?? "worst" });
      const all = [
        ...Object.entries(want.output).map(([k, x]) => [k, c.graph.nodes[c.graph.outputs[k]].dtype, x, want.bounds!.output[k]] as const),
        ...Object.entries(want.state).map(([k, x]) => [`state ${k}`, c.graph.states[k].dtype, x, want.bounds!.state[k]] as const),
      ];
      for (const [k, d, x, b] of all) {
        const st = boundStats(d, x, b);
        elements += st.elements;
        infinite += st.infinite;
        if (st.infinite || st.maxRatio > MAX_BOUND_FRACTION) bad.push(`${c.name} ${k} step ${s}: ${st.infinite} infinite, ratio ${st.maxRatio}`);
        if (st.maxRatio > maxRatio) maxRatio = st.maxRatio, worst = `${c.name} ${k} step ${s}`;
        const ex = exact && (k.startsWith("state ") ? exact[s].state[k.slice(6)] : exact[s].output[k]);
        if (exact) {
          assert.ok(ex, `${c.name}: no float64 value of ${k}`);
          try {
            exactRatio = Math.max(exactRatio, checkExact(`${c.name} ${k} step ${s}: oracle vs float64`, d, x, ex, b));
            exactChecked += ex.length;
          } catch (e) {
            bad.push((e as Error).message);
          }
        }
      }
      state = want.state;
      stateBounds = want.bounds!.state;
    }
  }
  console.log(`op harness: ${elements} float elements, ${infinite} with an infinite bound, largest bound/value ${maxRatio.toPrecision(3)} (${worst})`);
  console.log(`op harness: fused blocks, oracle vs float64: ${exactChecked} elements, largest |diff|/bound ${exactRatio.toPrecision(3)}`);
  assert.deepEqual(bad, []);
  assert.equal(infinite, 0);
  if (!only) {
    assert.ok(elements > 10_000);
    assert.ok(exactChecked > 1000, "the fused blocks were held to their float64 evaluation");
  }
});

for (const backend of selectedBackends()) {
  const dev = await openDevice(backend);
  const skip = typeof dev === "string" ? dev : false;
  test(`ops on ${backend}: ${cases.length} cases vs the oracle, capture == eager`, { skip, timeout: 600_000 }, async () => {
    if (typeof dev === "string") return;
    // quantizedX off: an unmarked matmul is the f32 oracle's on every device; the marked cases (attrs.xq) take
    // the integer path everywhere.
    // A case's own options (OpCase.compile) by its graph: a fused kernel every device runs.
    const caseOpts = new Map(cases.map((c) => [c.graph, c.compile]));
    const eng = new Engine(dev, { compile: (g, t) => compileGraph(g, t, { quantizedX: false, ...caseOpts.get(g) }), timeoutMs: 60_000, ownsDevice: false });
    const failures: string[] = [];
    let checked = 0;
    try {
      for (const c of cases) {
        const t0 = performance.now();
        try {
          checked += await runCase(eng, c);
          if (times) console.log(`${backend} ${(performance.now() - t0).toFixed(0)} ms ${c.name}`);
        } catch (e) {
          const msg = (e as Error).message.split("\n")[0];
          // A software fallback adapter (Deno WebGPU without Vulkan) binds 16 storage buffers per stage; a
          // fused kernel with more is refused as Unsupported there: that case is skipped on it, and said.
          if (e instanceof Unsupported && /storage bindings, the adapter allows/.test(msg) && slowDevice(dev)) {
            console.log(`ops on ${backend}: skipped ${c.name}: ${msg}`);
            continue;
          }
          failures.push(`${c.name}: ${msg}`);
          if (dev.poisoned) break;
        }
      }
    } finally {
      await eng.unload();
    }
    assert.deepEqual(failures, [], `${failures.length} of ${cases.length} cases failed on ${backend}`);
    assert.ok(checked > 0);
  });
}

async function runCase(eng: Engine<import("../../backends/device.ts").Device>, c: ReturnType<typeof opCases>[number]): Promise<number> {
  const consts = await loadCaseWeights(eng, c);

  const id = eng.addEntry(`op:${c.name}`, c.graph);
  const steps = c.steps ?? 1;
  let state: Record<string, Storage> = {};
  let stateBounds: Record<string, Float32Array> | undefined;
  const replayed: Record<string, Uint8Array>[] = [];
  const exact = c.exact?.();
  let checked = 0;
  for (let s = 0; s < steps; s++) {
    const slots = { ...c.slots, ...(c.slotsAt?.(s) ?? {}) };
    const want = evaluate(c.graph, { consts, slots, state, stateBounds }, { bounds: c.bounds ?? "worst" });
    const got = await eng.step(id, slots as Record<string, Storage>);
    for (const [name, x] of Object.entries(want.output)) {
      const d = c.graph.nodes[c.graph.outputs[name]].dtype;
      const a = got.outputs[name];
      assertMeaningful(`${name} step ${s}`, d, x, want.bounds!.output[name]);
      assertClose(`${name} step ${s}`, d, a as Storage, x, want.bounds!.output[name]);
      if (exact) checkExact(`${name} step ${s} vs float64`, d, a as Storage, exact[s].output[name], want.bounds!.output[name]);
      checked += x.length;
    }
    for (const [name, x] of Object.entries(want.state)) {
      const d = c.graph.states[name].dtype;
      const a = storageFromBytes(d, await eng.readState(name));
      assertMeaningful(`state ${name} step ${s}`, d, x, want.bounds!.state[name]);
      assertClose(`state ${name} step ${s}`, d, a, x, want.bounds!.state[name]);
      if (exact) checkExact(`state ${name} step ${s} vs float64`, d, a, exact[s].state[name], want.bounds!.state[name]);
      checked += x.length;
    }
    replayed.push(Object.fromEntries(Object.entries(got.outputs).map(([k, v]) => [k, new Uint8Array(v.buffer.slice(0))])));
    state = want.state;
    stateBounds = want.bounds!.state;
  }
  // Capture vs eager: the same steps run eagerly from a reset state give the same bits.
  eng.resetState(id);
  for (let s = 0; s < steps; s++) {
    const slots = { ...c.slots, ...(c.slotsAt?.(s) ?? {}) };
    const got = await eng.step(id, slots as Record<string, Storage>, { eager: true });
    for (const [k, v] of Object.entries(got.outputs)) {
      assert.deepEqual(new Uint8Array(v.buffer.slice(0)), replayed[s][k], `${c.name}: eager ${k} differs from replay at step ${s}`);
    }
  }
  eng.removeEntry(id);
  eng.resetState();
  return checked;
}
