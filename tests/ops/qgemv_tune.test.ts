// The quantized-x gemv (kernels/lib/gemv.ts with xq) under forced tunings the op harness's small shapes never
// reach by default: several row units per team with a partial last team (rows 3), a lane's chunks over 2-4
// unrolled slots with one window of loads running across them (ahead 3, 7, 8: less than, not a multiple of, and
// equal to a slot's rows), and the loop path (a width that does not divide the chunks). The quantized-x op
// cases chosen below on every device present, against the oracle (graph/ops/qdot.ts) within the tier-2 bound.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Engine } from "../../backends/executor.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { evaluate } from "../../graph/eval.ts";
import { assertClose } from "../../graph/tolerance.ts";
import { type Storage, storageFromBytes } from "../../graph/dtype.ts";
import type { GemvTune } from "../../kernels/lib/mod.ts";
import { openDevice, selectedBackends, softwareShare } from "../devices/index.ts";
import { opCases } from "./cases.ts";
import { loadCaseWeights } from "./load.ts";

// The types of the integer path's two chunk geometries as the tunings were written for (q8_0, q4_k, q6_k: every
// case), and the new decoders' plain matmuls under the same tunings: q5_1 (a 32-element block: a min and qh) and
// q5_k (q4_k's geometry with qh) (the other types share their geometry and loads; the op harness runs every case
// of every type at the default tunings; NaN in x does not depend on the tuning). Kept small: lavapipe runs each
// case under 4 tunings.
const cases = opCases().filter((c) => c.name.includes("quantized x") && !c.name.includes("NaN") &&
  (["q8_0", "q4_k", "q6_k"].some((t) => c.name.includes(` ${t}`)) || /^matmul (q5_1|q5_k) 1x\d+x\d+ quantized x$/.test(c.name)));
// (lanes below a subgroup become one subgroup; 32 lanes take 2 chunks each of the 2048-wide cases everywhere)
const TUNES: Partial<GemvTune>[] = [{ lanes: 4, rows: 3, ahead: 7 }, { lanes: 8, rows: 8, ahead: 8 }, { lanes: 4, rows: 4, ahead: 3 }, { lanes: 32, rows: 3, ahead: 5 }];

for (const backend of selectedBackends()) {
  const dev = await openDevice(backend);
  const skip = typeof dev === "string" ? dev : false;
  // (on lavapipe the vulkan and wgpu backends take alternate tunings: tests/devices/index.ts softwareShare)
  const tunes = softwareShare(dev, TUNES);
  test(`quantized-x gemvs on ${backend} under ${tunes.length} forced tunings: ${cases.length} cases vs the oracle`, { skip, timeout: 600_000 }, async () => {
    if (typeof dev === "string") return;
    const failures: string[] = [];
    let checked = 0;
    for (const tune of tunes) {
      const eng = new Engine(dev, { compile: (g, t) => compileGraph(g, t, { quantizedX: false, gemvTune: tune }), timeoutMs: 60_000, ownsDevice: false });
      try {
        for (const c of cases) {
          try {
            const consts = await loadCaseWeights(eng, c);
            const id = eng.addEntry(`op:${c.name}`, c.graph);
            let state: Record<string, Storage> = {};
            let stateBounds: Record<string, Float32Array> | undefined;
            for (let s = 0; s < (c.steps ?? 1); s++) {
              const slots = { ...c.slots, ...(c.slotsAt?.(s) ?? {}) };
              const want = evaluate(c.graph, { consts, slots, state, stateBounds }, { bounds: c.bounds ?? "worst" });
              const got = await eng.step(id, slots as Record<string, Storage>);
              for (const [name, x] of Object.entries(want.output)) {
                assertClose(`${name} step ${s}`, c.graph.nodes[c.graph.outputs[name]].dtype, got.outputs[name] as Storage, x, want.bounds!.output[name]);
                checked += x.length;
              }
              for (const [name, x] of Object.entries(want.state)) {
                const d = c.graph.states[name].dtype;
                assertClose(`state ${name} step ${s}`, d, storageFromBytes(d, await eng.readState(name)), x, want.bounds!.state[name]);
              }
              state = want.state;
              stateBounds = want.bounds!.state;
            }
            eng.removeEntry(id);
            eng.resetState();
          } catch (e) {
            failures.push(`${JSON.stringify(tune)} ${c.name}: ${(e as Error).message.split("\n")[0]}`);
            if (dev.poisoned) break;
          }
        }
      } finally {
        await eng.unload();
      }
    }
    assert.deepEqual(failures, []);
    assert.ok(checked > 0);
  });
}
