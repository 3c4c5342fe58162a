// Every kernel that reads GGUF blocks renders for every target: the decode and prefill plans of Llama 3 8B (at 8
// of its layers: the same kernels, see LAYERS_8B) quantized as llama-quantize's q4_k_m, q5_k_m, q6_k, q8_0 and q4_0 mixes (quantPlan) and of stories260K with
// its fallback mix, plus the quantized op-harness cases (every block type in gather, matmul and the fused gemv; the
// quantized-x ones also with x prepared once per gemv, CompileOptions.xqPrep: kernels/lib/xq_prep.ts).
// PTX assembles with `ptxas -arch=sm_90`; SPIR-V passes spirv-val (Vulkan 1.1) for an NVIDIA-like and
// lavapipe's capabilities. Each check skips when its tool is missing.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Kernel } from "../../kernels/ir.ts";
import type { Caps, TargetSet } from "../../kernels/target.ts";
import { compileGraph, type CompileOptions } from "../../kernels/lower.ts";
import { renderPtx } from "../../kernels/render/ptx.ts";
import { renderSpirv } from "../../kernels/render/spirv.ts";
import { SM90_CAPS } from "../../backends/ptx/caps.ts";
import { type LlamaConfig, llamaWeights, tensorName, traceDecode, traceStep } from "../../llm/families/llama.ts";
import { QUANT_FTYPES, type QuantFtype, quantPlan } from "../../llm/formats/quantize.ts";
import { roleKey, type WeightRole } from "../../graph/weights.ts";
import type { DType } from "../../graph/dtype.ts";
import type { Graph } from "../../graph/ir.ts";
import { assembleMany, findPtxas } from "../ptx/ptxas.ts";
import { opCases } from "../ops/cases.ts";
import { QTYPES } from "../ops/quant_cases.ts";

const SHAPES: Record<string, LlamaConfig> = {
  "llama-3-8b": { dim: 4096, hidden: 14336, layers: 32, heads: 32, kvHeads: 8, headDim: 128, vocab: 128256, rmsEps: 1e-5, ropeTheta: 500000, ropeStyle: "half", tiedEmbeddings: false },
  "stories260K": { dim: 64, hidden: 172, layers: 5, heads: 8, kvHeads: 4, headDim: 8, vocab: 512, rmsEps: 1e-5, ropeTheta: 10000, ropeStyle: "adjacent", tiedEmbeddings: false },
};

/** Role -> dtype of the model quantized as `ftype` from f16 (llama-quantize's choices). */
function mixOf(cfg: LlamaConfig, ftype: QuantFtype): (r: WeightRole) => DType {
  const ws = llamaWeights(cfg).map((w) => ({ name: tensorName("gguf", w.role)!, dtype: "f16" as DType, shape: w.shape, byteLength: 0, key: roleKey(w.role) }));
  const plan = quantPlan(ws, ftype);
  const by = new Map(ws.map((w, i) => [w.key, plan[i].to]));
  return (r) => {
    const d = by.get(roleKey(r))!;
    return d === "f16" && (r.role.endsWith("norm") || r.role.endsWith(".bias")) ? "f32" : d;
  };
}

/**
 * Llama 3 8B is traced with 8 of its 32 layers: a layer's kernels depend on its weights' types, and 8 layers
 * hold every type llama-quantize's mixes give a layer (use_more_bits: layers 0, 3, 6, 7 of 8), so the plans have
 * the same kernels, byte for byte, at a quarter of the compile time (the first test checks the names).
 */
const LAYERS_8B = 8;

function decodeAndPrefill(name: string, cfg: LlamaConfig): { name: string; g: Graph }[] {
  return QUANT_FTYPES.flatMap((ft) => {
    const dtypeOf = mixOf(cfg, ft);
    return [
      { name: `${name} ${ft} decode`, g: traceDecode(cfg, { cap: 2048 }, { dtypeOf }) },
      { name: `${name} ${ft} prefill`, g: traceStep(cfg, { cap: 2048, rows: 7 }, { dtypeOf }) },
    ];
  });
}

let traced: { name: string; g: Graph }[] | undefined;
function graphs(): { name: string; g: Graph }[] {
  traced ??= [
    ...decodeAndPrefill("llama-3-8b", { ...SHAPES["llama-3-8b"], layers: LAYERS_8B }),
    ...decodeAndPrefill("stories260K", SHAPES["stories260K"]),
    ...opCases().filter((c) => QTYPES.some((t) => c.name.includes(t))).map((c) => ({ name: `op ${c.name}`, g: c.graph })),
  ];
  return traced;
}

function kernelsOf(gs: { g: Graph }[], target: TargetSet, opts: CompileOptions = {}, ks = new Map<string, Kernel>()): Map<string, Kernel> {
  for (const { g } of gs) {
    for (const s of compileGraph(g, target, opts).steps) if (s.k === "kernel" && !ks.has(s.kernel.name)) ks.set(s.kernel.name, s.kernel);
  }
  return ks;
}
const prepared = () => graphs().filter((x) => x.name.includes("quantized x"));
const kernelsFor = (target: TargetSet) => kernelsOf(prepared(), target, { xqPrep: true }, kernelsOf(graphs(), target));

const quantKernel = (name: string) => QTYPES.some((t) => name.includes(t));
const ptxas = findPtxas();

test("kernels reading blocks assemble with ptxas -arch=sm_90 (sm_90a for warpgroup MMA)", { skip: ptxas ? false : "ptxas not found", timeout: 300_000 }, () => {
  const target: TargetSet = { backend: "ptx", device: "sm_90 (no device)", caps: SM90_CAPS, memory: { totalBytes: 141e9 }, watchdogBudget: 0 };
  const all = kernelsFor(target), ks = [...all.values()];
  // The full 32 layers of q4_k_m (its types vary by layer as q5_k_m's do) give no kernel the 8 layers lack.
  const full = kernelsOf(decodeAndPrefill("llama-3-8b", SHAPES["llama-3-8b"]).filter((x) => x.name.includes("q4_k_m")), target);
  assert.deepEqual([...full.keys()].filter((n) => !all.has(n)), [], `kernels of the 32-layer plans missing at ${LAYERS_8B} layers`);
  const mods = ks.map((k) => renderPtx(k, { sm: 90 }));
  const q = ks.filter((k) => quantKernel(k.name)).length;
  assert.ok(q >= 40, `only ${q} block-reading kernels`);
  assert.ok(ks.filter((k) => k.name.startsWith("xq_prep_")).length >= 16, "prep kernels of every XQ type, with and without a norm");
  // warpgroup MMA (the prefill matmuls over blocks) assembles for sm_90a, the rest for sm_90
  const bad = (["sm_90", "sm_90a"] as const).flatMap((arch) => {
    const at = ks.flatMap((k, i) => (!!k.uses.wgmma === (arch === "sm_90a") ? [i] : []));
    return assembleMany(ptxas!, at.map((i) => mods[i]), arch).flatMap((r, j) => (r.ok ? [] : [`${ks[at[j]].name}: ${r.log.split("\n")[0]}`]));
  });
  assert.ok(ks.some((k) => k.uses.wgmma && quantKernel(k.name)), "no prefill matmul over blocks on warpgroup MMA");
  assert.deepEqual(bad, []);
  console.log(`ptx: ${mods.length} kernels (${q} read blocks) assembled`);
});

function hasTool(name: string): boolean {
  try {
    execFileSync(name, ["--version"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

const FULL: Caps = {
  subgroups: true, subgroupSize: 8, f16: true, storage16: true, storage8: true, trap: false, maxWorkgroupSize: 1024,
  maxWorkgroupsPerDim: [65535, 65535, 65535], maxSharedBytes: 32768, maxBindingBytes: 1 << 27, bindingAlign: 16, dispatchGap: true,
  dot4Native: true,
};
// NVIDIA reports the packed int8 dot as accelerated: the decode gemvs take int8 x and OpSDot
const NV: Caps = { ...FULL, subgroupSize: 32, maxBindingBytes: 2 ** 32 - 1, maxSharedBytes: 49152, dot4: true };

test("kernels reading blocks pass spirv-val (NVIDIA-like and lavapipe capabilities)", { skip: hasTool("spirv-val") ? false : "spirv-val is not installed", timeout: 300_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), "poot-qspv-"));
  const bad: string[] = [], validated = new Set<string>();
  let n = 0, dots = 0;
  try {
    for (const [label, caps] of [["nvidia-like", NV], ["lavapipe", FULL]] as const) {
      const target: TargetSet = { backend: "vulkan", device: label, caps, memory: { totalBytes: 141e9 }, watchdogBudget: 0 };
      for (const k of kernelsFor(target).values()) {
        if (!quantKernel(k.name)) continue;
        const { words, needs } = renderSpirv(k, caps);
        if (needs.dotProduct) dots++;
        n++;
        // a module both capability sets render alike is validated once (spirv-val is a process per module)
        const bytes = new Uint8Array(words.buffer, words.byteOffset, words.byteLength), key = createHash("sha256").update(bytes).digest("hex");
        if (validated.has(key)) continue;
        validated.add(key);
        const f = join(dir, `k${n}.spv`);
        writeFileSync(f, bytes);
        try {
          execFileSync("spirv-val", ["--target-env", "vulkan1.1", f], { stdio: "pipe" });
        } catch (e) {
          bad.push(`${label} ${k.name}: ${String((e as { stderr?: Uint8Array }).stderr ?? e).split("\n")[0]}`);
        }
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  assert.ok(n >= 40, `only ${n} block-reading kernels`);
  assert.ok(dots >= 3, `only ${dots} kernels with OpSDot (the nvidia-like plans' integer gemvs)`);
  assert.deepEqual(bad, []);
  console.log(`spirv: ${n} block-reading kernels validated (${validated.size} distinct modules), ${dots} of them with OpSDot`);
});
