// The kernel library's conformance set: every library kernel over several shapes (odd sizes included), each
// with deterministic inputs and a straightforward float64 TypeScript reference. Renderers for other targets
// run the same cases on their devices (see harness.ts: runCase + checkCase) and compare with the reference;
// the JS device runs them in tests/kernels/lib_*.test.ts.
//
// Tolerance (float outputs): |got - want| <= abs + rel * mag[i], where mag[i] is the magnitude the result is
// built from (sum of |terms| for dot products, |want| otherwise) and rel covers f32 rounding of the kernel's
// reassociation (k * 2^-23 for a k-term sum, a few ulps for transcendental ops). NaN or Inf where the
// reference is finite fails at any tolerance. Integer and movement outputs are exact.
//
// The cases live by kind under cases/ (common.ts: what a case is); this file lists them.
import * as lib from "../../kernels/lib/mod.ts";
import { matmulCase, gemvCase } from "./cases/linear.ts";
import { attentionCase, attentionPartialCase, attentionCombineCase } from "./cases/attention.ts";
import { rmsnormCase, layernormCase, softmaxCase, argmaxCase, ropeCase } from "./cases/rows.ts";
import { erf, ewCase, sig, genericCases, updateSliceCase, scatterCase, gatherCase } from "./cases/elementwise.ts";
import type { KernelCase } from "./cases/common.ts";

export type { Expect, KernelCase } from "./cases/common.ts";
export { type AttnCfg, attentionCase } from "./cases/attention.ts";

export const cases: KernelCase[] = [
  ...(["f32", "f16", "bf16"] as const).flatMap((w) => [
    matmulCase(w, 1, 8, 1),
    matmulCase(w, 7, 13, 2),
    matmulCase(w, 33, 64, 3, true),
    matmulCase(w, 20, 100, 1, false, true),
    matmulCase(w, 9, 48, 11, true, true),
  ]),
  // long k with few rows: several subgroups per row on GPU-like targets (matmulWide)
  matmulCase("f32", 6, 1024, 2, true),
  matmulCase("f16", 5, 512, 1, false, true),
  matmulCase("q8_0", 3, 1024, 1),
  matmulCase("q4_0", 2, 2048, 3),
  ...(["q8_0", "q4_0"] as const).flatMap((w) => [
    matmulCase(w, 1, 32, 1),
    matmulCase(w, 33, 64, 3, true),
    matmulCase(w, 17, 160, 1, false, true),
    matmulCase(w, 12, 96, 10, true, true),
  ]),
  // the shared-memory tiled matmul (kernels/lib/tiled_matmul.ts): partial tiles in m, n and k, every weight kind
  matmulCase("f32", 67, 131, 70, true, true, true),
  matmulCase("f16", 33, 96, 64, false, false, true),
  matmulCase("bf16", 20, 64, 130, true, false, true),
  matmulCase("q8_0", 17, 96, 65, false, true, true),
  matmulCase("q4_0", 9, 64, 3, true, false, true),
  attentionCase({ rows: 1, heads: 4, kvHeads: 2, hd: 16, cap: 8, pos: 3 }),
  attentionCase({ rows: 1, heads: 2, kvHeads: 2, hd: 64, cap: 24, pos: 23 }),
  attentionCase({ rows: 1, heads: 3, kvHeads: 1, hd: 12, cap: 10, pos: 0, kv: "f16" }),
  attentionCase({ rows: 1, heads: 6, kvHeads: 3, hd: 40, cap: 17, pos: 9, kv: "bf16", pt: "i32" }),
  attentionCase({ rows: 5, heads: 4, kvHeads: 1, hd: 8, cap: 16, pos: 2 }),
  attentionCase({ rows: 3, heads: 2, kvHeads: 2, hd: 33, cap: 9, pos: 6, pt: "i32" }),
  attentionCase({ rows: 2, heads: 2, kvHeads: 1, hd: 8, cap: 8, pos: 7 }, true),
  // Sliding windows (Mistral, Gemma): a window shorter than the history, one longer, prefill rows across it.
  attentionCase({ rows: 1, heads: 4, kvHeads: 2, hd: 16, cap: 24, pos: 20, window: 5 }),
  attentionCase({ rows: 1, heads: 2, kvHeads: 1, hd: 8, cap: 16, pos: 3, window: 8 }),
  attentionCase({ rows: 6, heads: 4, kvHeads: 2, hd: 16, cap: 24, pos: 9, window: 4, kv: "f16", pt: "i32" }),
  // Soft-capped scores (Gemma 2), with and without a window.
  attentionCase({ rows: 1, heads: 4, kvHeads: 2, hd: 16, cap: 20, pos: 13, softcap: 2.5 }),
  attentionCase({ rows: 4, heads: 2, kvHeads: 1, hd: 8, cap: 16, pos: 6, softcap: 1, window: 5 }),
  attentionCase({ rows: 1, heads: 2, kvHeads: 1, hd: 8, cap: 8, pos: -1, pt: "i32" }, true),
  attentionPartialCase({ rows: 1, heads: 4, kvHeads: 2, hd: 16, cap: 40, pos: 25 }, 4),
  attentionPartialCase({ rows: 3, heads: 2, kvHeads: 1, hd: 12, cap: 24, pos: 4, kv: "f16" }, 5),
  attentionPartialCase({ rows: 2, heads: 4, kvHeads: 2, hd: 16, cap: 40, pos: 30, window: 7 }, 3),
  // each trip's successor's K/V loaded ahead (AttentionShape.prefetch): chunks of one trip, of several, a window
  attentionPartialCase({ rows: 1, heads: 4, kvHeads: 2, hd: 16, cap: 40, pos: 25 }, 4, true),
  attentionPartialCase({ rows: 3, heads: 2, kvHeads: 1, hd: 12, cap: 24, pos: 4, kv: "f16" }, 5, true),
  attentionPartialCase({ rows: 2, heads: 4, kvHeads: 2, hd: 16, cap: 90, pos: 70, window: 41, kv: "f16" }, 2, true),
  attentionCombineCase(5, 16, 4),
  attentionCombineCase(3, 9, 7),
  rmsnormCase(1, 64, "f32"),
  rmsnormCase(3, 33, "f32"),
  rmsnormCase(2, 260, "f16"),
  rmsnormCase(2, 7, "bf16"),
  rmsnormCase(2, 40, null),
  layernormCase(2, 50, true),
  layernormCase(3, 16, false),
  softmaxCase(1, 7),
  softmaxCase(3, 100),
  softmaxCase(2, 513),
  argmaxCase(1, 512, "plain"),
  argmaxCase(4, 37, "ties"),
  argmaxCase(4, 70, "nan", "i32"),
  argmaxCase(3, 1, "plain"),
  ropeCase({ rows: 1, heads: 4, hd: 16, style: "adjacent", pos: 7 }),
  ropeCase({ rows: 3, heads: 2, hd: 8, style: "half", pos: 40 }),
  ropeCase({ rows: 2, heads: 3, hd: 12, style: "half", pos: 5, rot: 8 }),
  ropeCase({ rows: 2, heads: 2, hd: 10, style: "adjacent", pos: 11, rot: 6, table: true }),
  ropeCase({ rows: 4, heads: 1, hd: 8, style: "half", pos: 2, rowPos: true, pt: "i32" }),
  ropeCase({ rows: 1, heads: 2, hd: 8, style: "adjacent", pos: -3, pt: "i32" }, true),
  // several heads a thread (prefill chunks: kernels/lib/rope.ts ropeHeadsPer), partial rotation and per-row positions
  ropeCase({ rows: 5, heads: 12, hd: 16, style: "half", pos: 30, headsPer: 4, table: true, rowPos: true }),
  ropeCase({ rows: 3, heads: 6, hd: 12, style: "adjacent", pos: 9, rot: 8, headsPer: 3 }),
  ropeCase({ rows: 2, heads: 8, hd: 64, style: "half", pos: 1500, headsPer: 8, pt: "i32" }),
  ewCase("silu", (caps) => lib.silu(caps, 64), 64, 1, (x) => x * sig(x)),
  ewCase("silu", (caps) => lib.silu(caps, 31), 31, 1, (x) => x * sig(x)),
  ewCase("gelu tanh", (caps) => lib.gelu(caps, 45), 45, 1,
    (x) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3)))),
  ewCase("gelu erf", (caps) => lib.gelu(caps, 44, true), 44, 1, (x) => 0.5 * x * (1 + erf(x / Math.SQRT2)), { abs: 4e-7 }),
  ewCase("silu_mul", (caps) => lib.siluMul(caps, 100), 100, 2, (g, u) => g * sig(g) * u),
  ewCase("add", (caps) => lib.add(caps, 19), 19, 2, (a, b) => a + b),
  ewCase("add", (caps) => lib.add(caps, 24, 6), 24, 2, (a, b) => a + b, { lenB: 6 }),
  ewCase("mul", (caps) => lib.mul(caps, 21, 7), 21, 2, (a, b) => a * b, { lenB: 7 }),
  ...genericCases(),
  gemvCase("bf16", 64, { hd: 16, heads: 2, rot: 16, style: "half", n: 7, ffn: 12, cap: 5, pos: 3 }),
  gemvCase("f16", 200, { hd: 12, heads: 2, rot: 8, style: "adjacent", n: 33, ffn: 5, cap: 4, pos: 0, tune: { rows: 1, unroll: 2 } }),
  gemvCase("f32", 300, { hd: 8, heads: 1, rot: 6, style: "half", n: 9, ffn: 3, cap: 3, pos: 2, tune: { lanes: 64 } }),
  gemvCase("bf16", 64, { hd: 16, heads: 2, rot: 16, style: "half", n: 7, ffn: 12, cap: 5, pos: 3, gelu: true }),
  gemvCase("bf16", 64, { hd: 16, heads: 2, rot: 16, style: "half", n: 7, ffn: 12, cap: 5, pos: 5 }),
  // Block weights: several row units per team (3: the last team repeats a unit and must not add the residual
  // twice), teams of several subgroups, and the defaults.
  gemvCase("q4_k", 512, { hd: 16, heads: 3, rot: 12, style: "half", n: 7, ffn: 5, cap: 3, pos: 1, tune: { rows: 3, lanes: 64 } }),
  gemvCase("q6_k", 256, { hd: 8, heads: 2, rot: 8, style: "adjacent", n: 9, ffn: 4, cap: 2, pos: 0, tune: { rows: 4, lanes: 32 } }),
  gemvCase("q6_k", 512, { hd: 8, heads: 1, rot: 8, style: "half", n: 5, ffn: 3, cap: 2, pos: 1 }),
  gemvCase("q8_0", 96, { hd: 8, heads: 1, rot: 8, style: "half", n: 5, ffn: 3, cap: 2, pos: 1 }),
  gemvCase("q8_0", 192, { hd: 8, heads: 2, rot: 8, style: "adjacent", n: 7, ffn: 4, cap: 2, pos: 1, tune: { rows: 3, lanes: 32 } }),
  gemvCase("q5_k", 256, { hd: 8, heads: 2, rot: 8, style: "half", n: 6, ffn: 3, cap: 2, pos: 1, tune: { rows: 2 } }),
  gemvCase("q4_0", 64, { hd: 8, heads: 1, rot: 8, style: "adjacent", n: 3, ffn: 3, cap: 2, pos: 0, tune: { rows: 5, lanes: 16 } }),
  gemvCase("f16", 200, { hd: 12, heads: 2, rot: 8, style: "adjacent", n: 33, ffn: 5, cap: 4, pos: 0, tune: { rows: 1, unroll: 2 }, gelu: true }),
  updateSliceCase(1, 32, 16, 5, "f32", "u32"),
  updateSliceCase(3, 12, 8, 5, "f16", "i32"),
  updateSliceCase(2, 7, 9, 0, "bf16", "u32"),
  updateSliceCase(2, 8, 8, 7, "f32", "u32", true),
  updateSliceCase(1, 8, 8, -1, "f32", "i32", true),
  scatterCase(3, 16, 8, "u32"),
  scatterCase(4, 5, 6, "i32"),
  scatterCase(2, 4, 4, "u32", true),
  scatterCase(2, 4, 4, "i32", true),
  ...(["f32", "f16", "bf16", "q8_0", "q4_0"] as const).map((t) => gatherCase(t, 3, t.startsWith("q") ? 64 : 20, 11, "u32")),
  gatherCase("f32", 2, 9, 5, "i32"),
  gatherCase("f16", 2, 8, 5, "u32", true),
  gatherCase("q8_0", 2, 32, 5, "i32", true),
];
