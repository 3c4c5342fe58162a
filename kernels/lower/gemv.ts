// Lowering of a gemv unit: batch-1 matmuls that share one x, with what the plan fused around them (an RMS norm
// before, rope, a cache write, silu-mul, bias or residual after) as one kernel, on the integer path for
// quantized weights where the target or the graph asks for it; there, with CompileOptions.xqPrep, x is quantized
// once by a kernel of its own (kernels/lib/xq_prep.ts) into a scratch every such unit reuses (steps run in
// order), and the gemv reads int8 x from it.
import { hasXq } from "../../graph/ops/qdot.ts";
import { byteSize } from "../../graph/dtype.ts";
import { numel } from "../../graph/ir.ts";
import { type Unit, viewSource } from "../../graph/plan.ts";
import type { Binding } from "../program.ts";
import * as lib from "../lib/mod.ts";
import type { LowerContext } from "../lower.ts";
import { floatOf } from "./common.ts";
import { ropeAndCache } from "./rope.ts";

/**
 * The weight types whose integer path is the default on a target with an int8 dot (caps.dot4): those an H200
 * measured faster than the f32 path (8B decode, `bench/decode.ts --shape llama-3-8b --dtype q4_k_m,q8_0,q5_k_m,q4_0
 * --backend ptx --quantized-x on|off`, session 8: q4_k_m 268 -> 376 tok/s, q8_0 254 -> 322, q5_k_m 193 -> 308,
 * q4_0 290 -> 399). q4_1, q5_0 and q5_1 have the path too (XQ_RUNS) but take it only when asked (quantizedX,
 * --quantized-x on): no file type the bench builds is made of them, so no device run has measured them.
 */
export const XQ_DEFAULT: readonly string[] = ["q8_0", "q4_0", "q4_k", "q5_k", "q6_k"];

/**
 * The weight types whose integer path prepares x once per unit (CompileOptions.xqPrep) by default, on every target:
 * every type whose integer path is the default. Session 9 measured only the k-quants faster with it, under the
 * tuning made for x quantized in each team; with the gemvs tuned for prepared x (kernels/lib/gemv_tune.ts prepTune) the
 * H200 measured every measured type faster (session 11, `bench/decode.ts --shape llama-3-8b --quantized-x on
 * --xq-prep on,off`, tok/s): q4_k_m 470.0 / 373.0, q5_k_m 438.4 / 315.6, q4_0 484.5 / 404.8, q8_0 382.5 / 322.2.
 * Until session 23 targets with a dependent-dispatch cost (caps.dispatchGap) kept x quantized in each team to save
 * the prep's dispatch; the H200 measured that the wrong way round (`--backend vulkan|wgpu --xq-prep on,off`, tok/s):
 * Vulkan 8B q4_k_m 393.4 / 223.7, q8_0 320.9 / 243.4, 1B 1153 / 944 and 1121 / 812; wgpu 1B 799 / 696 and 801 / 688.
 */
export const XQ_PREP_DEFAULT: readonly string[] = XQ_DEFAULT;

/**
 * The split-K attention combine a prep of x may take in (CompileOptions.combinePrep, default on): the step just
 * before, writing x's source for one row, which this unit alone reads, where lib.xqPrep can combine it; or, where
 * that step is the fused attention (its combine a tail: CompileOptions.attentionPrep), where it can write x prepared.
 */
function combineInto(cx: LowerContext, x: number, s: { k: number; w: lib.QType; norm?: lib.GemvShape["norm"] }): LowerContext["combine"] {
  const c = cx.combine, src = viewSource(cx.nodes, x);
  if (!c || c.node !== src || c.step !== cx.steps.length - 1 || c.s.rows !== 1 || !cx.sole.has(src)) return undefined;
  if (c.fused) return cx.opts.attentionPrep !== false && !s.norm && !lib.attentionPreps(cx.caps, { ...c.fused.shape, prep: { w: s.w, k: s.k } }) ? c : undefined;
  return cx.opts.combinePrep !== false && c.s.heads * c.s.hd === s.k && lib.xqPrepCombines(cx.caps, { ...s, combine: c.s }) ? c : undefined;
}

/** A gemv unit (batch-1 matmuls of one x, with their fused norm, rope, cache write, bias or residual) as one kernel. */
export function lowerGemv(cx: LowerContext, u: Extract<Unit, { k: "gemv" }>): void {
  const { p, nodes, caps, opts, bind, kernel, bytesOfIds } = cx;
  const first = nodes[u.parts[0].matmuls[0]], wn = nodes[first.inputs[1]];
  const K = wn.shape[1];
  const bindings: Binding[] = [bind(u.x)];
  const reads: number[] = [u.x];
  let norm: lib.GemvShape["norm"];
  if (u.norm !== undefined) {
    const nn = nodes[u.norm];
    norm = { eps: nn.attrs.eps!, weight: floatOf(nodes[nn.inputs[1]]) };
    bindings.push(bind(nn.inputs[1]));
    reads.push(nn.inputs[1]);
  }
  const parts: lib.GemvPart[] = u.parts.map((pp) => {
    const N = numel(nodes[pp.matmuls[0]].shape);
    const part: lib.GemvPart = { n: N, kind: pp.act !== undefined ? "silu_mul" : pp.rope !== undefined ? "rope" : "dot" };
    if (pp.gelu) part.gelu = true;
    for (const m of pp.matmuls) bindings.push(bind(nodes[m].inputs[1]));
    reads.push(...pp.matmuls.map((m) => nodes[m].inputs[1]));
    if (pp.bias) {
      part.bias = true;
      for (const bi of pp.bias) bindings.push(bind(bi));
      reads.push(...pp.bias);
    }
    if (pp.residual !== undefined) {
      part.residual = true;
      bindings.push(bind(pp.residual));
      reads.push(pp.residual);
    }
    Object.assign(part, ropeAndCache(cx, pp, bindings, reads));
    const outDt = nodes[pp.out].dtype;
    if (outDt !== "f32") part.out = floatOf(nodes[pp.out]);
    bindings.push(bind(pp.out));
    return part;
  });
  // Marked matmuls (plan.ts keeps them apart from unmarked ones) or the option: the integer path; by default
  // where the target has an int8 dot, for the types measured faster there.
  const xq = hasXq(wn.dtype) && (nodes[u.parts[0].matmuls[0]].attrs.xq || (opts.quantizedX ?? (!!caps.dot4 && XQ_DEFAULT.includes(wn.dtype))));
  const asked = opts.xqPrep ?? XQ_PREP_DEFAULT.includes(wn.dtype);
  const prep = xq && (asked === true || (asked === "no-norm" && !norm));
  const shape: lib.GemvShape = { k: K, w: wn.dtype as lib.WType, norm, parts, xq: prep ? "prep" : xq, tune: opts.gemvTune, hints: opts.gemvHints };
  const k = lib.gemv(caps, shape);
  if (prep) {
    // x (and g) in, the quantized runs (and r) out; the gemv binds those in their place
    const w = wn.dtype as lib.QType, ins = norm ? 2 : 1, bytes = lib.xqLayout(w, K, !!norm).total * 4;
    // scratch per weight type: a layer's q/k prep (q4_k) and v prep (q6_k) of one x write different bytes, so
    // where steps run together unless they touch the same bytes (Vulkan, ROCm) the v prep overlaps the q/k gemv
    const q: Binding = { buffer: cx.buf("arena", `xq-x:${w}`, bytes), offset: 0, bytes };
    const c = combineInto(cx, u.x, { k: K, w, norm });
    if (c?.fused) {
      // the fused attention, the step just before, writes x prepared: its f32 output never stored
      cx.steps.pop();
      const { shape: fs, inputs, work } = c.fused;
      kernel(lib.attentionFused(caps, { ...fs, prep: { w, k: K } }), [...inputs, q], { bytes: work.bytes - bytesOfIds([c.node]) + bytes, flops: work.flops + 4 * K });
    } else if (c) {
      // the attention's combine, the step just before, becomes this prep: x combined from its partials, never stored
      cx.steps.pop();
      kernel(lib.xqPrep(caps, { k: K, w, combine: c.s }), [c.part, q], { bytes: c.part.bytes + bytes, flops: c.part.bytes / 4 + 4 * K });
    } else {
      const pk = lib.xqPrep(caps, { k: K, w, norm, team: norm ? lib.gemvTeam(caps, shape) : undefined });
      kernel(pk, [...bindings.slice(0, ins), q], { bytes: bytesOfIds(reads.slice(0, ins)) + bytes, flops: 4 * K });
    }
    bindings.splice(0, ins, q);
    reads.splice(0, ins);
  }
  const xBytes = prep ? bindings[0].bytes : 0;
  const outBytes = u.parts.reduce((a, pp) => a + (pp.update !== undefined ? byteSize(nodes[pp.out].dtype, numel(nodes[pp.matmuls[0]].shape)) : p.values[pp.out].bytes), 0);
  const flops = u.parts.reduce((a, pp) => a + 2 * K * numel(nodes[pp.matmuls[0]].shape) * pp.matmuls.length, 0);
  kernel(k, bindings, { bytes: bytesOfIds(reads) + xBytes + outBytes, flops });
}
