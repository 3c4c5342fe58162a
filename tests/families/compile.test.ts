// Every family's decode and prefill steps lower and render for every target without a GPU: js, spirv (and
// spirv-val accepts each module when installed), wgsl, ptx (and ptxas -arch=sm_90 assembles each module when
// installed), amdgpu (and comgr compiles every kernel for gfx942 when installed). The configs are the transformers
// fixtures' (every family's quirks on) with bf16 matrices, plus a GGUF-style Llama 3.1 whose rope frequency
// factors are a weight (rope_freqs). Also states which fused decode units fire: gemv with the norm, gemv with
// rope, gemv with the K/V write, gemv with silu·mul, for each family.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { compileGraph } from "../../kernels/lower.ts";
import type { Program } from "../../kernels/program.ts";
import { renderKernel, targetFor, TARGETS } from "../../cli/render.ts";
import type { Kernel } from "../../kernels/ir.ts";
import { AmdCompiler, comgr } from "../../kernels/render/amdgpu/compile.ts";
import { renderAmdgpu } from "../../kernels/render/amdgpu/kernel.ts";
import { AMD_TARGETS } from "../../kernels/render/amdgpu/targets.ts";
import { loadModel } from "../../llm/model.ts";
import type { Family, ModelConfig } from "../../llm/families/family.ts";
import { familyOf } from "../../llm/registry.ts";
import { renderPtx } from "../../kernels/render/ptx/kernel.ts";
import { assembleMany, findPtxas } from "../ptx/ptxas.ts";
import { FAMILY_DIRS, FIXTURES } from "./fixtures.ts";

function hasTool(t: string): boolean {
  try {
    execFileSync(t, ["--version"], { stdio: "pipe" });
    return true;
  } catch {
    return false;
  }
}
const cg = comgr();
/** The AMDGPU compiler when libamd_comgr is installed (else its absence: amdgpu kernels are then only rendered). */
const amd = typeof cg === "string" ? cg : new AmdCompiler(cg);
const spirvVal = hasTool("spirv-val");
const ptxas = findPtxas();

const CASES: { name: string; family: Family; config: ModelConfig }[] = FAMILY_DIRS.map((f) => {
  const m = loadModel(`${FIXTURES}${f}`);
  m.close();
  return { name: f, family: m.family, config: m.config };
});
{
  const llama = CASES.find((c) => c.name === "llama")!;
  CASES.push({ name: "llama-gguf-rope_freqs", family: familyOf("llama"), config: { ...llama.config, ropeStyle: "adjacent", ropeFactors: undefined, ropeFreqFactors: true } });
}

const dtypeOf = (r: { role: string }) => (/norm|bias|rope_freqs/.test(r.role) ? "f32" : "bf16") as "f32" | "bf16";

function programs(c: (typeof CASES)[number], t: (typeof TARGETS)[number]): [string, Program][] {
  return [1, 7].map((rows) => {
    const { tracer, logits } = c.family.trace(c.config, { rows, cap: 64 }, { dtypeOf });
    tracer.output("token", tracer.argmax(rows === 1 ? logits : tracer.slice(logits, 0, rows - 1, rows), 1));
    return [rows === 1 ? "decode" : "prefill", compileGraph(tracer.build(), targetFor(t))];
  });
}

/** The fused decode units of a program, from the gemv kernels' names (kernels/lib/gemv.ts spells its parts). */
export function fusions(p: Program): { norm: number; rope: number; kv: number; siluMul: number } {
  const f = { norm: 0, rope: 0, kv: 0, siluMul: 0 };
  for (const s of p.steps) {
    if (s.k !== "kernel" || !s.kernel.name.startsWith("gemv_")) continue;
    const n = s.kernel.name;
    if (n.includes("_norm_")) f.norm++;
    f.rope += (n.match(/_rope\d+/g) ?? []).length;
    f.kv += (n.match(/_(?:n|rope)\d+b?r?(?:f16|bf16)?c(?=_)/g) ?? []).length;
    f.siluMul += (n.match(/_[sg]m\d+/g) ?? []).length;
  }
  return f;
}

for (const c of CASES) {
  for (const t of TARGETS) {
    test(`${c.name}: decode and prefill lower and render for ${t}`, { timeout: 300_000 }, () => {
      const dir = mkdtempSync(join(tmpdir(), "poot-fam-"));
      try {
        const seen = new Map<string, { ptx: string; entry: string }>();
        const amdgpu: Kernel[] = [];
        let files = 0;
        for (const [kind, prog] of programs(c, t)) {
          const steps = prog.steps.filter((s) => s.k === "kernel");
          assert.ok(steps.length > 0, `${kind}: no kernels`);
          for (const s of steps) {
            if (s.k !== "kernel" || seen.has(s.kernel.name)) continue;
            const r = renderKernel(s.kernel, t);
            seen.set(s.kernel.name, t === "ptx" ? renderPtx(s.kernel, { sm: 90 }) : { ptx: "", entry: "" });
            if (t === "amdgpu") amdgpu.push(s.kernel);
            if (t === "spirv" && spirvVal) {
              const f = join(dir, `k${files++}.spv`);
              writeFileSync(f, r.data as Uint8Array);
              try {
                execFileSync("spirv-val", ["--target-env", "vulkan1.1", f], { stdio: "pipe" });
              } catch (e) {
                assert.fail(`${kind} ${s.kernel.name}: spirv-val: ${String((e as { stderr?: Uint8Array }).stderr ?? e).split("\n")[0]}`);
              }
            }
          }
          if (kind === "decode" && t === "ptx") console.log(`${c.name} decode fusions on ptx: ${JSON.stringify(fusions(prog))}`);
        }
        if (t === "amdgpu" && typeof amd !== "string") {
          // comgr compiles every kernel for gfx942 (the typical caps' wave64); throws naming a failing kernel
          const t942 = AMD_TARGETS.gfx942;
          amd.compileMany(amdgpu.map((kernel) => ({ kernel, module: renderAmdgpu(kernel, { wave: t942.wave }) })), t942);
        }
        if (t === "ptx" && ptxas) {
          const bad = assembleMany(ptxas, [...seen.values()], "sm_90").flatMap((r, i) => (r.ok ? [] : [`${[...seen.keys()][i]}: ${r.log.split("\n")[0]}`]));
          assert.deepEqual(bad, []);
        }
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }
}

test("llama, qwen2, mistral and phi3 keep every fused decode unit (norm, rope, K/V write, silu·mul in a gemv)", () => {
  for (const name of ["llama", "qwen2", "mistral", "phi3", "llama-gguf-rope_freqs"]) {
    const c = CASES.find((x) => x.name === name)!;
    const [, prog] = programs(c, "ptx")[0];
    const f = fusions(prog), L = c.config.layers;
    assert.equal(f.norm, 2 * L + 1, `${name}: every attn/ffn norm and the output norm fold into a gemv (${JSON.stringify(f)})`);
    assert.equal(f.rope, 2 * L, `${name}: q and k rope in the gemv (${JSON.stringify(f)})`);
    assert.equal(f.kv, 2 * L, `${name}: k and v cache writes in the gemv (${JSON.stringify(f)})`);
    assert.equal(f.siluMul, L, `${name}: gate·up with silu in one gemv (${JSON.stringify(f)})`);
  }
});
