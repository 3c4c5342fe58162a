// The lowering sweep's probes: every op the graph has, over its dtypes and attributes, at small shapes (one
// graph each, or undefined when the type rule refuses it). tests/ops/lowers.test.ts renders them for every
// target; tests/amdgpu/lowers.test.ts compiles them through comgr.
import { BLOCK, type DType, type ScalarDType } from "../../graph/dtype.ts";
import { GraphError, type Op } from "../../graph/ir.ts";
import { SAMPLER_WORDS } from "../../graph/sample.ts";
import { EXTRA_ENTRY, EXTRA_HEAD, maskWords } from "../../graph/logits.ts";
import { type Tensor, Tracer } from "../../graph/tracer.ts";
import { BINARY, COMPARE, UNARY } from "../../graph/ops.ts";

const SCALARS: ScalarDType[] = ["f32", "f16", "bf16", "i32", "u32", "i8", "u8", "bool"];
const BLOCKS = Object.keys(BLOCK) as DType[];

export interface Probe {
  name: string;
  op: Op;
  build(t: Tracer): Tensor;
}

export function probes(): Probe[] {
  const out: Probe[] = [];
  let n = 0;
  const slot = (t: Tracer, dtype: ScalarDType, shape: number[]) => t.slot(`in${n++}`, { kind: "Input", dtype, shape });
  const weight = (t: Tracer, dtype: DType, shape: number[]) => t.const({ role: `w${n++}` }, dtype, shape);
  const add = (op: Op, name: string, build: (t: Tracer) => Tensor) => out.push({ op, name: `${op} ${name}`, build });
  for (const d of SCALARS) {
    for (const op of UNARY) add(op, d, (t) => t.node(op, [slot(t, d, [5])]));
    for (const op of [...BINARY, ...COMPARE]) add(op, d, (t) => t.node(op, [slot(t, d, [5]), slot(t, d, [5])]));
    add("select", d, (t) => t.select(slot(t, "bool", [5]), slot(t, d, [5]), slot(t, d, [5])));
    for (const to of SCALARS) add("cast", `${d}->${to}`, (t) => t.cast(slot(t, d, [5]), to));
    for (const fn of ["sum", "max", "min"] as const) {
      for (const axis of [0, 1]) add("reduce", `${fn} ${d} axis ${axis}`, (t) => t.reduce(fn, slot(t, d, [3, 5]), axis));
    }
    for (const axis of [0, 1]) add("argmax", `${d} axis ${axis}`, (t) => t.argmax(slot(t, d, [3, 5]), axis));
    add("reshape", d, (t) => t.reshape(slot(t, d, [3, 4]), [2, 6]));
    add("permute", d, (t) => t.permute(slot(t, d, [3, 4]), [1, 0]));
    add("broadcast", d, (t) => t.broadcast(slot(t, d, [1, 4]), [3, 4]));
    add("slice", d, (t) => t.slice(slot(t, d, [3, 4]), 1, 1, 3));
    add("concat", d, (t) => t.concat([slot(t, d, [3, 4]), slot(t, d, [2, 4])], 0));
    for (const axis of [0, 1]) {
      add("dynamic_update_slice", `${d} axis ${axis}`, (t) =>
        t.node("dynamic_update_slice", [slot(t, d, [4, 6]), slot(t, d, axis ? [4, 2] : [2, 6]), slot(t, "i32", [1])], { axis }));
    }
    add("scatter_update", d, (t) => t.scatter(slot(t, d, [4, 6]), slot(t, d, [2, 6]), slot(t, "i32", [2])));
    add("iota", d, (t) => t.iota([3, 4], 1, d));
    add("silu", d, (t) => t.silu(slot(t, d, [5])));
    add("gelu", d, (t) => t.gelu(slot(t, d, [5])));
    add("silu_mul", d, (t) => t.node("silu_mul", [slot(t, d, [5]), slot(t, d, [5])]));
    for (const idx of ["i32", "u32"] as const) add("gather", `${d} table, ${idx} ids`, (t) => t.gather(weight(t, d, [8, 32]), slot(t, idx, [3])));
    for (const x of SCALARS) {
      add("matmul", `x ${x} w ${d}`, (t) => t.matmul(slot(t, x, [2, 32]), weight(t, d, [4, 32])));
      add("matmul", `batched x ${x} w ${d}`, (t) => t.matmul(slot(t, x, [2, 3, 32]), slot(t, d, [2, 4, 32])));
    }
  }
  for (const d of BLOCKS) {
    add("gather", `${d} table`, (t) => t.gather(weight(t, d, [8, 256]), slot(t, "i32", [3])));
    add("matmul", `w ${d}`, (t) => t.matmul(slot(t, "f32", [2, 256]), weight(t, d, [4, 256])));
    add("matmul", `w ${d}, one row`, (t) => t.matmul(slot(t, "f32", [1, 256]), weight(t, d, [4, 256])));
  }
  for (const axis of [0, 1]) add("softmax", `axis ${axis}`, (t) => t.softmax(slot(t, "f32", [3, 5]), axis));
  add("rmsnorm", "f32", (t) => t.rmsnorm(slot(t, "f32", [3, 8]), weight(t, "f32", [8]), 1e-5));
  add("layernorm", "f32", (t) => t.layernorm(slot(t, "f32", [3, 8]), weight(t, "f32", [8]), weight(t, "f32", [8]), 1e-5));
  for (const style of ["adjacent", "half"] as const) {
    for (const dims of [8, 4]) {
      for (const fac of ["none", "literal", "weight", "slot"] as const) {
        for (const pos of ["i32", "u32"] as const) {
          add("rope", `${style} dims ${dims} factors ${fac} pos ${pos}`, (t) => {
            const factors = fac === "none" ? undefined : fac === "literal" ? t.literal(2, "f32", [dims / 2])
              : fac === "weight" ? weight(t, "f32", [dims / 2]) : slot(t, "f32", [dims / 2]);
            return t.rope(slot(t, "f32", [2, 3, 8]), slot(t, pos, [2]), { theta: 10000, style, dims, factors });
          });
        }
      }
    }
  }
  const kvs: ScalarDType[] = ["f32", "f16", "bf16"];
  for (const k of kvs) {
    for (const v of kvs) {
      for (const dv of [8, 4]) {
        add("attention", `k ${k} v ${v} dv ${dv}`, (t) =>
          t.attention(slot(t, "f32", [2, 4, 8]), slot(t, k, [6, 2, 8]), slot(t, v, [6, 2, dv]), slot(t, "bool", [2, 6]), 0.35));
        add("attention", `causal k ${k} v ${v} dv ${dv}`, (t) => {
          const mask = t.node("causal_mask", [slot(t, "i32", [1])], { rows: 2, cap: 6 });
          return t.attention(slot(t, "f32", [2, 4, 8]), slot(t, k, [6, 2, 8]), slot(t, v, [6, 2, dv]), mask, 0.35);
        });
        add("paged_attention", `k ${k} v ${v} dv ${dv}`, (t) =>
          t.node("paged_attention", [slot(t, "f32", [2, 4, 8]), slot(t, k, [8, 2, 8]), slot(t, v, [8, 2, dv]), slot(t, "i32", [2, 2]), slot(t, "i32", [2])], { scale: 0.35, block: 4 }));
      }
    }
  }
  add("attention", "softcap", (t) => t.attention(slot(t, "f32", [2, 4, 8]), slot(t, "f32", [6, 2, 8]), slot(t, "f32", [6, 2, 8]), slot(t, "bool", [2, 6]), 0.35, 30));
  for (const w of [undefined, 3]) {
    add("causal_mask", `window ${w}`, (t) => t.node("causal_mask", [slot(t, "i32", [1])], { rows: 2, cap: 6, window: w }));
  }
  add("sample", "f32", (t) => t.sample(slot(t, "f32", [2, 40]), t.slot(`in${n++}`, { kind: "Sampler", dtype: "u32", shape: [2, SAMPLER_WORDS] })));
  for (const counts of [false, true]) {
    add("logits_process", counts ? "with counts" : "no counts", (t) =>
      t.logitsProcess(slot(t, "f32", [2, 40]), slot(t, "u32", [2, EXTRA_HEAD + 2 * EXTRA_ENTRY]), slot(t, "u32", [2, maskWords(40)]), counts ? slot(t, "u32", [2, 40]) : undefined));
  }
  for (const k of [0, 3]) {
    add("logprobs", `n ${k}`, (t) => {
      const logits = slot(t, "f32", [2, 40]);
      const params = t.slot(`in${n++}`, { kind: "Sampler", dtype: "u32", shape: [2, SAMPLER_WORDS] });
      return t.logprobs(logits, t.sample(logits, params), params, k);
    });
  }
  return out;
}

/** Builds a probe; undefined when the type rule refuses it. */
export function build(p: Probe) {
  const t = new Tracer();
  try {
    t.output("y", p.build(t));
    return t.build();
  } catch (e) {
    if (e instanceof GraphError) return undefined;
    throw e;
  }
}

