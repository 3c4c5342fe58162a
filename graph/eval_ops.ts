// The oracle's primitives: each op's record (graph/ops/) holds its function over storage arrays; runPrimitive
// runs the one of a node. The arithmetic is f32: every float result is rounded to f32 as it is stored (a
// Float32Array store rounds to nearest even), and accumulators are rounded with Math.fround after every step.
// f16/bf16 elementwise ops compute on the f32 values and round once to the half type. Integer ops wrap (two's
// complement).
//
// Accumulation order (the tier-2 tolerance in tolerance.ts is derived from it): reduce-sum and every matmul dot
// start from +0 and add terms one at a time in increasing index order, acc = f32(acc + f32(a·b)); no fused
// multiply-add. Transcendentals (exp, log, sin, cos, tanh, pow) are the host's double Math functions rounded to
// f32; rsqrt is f32(1/√x) and recip f32(1/x), each with one rounding.
import type { Storage } from "./dtype.ts";
import { GraphError, type Node } from "./ir.ts";
import { recordOf } from "./ops/mod.ts";
import type { AccumulateOrder } from "./ops/record.ts";

export { asF32, copyStrided, weightF32 } from "./ops/arith.ts";
export type { AccumulateOrder } from "./ops/record.ts";

/** Runs one primitive node on its input values. `ins` are the input nodes (their dtype and shape). */
export function runPrimitive(n: Node, ins: Node[], v: Storage[], order: AccumulateOrder = "sequential"): Storage {
  const f = recordOf(n.op)?.eval;
  if (!f) throw new GraphError("attr", `the oracle has no kernel for ${n.op} (composites are expanded first)`, n);
  return f(n, ins, v, order);
}
