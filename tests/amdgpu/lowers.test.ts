// Every op the graph accepts compiles to an AMDGPU code object on every target: the lowering sweep's probes
// (tests/ops/probes.ts) lowered with each target's caps, rendered to LLVM IR and compiled by comgr, with the
// code-object metadata checked like the plan kernels'. Distinct kernels only (the cache is per LLVM text);
// many probes share kernels. Skips when libamd_comgr is absent. Never run on hardware.
import { test } from "node:test";
import assert from "node:assert/strict";
import { compileGraph } from "../../kernels/lower.ts";
import { AmdCompiler, comgr } from "../../kernels/render/amdgpu/compile.ts";
import { AMD_TARGET_NAMES, AMD_TARGETS } from "../../kernels/render/amdgpu/targets.ts";
import { amdTargetSet } from "./plans.ts";
import { build, probes } from "../ops/probes.ts";
import type { Kernel } from "../../kernels/ir.ts";
import { type AmdgpuModule, renderAmdgpu } from "../../kernels/render/amdgpu/kernel.ts";

const cg = comgr();
// The compiles do not depend on the runtime (one comgr, the same text); Bun's FFI path is covered by
// compile.test.ts, so the sweep's ~20 s of CPU runs once, under Deno.
const skip = typeof cg === "string" ? cg : "Bun" in globalThis ? "the sweep runs under Deno (same comgr, same text)" : false;

test("every op probe the graph accepts compiles for gfx90a, gfx942 and gfx1100", { skip, timeout: 900_000 }, () => {
  const C = new AmdCompiler(cg as Exclude<typeof cg, string>);
  const graphs = probes().map((p) => ({ p, g: build(p) })).filter((x) => x.g !== undefined);
  const bad: string[] = [];
  const t0 = performance.now();
  let kernels = 0;
  for (const name of AMD_TARGET_NAMES) {
    const t = AMD_TARGETS[name];
    const seen = new Set<string>();
    const items: { probe: string; bindings: number; module: AmdgpuModule; kernel: Kernel }[] = [];
    for (const { p, g } of graphs) {
      try {
        const prog = compileGraph(g!, amdTargetSet(t));
        for (const s of prog.steps) {
          if (s.k !== "kernel" || seen.has(s.kernel.name)) continue;
          seen.add(s.kernel.name);
          items.push({ probe: p.name, bindings: s.bindings.length, module: renderAmdgpu(s.kernel, { wave: t.wave }), kernel: s.kernel });
        }
      } catch (e) {
        bad.push(`${p.name} on ${name}: ${(e as Error).message.split("\n").slice(0, 3).join(" | ")}`);
      }
    }
    kernels += items.length;
    try {
      C.compileMany(items, t).forEach((co, i) => {
        const { probe, bindings, module } = items[i];
        const explicit = co.meta.args.filter((a) => !a.kind.startsWith("hidden_")).length;
        if (explicit !== bindings + (module.faultParam ? 1 : 0)) bad.push(`${probe} on ${name}: ${explicit} args`);
        if (co.meta.wavefrontSize !== t.wave || co.meta.groupSegmentSize !== module.sharedBytes) {
          bad.push(`${probe} on ${name}: wave ${co.meta.wavefrontSize}, group ${co.meta.groupSegmentSize}`);
        }
      });
    } catch (e) {
      bad.push(`on ${name}: ${(e as Error).message.split("\n").slice(0, 3).join(" | ")}`);
    }
  }
  console.log(`amdgpu sweep: ${graphs.length} accepted probes, ${kernels} distinct (target, kernel) pairs, ` +
    `${C.stats.compiles} comgr compiles in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  assert.ok(graphs.length > 400, `only ${graphs.length} probes accepted`);
  assert.deepEqual(bad, []);
});
