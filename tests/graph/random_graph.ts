// Seeded random graphs for the pass property test: small tensors, every op family, duplicated subexpressions
// (for CSE), literal-only subgraphs (for folding), dead nodes (for DCE), elementwise chains (for fusion), and
// a State buffer. Slot values are fixed when the slot is made, so index slots always hold in-range indices.
import type { Storage } from "../../graph/dtype.ts";
import { GraphError, type Graph } from "../../graph/ir.ts";
import { type Tensor, Tracer } from "../../graph/tracer.ts";

/** The tests' one seeded generator (tests/rng.ts). */
import { rng } from "../rng.ts";
export { rng };

export interface RandomGraph {
  graph: Graph;
  slots: Record<string, Storage>;
  state: Record<string, Storage>;
}

const UN = ["neg", "abs", "exp", "log", "sqrt", "rsqrt", "recip", "sin", "cos", "tanh", "floor"] as const;
const BIN_F = ["add", "sub", "mul", "div", "max", "min", "pow", "mod"] as const;
const BIN_I = ["add", "sub", "mul", "div", "mod", "max", "min", "and", "or"] as const;
const CMP = ["eq", "ne", "lt", "le", "gt", "ge"] as const;

export function randomGraph(seed: number, size = 24): RandomGraph {
  const r = rng(seed);
  const int = (n: number) => Math.floor(r() * n);
  const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)];
  const g = new Tracer();
  const slots: Record<string, Storage> = {};
  const state: Record<string, Storage> = {};
  const pool: Tensor[] = [];
  const of = (dt: string) => pool.filter((t) => t.dtype === dt);
  const dim = () => 1 + int(4);
  const shape = () => Array.from({ length: 1 + int(3) }, dim);
  const count = (s: readonly number[]) => s.reduce((a, b) => a * b, 1);
  const fvals = (n: number) => Array.from({ length: n }, () => (r() < 0.1 ? pick([0, -0, 1, 0.5, -2]) : (r() - 0.5) * 8));
  let nslot = 0;
  const fslot = (s: number[]) => {
    const name = `f${nslot++}`;
    slots[name] = Float32Array.from(fvals(count(s)));
    return g.slot(name, { kind: "Input", dtype: "f32", shape: s });
  };
  const islot = (s: number[], lo: number, hi: number) => {
    const name = `i${nslot++}`;
    slots[name] = Int32Array.from({ length: count(s) }, () => lo + int(hi - lo));
    return g.slot(name, { kind: "Input", dtype: "i32", shape: s });
  };
  const fresh = (): Tensor => {
    const s = shape();
    switch (int(4)) {
      case 0: return g.literal((r() - 0.5) * 4, "f32", s);
      case 1: return g.tensor(fvals(count(s)), "f32", s);
      default: return fslot(s);
    }
  };
  const f32 = (): Tensor => {
    const fs = of("f32");
    return fs.length && r() < 0.8 ? pick(fs) : fresh();
  };
  const i32 = (): Tensor => {
    const is = of("i32");
    if (is.length && r() < 0.7) return pick(is);
    const s = shape();
    return r() < 0.5 ? g.tensor(Array.from({ length: count(s) }, () => int(20) - 10), "i32", s) : islot(s, -10, 10);
  };
  const lastDim = (t: Tensor) => t.shape[t.shape.length - 1];

  // One State buffer, written by the step at an offset from a slot.
  const st = g.state("kv", "f32", [4, 3]);
  state.kv = Float32Array.from(fvals(12));
  pool.push(st);

  const steps: (() => Tensor | undefined)[] = [
    () => g.unary(pick(UN), f32()),
    () => g.binary(pick(BIN_F), f32(), r() < 0.2 ? (r() - 0.5) * 4 : f32()),
    () => g.binary(pick(BIN_I), i32(), r() < 0.2 ? int(7) - 3 : i32()),
    () => g.binary(pick(CMP), f32(), f32()),
    () => {
      const c = g.binary(pick(CMP), f32(), 0);
      return g.select(c, f32(), r() < 0.3 ? -Infinity : f32());
    },
    () => g.cast(pick([f32(), i32()]), pick(["f32", "i32", "f16", "bf16", "u8", "bool"] as const)),
    () => g.cast(g.cast(f32(), pick(["f16", "bf16"] as const)), "f32"),
    () => {
      const x = pick([f32(), f32(), i32()]);
      return r() < 0.25 ? g.argmax(x, int(x.shape.length)) : g.reduce(pick(["sum", "max", "min"] as const), x, int(x.shape.length));
    },
    () => {
      const x = f32(), K = lastDim(x), N = dim();
      const w = r() < 0.5 ? g.tensor(fvals(N * K), "f32", [N, K]) : fslot([N, K]);
      return g.matmul(x, w);
    },
    () => {
      const x = f32();
      if (x.shape.length < 2) return g.reshape(x, [1, ...x.shape]);
      const p = x.shape.map((_, i) => i).reverse();
      return r() < 0.5 ? g.permute(x, p) : g.reshape(x, [count(x.shape)]);
    },
    () => {
      const x = f32();
      return g.broadcast(x, [dim(), ...x.shape.map((d) => (d === 1 ? dim() : d))]);
    },
    () => {
      const x = f32(), ax = int(x.shape.length), d = x.shape[ax];
      const s = int(d), e = s + 1 + int(d - s);
      return r() < 0.5 ? g.slice(x, ax, s, e) : g.concat([x, g.neg(x)], ax);
    },
    () => {
      const V = 2 + int(4), D = dim();
      const table = r() < 0.5 ? g.tensor(fvals(V * D), "f32", [V, D]) : fslot([V, D]);
      return g.gather(table, islot([1 + int(3)], 0, V));
    },
    () => {
      const n = 2 + int(4), d = dim(), m = 1 + int(n);
      const t = fslot([n, d]), u = f32Like([m, d]);
      return g.updateSlice(t, u, islot([1], 0, n - m + 1), 0);
    },
    () => {
      const n = 2 + int(4), d = dim(), m = 1 + int(3);
      return g.scatter(fslot([n, d]), f32Like([m, d]), islot([m], -1, n));
    },
    () => {
      const x = f32(), D = lastDim(x);
      switch (int(6)) {
        case 0: return g.rmsnorm(x, g.tensor(fvals(D), "f32", [D]), 1e-5);
        case 1: return g.layernorm(x, g.tensor(fvals(D), "f32", [D]), g.literal(0.5, "f32", [D]), 1e-5);
        case 2: return g.softmax(x, int(x.shape.length));
        case 3: return g.silu(x);
        case 4: return g.gelu(x);
        default: return g.siluMul(x, g.exp(x));
      }
    },
    () => {
      const R = 1 + int(3), H = pick([2, 4]), D = pick([2, 4, 6]);
      const x = fslot([R, H, D]);
      return g.rope(x, islot([R], 0, 50), { theta: pick([10000, 500000]), style: pick(["adjacent", "half"] as const), dims: pick([D, 2]) });
    },
    () => {
      const R = 1 + int(2), KVH = pick([1, 2]), H = KVH * pick([1, 2]), D = pick([2, 4]), C = 2 + int(4);
      const mask = g.causalMask(islot([1], 0, C - R + 1), R, C);
      return g.attention(fslot([R, H, D]), fslot([C, KVH, D]), fslot([C, KVH, D]), mask, 0.5);
    },
    () => {
      // A literal-only chain: folding turns it into one literal.
      const s = shape();
      const a = g.literal((r() - 0.5) * 4, "f32", s), b = g.tensor(fvals(count(s)), "f32", s);
      return g.binary(pick(BIN_F), g.unary(pick(UN), a), g.add(b, g.cast(g.iota(s, int(s.length)), "f32")));
    },
    () => {
      // The same expression twice: CSE merges it.
      const done = pool.filter((t) => t.op !== "slot" && t.op !== "literal" && t.op !== "state" && t.op !== "const");
      if (!done.length) return undefined;
      const t = pick(done), n = g.nodes[t.id];
      return g.node(n.op, n.inputs.map((i) => g.nodes[i]), n.attrs, n.inputs.length ? undefined : n);
    },
  ];
  function f32Like(s: number[]): Tensor {
    return r() < 0.5 ? fslot(s) : g.tensor(fvals(count(s)), "f32", s);
  }

  while (pool.length < size) {
    try {
      const t = pick(steps)();
      if (t) pool.push(t);
    } catch (e) {
      if (!(e instanceof GraphError)) throw e; // an operand combination the op rejects: try another
    }
  }
  const upd = g.updateSlice(st, g.add(g.slice(st, 0, 0, 2), 1), islot([1], 0, 3), 0);
  g.writeState("kv", upd);
  const nouts = 1 + int(3);
  for (let k = 0; k < nouts; k++) {
    const t = k === 0 ? pool[pool.length - 1] : pick(pool);
    g.output(`out${k}`, t);
  }
  return { graph: g.build(), slots, state };
}
