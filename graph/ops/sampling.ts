// The sampler's ops, one record each: composites without an expansion, whose oracles are graph/sample.ts and
// graph/logits.ts directly (run as they are by the oracle) and whose kernels are kernels/lib/sample.ts and
// kernels/lib/logits.ts. The planner appends them to a decode graph.
import { sameShape } from "../ir.ts";
import { SAMPLER_WORDS, sampleRows } from "../sample.ts";
import { EXTRA_ENTRY, EXTRA_HEAD, logprobRows, MAX_TOP_LOGPROBS, maskWords, processRows } from "../logits.ts";
import { arity, fail, fmt, type OpRecord } from "./record.ts";

// The bits a device computes are the oracle's (integer sampling, exact logits rewrites): compared exactly.
export const SAMPLING_OPS: Record<"sample" | "logits_process" | "logprobs", OpRecord> = {
  sample: {
    kind: "composite", tolerance: "exact", lower: "kernel",
    doc: "[logits f32[R, V], params u32[R, SAMPLER_WORDS] (Slot kind Sampler)] -> i32[R, 2] (token, nonfinite); graph/sample.ts",
    infer: (_op, ins, a, ref) => {
      arity(ins, 2, 2, ref);
      const [x, p] = ins;
      if (x.dtype !== "f32" || x.shape.length !== 2) fail("shape", ref, `logits must be f32[rows, vocab], got ${fmt(x)}`);
      if (p.dtype !== "u32" || !sameShape(p.shape, [x.shape[0], SAMPLER_WORDS])) {
        fail("shape", ref, `sampler params must be u32[${x.shape[0]},${SAMPLER_WORDS}], got ${fmt(p)}`);
      }
      return { dtype: "i32", shape: [x.shape[0], 2], attrs: a };
    },
    eval: (_n, ins, v) => sampleRows(v[0] as Float32Array, v[1] as Uint32Array, ins[0].shape[0], ins[0].shape[1]),
  },
  logits_process: {
    kind: "composite", tolerance: "exact", lower: "kernel",
    doc: "[logits f32[R, V], extra u32[R, 8 + 3E], mask u32[R, ceil(V/32)], counts? u32[Q, V]] -> f32[R, V]: bias, bans, penalties, grammar mask; graph/logits.ts",
    infer: (_op, ins, a, ref) => {
      arity(ins, 3, 4, ref);
      const [x, e, m, c] = ins;
      if (x.dtype !== "f32" || x.shape.length !== 2) fail("shape", ref, `logits must be f32[rows, vocab], got ${fmt(x)}`);
      const [R, V] = x.shape;
      if (e.dtype !== "u32" || e.shape.length !== 2 || e.shape[0] !== R || e.shape[1] < EXTRA_HEAD || (e.shape[1] - EXTRA_HEAD) % EXTRA_ENTRY !== 0) {
        fail("shape", ref, `extra must be u32[${R}, ${EXTRA_HEAD} + ${EXTRA_ENTRY}·entries], got ${fmt(e)}`);
      }
      if (m.dtype !== "u32" || !sameShape(m.shape, [R, maskWords(V)])) fail("shape", ref, `mask must be u32[${R},${maskWords(V)}], got ${fmt(m)}`);
      if (c && (c.dtype !== "u32" || c.shape.length !== 2 || c.shape[0] < 1 || c.shape[1] !== V)) fail("shape", ref, `counts must be u32[rows >= 1, ${V}], got ${fmt(c)}`);
      return { dtype: "f32", shape: [R, V], attrs: a };
    },
    eval: (_n, ins, v) =>
      processRows(v[0] as Float32Array, v[1] as Uint32Array, v[2] as Uint32Array, ins[0].shape[0], ins[0].shape[1], v[3] as Uint32Array | undefined),
  },
  logprobs: {
    kind: "composite", tolerance: "exact", lower: "kernel",
    doc: "[logits f32[R, V], sample i32[R, 2], params u32[R, SAMPLER_WORDS]] attrs.n -> f32[R, 1 + 2n]; graph/logits.ts",
    infer: (_op, ins, a, ref) => {
      arity(ins, 3, 3, ref);
      const [x, s, p] = ins;
      if (x.dtype !== "f32" || x.shape.length !== 2) fail("shape", ref, `logits must be f32[rows, vocab], got ${fmt(x)}`);
      const R = x.shape[0];
      if (s.dtype !== "i32" || !sameShape(s.shape, [R, 2])) fail("shape", ref, `sample must be i32[${R},2], got ${fmt(s)}`);
      if (p.dtype !== "u32" || !sameShape(p.shape, [R, SAMPLER_WORDS])) fail("shape", ref, `sampler params must be u32[${R},${SAMPLER_WORDS}], got ${fmt(p)}`);
      if (!(Number.isInteger(a.n) && a.n! >= 0 && a.n! <= MAX_TOP_LOGPROBS)) fail("attr", ref, `logprobs n ${a.n} must be an integer in [0, ${MAX_TOP_LOGPROBS}]`);
      return { dtype: "f32", shape: [R, 1 + 2 * a.n!], attrs: a };
    },
    eval: (n, ins, v) => logprobRows(v[0] as Float32Array, v[1] as Int32Array, v[2] as Uint32Array, ins[0].shape[0], ins[0].shape[1], n.attrs.n!),
  },
};
