// Lowering of rope and the frequency table it reads (folded on the host, or divided by weight factors on the
// device); gemv units with a fused rope and norm_rope units (per-head norms, rope, cache write) read the same table.
import { byteSize } from "../../graph/dtype.ts";
import { type Node, numel } from "../../graph/ir.ts";
import type { Unit } from "../../graph/plan.ts";
import { evaluate } from "../../graph/eval.ts";
import { Tracer } from "../../graph/tracer.ts";
import type { Binding } from "../program.ts";
import * as lib from "../lib/mod.ts";
import type { LowerContext } from "../lower.ts";
import { etype, floatOf, itype } from "./common.ts";

/** A rope node: rotation by position with the frequency table of ropeTable. */
export function lowerRope(cx: LowerContext, n: Node, u: Unit): void {
  const { nodes, caps, bind, kernel, simpleWork } = cx;
  const ins = n.inputs, out = bind(n.id), work = simpleWork(u, ins);
  const [R, H, D] = n.shape, dims = n.attrs.dims ?? D;
  const tb = ropeTable(cx, n.attrs.theta!, dims, ins[2]);
  const k = lib.rope(caps, { rows: R, heads: H, hd: D, theta: n.attrs.theta!, style: n.attrs.style!, rot: dims, pos: itype(nodes[ins[1]].dtype), positions: "rows", freqs: true });
  return kernel(k, [bind(ins[0]), bind(ins[1]), tb, out], work);
}

/** A norm_rope unit (per-head norms with their ropes and cache writes) as one kernel (lib.normRope). */
export function lowerNormRope(cx: LowerContext, u: Extract<Unit, { k: "norm_rope" }>): void {
  const { p, nodes, caps, bind, kernel, bytesOfIds } = cx;
  const bindings: Binding[] = [], reads: number[] = [];
  let outBytes = 0, flops = 0;
  const parts = u.parts.map((pp) => {
    const nn = nodes[pp.norm], [rows, heads, hd] = nn.shape, w = pp.weight;
    const part: lib.NormRopePart = { rows, heads, hd, eps: nn.attrs.eps!, weight: floatOf(nodes[w]) };
    if (pp.weightAdd !== undefined) part.weightAdd = pp.weightAdd;
    bindings.push(bind(pp.x), bind(w));
    reads.push(pp.x, w);
    Object.assign(part, ropeAndCache(cx, pp, bindings, reads));
    if (nodes[pp.out].dtype !== "f32") part.out = floatOf(nodes[pp.out]);
    bindings.push(bind(pp.out));
    outBytes += pp.update !== undefined ? byteSize(nodes[pp.out].dtype, numel(nn.shape)) : p.values[pp.out].bytes;
    flops += 8 * numel(nn.shape);
    return part;
  });
  kernel(lib.normRope(caps, { parts }), bindings, { bytes: bytesOfIds(reads) + outBytes, flops });
}

/**
 * A fused part's rope (its frequency table bound) and cache write (the cache's rows), and the position both read,
 * bound after them: what a gemv part and a norm_rope part take alike.
 */
export function ropeAndCache(
  cx: LowerContext,
  pp: { rope?: number; update?: number },
  bindings: Binding[],
  reads: number[],
): { rope?: { hd: number; rot: number; style: "adjacent" | "half" }; cap?: number; pos?: lib.IType } {
  const { nodes, bind } = cx, got: ReturnType<typeof ropeAndCache> = {};
  let pos: number | undefined;
  if (pp.rope !== undefined) {
    const r = nodes[pp.rope], hd = r.shape[2], dims = r.attrs.dims ?? hd;
    got.rope = { hd, rot: dims, style: r.attrs.style! };
    bindings.push(ropeTable(cx, r.attrs.theta!, dims, r.inputs[2]));
    pos = r.inputs[1];
  }
  if (pp.update !== undefined) {
    pos = nodes[pp.update].inputs[2];
    got.cap = nodes[pp.update].shape[0];
  }
  if (pos !== undefined) {
    got.pos = itype(nodes[pos].dtype);
    bindings.push(bind(pos));
    reads.push(pos);
  }
  return got;
}

/**
 * The frequencies rope reads: 1/theta^(2i/dims), divided by the frequency factors when given. Literal factors
 * (a config's rope scaling) fold on the host; factors that are a weight (GGUF rope_freqs) are divided on the
 * device by a small kernel that runs before the first reader.
 */
export function ropeTable(cx: LowerContext, theta: number, dims: number, factors?: number): Binding {
  const { nodes, caps, buf, bind, kernel, byName } = cx;
  const fn = factors === undefined ? undefined : nodes[factors];
  if (fn && fn.op === "literal") {
    const table = ropeFreqs(theta, dims, fn);
    return { buffer: buf("literal", `rope:${theta}:${dims}:#${factors}`, table.byteLength, table), offset: 0, bytes: table.byteLength };
  }
  const table = ropeFreqs(theta, dims);
  const base: Binding = { buffer: buf("literal", `rope:${theta}:${dims}`, table.byteLength, table), offset: 0, bytes: table.byteLength };
  if (!fn) return base;
  const key = `rope-freqs:${theta}:${dims}:#${factors}`;
  const done = byName.has(`arena:${key}`);
  const scaled: Binding = { buffer: buf("arena", key, table.byteLength), offset: 0, bytes: table.byteLength };
  if (!done) {
    const k = lib.elementwise(caps, { n: dims / 2, inputs: [{ type: "f32" }, { type: etype(fn.dtype) }], out: "f32", expr: { op: "div", args: [{ in: 0 }, { in: 1 }] } });
    kernel(k, [base, bind(factors!), scaled], { bytes: 3 * table.byteLength, flops: dims / 2 });
  }
  return scaled;
}

/** The oracle's own frequencies (graph/ops/composite.ts expandRope), so a folded table rounds the same way. */
function ropeFreqs(theta: number, dims: number, factors?: Node): Uint8Array {
  const t = new Tracer();
  const n = dims / 2;
  let f = t.recip(t.pow(t.literal(theta, "f32", [n]), t.div(t.mul(t.iota([n], 0, "f32"), 2), dims)));
  if (factors) f = t.div(f, t.node("literal", [], factors.attrs, { dtype: factors.dtype, shape: factors.shape }));
  t.output("f", f);
  const v = evaluate(t.build()).output.f;
  return new Uint8Array(v.buffer.slice(v.byteOffset, v.byteOffset + v.byteLength));
}

