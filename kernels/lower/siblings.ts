// Sibling kernels launched as one: two kernel steps that touch no common bytes (neither writes what the other
// reads or writes) run as one dispatch whose first workgroups run the first kernel and the rest the second.
//
// A Q4_K_M layer quantizes x twice for its q/k/v projections (q and k are q4_k, v is q6_k: two x layouts) and
// runs two gemvs; both pairs are independent, so a layer has two launches fewer (each ~1.5-2 µs on the H200,
// where a dependent launch's drain and ramp cost more than either prep's work). A step moves earlier past
// steps it has no hazard with to meet its sibling; the byte ranges of the bindings decide (arena reuse shows
// there as overlap, so the plan's lifetimes hold). Plain data in and out; results do not change: every
// workgroup runs exactly what it ran before.
import type { Buffer, Expr, Kernel, Shared, Stmt, Var } from "../ir.ts";
import type { Binding, Program, Step } from "../program.ts";

/** How far back (in steps) a kernel may move to meet its sibling. */
const REACH = 2;

interface Access {
  b: Binding;
  write: boolean;
}
function accesses(s: Step): Access[] | undefined {
  if (s.k === "kernel") return s.bindings.map((b, i) => ({ b, write: s.kernel.buffers[i].access !== "r" }));
  if (s.k === "copy") return [{ b: s.src, write: false }, { b: s.dst, write: true }];
  return undefined; // a collective: nothing moves across it
}
/** Whether two steps may run in either order or at once. */
function independent(x: Step, y: Step): boolean {
  const ax = accesses(x), ay = accesses(y);
  if (!ax || !ay) return false;
  for (const p of ax) {
    for (const q of ay) {
      if (!p.write && !q.write) continue;
      if (p.b.buffer !== q.b.buffer) continue;
      if (p.b.offset < q.b.offset + q.b.bytes && q.b.offset < p.b.offset + p.b.bytes) return false;
    }
  }
  return true;
}

type KernelStep = Extract<Step, { k: "kernel" }>;
/** Kernels this pass may merge: a 1-D grid, and none of the statements that tie a kernel to its own launch. */
function mergeable(s: Step, maxShared: number): s is KernelStep {
  if (s.k !== "kernel") return false;
  const k = s.kernel, u = k.uses;
  return k.grid[1] === 1 && k.grid[2] === 1 && !u.staging && !u.wgmma && !u.mma && !u.coop && sharedBytes(k) <= maxShared;
}
function sharedBytes(k: Kernel): number {
  return k.shared.reduce((n, s) => n + s.count * 4, 0);
}
function siblings(a: KernelStep, b: KernelStep, maxShared: number): boolean {
  const [wa, wb] = [a.kernel.workgroup, b.kernel.workgroup];
  return wa[0] === wb[0] && wa[1] === wb[1] && wa[2] === wb[2] && sharedBytes(a.kernel) + sharedBytes(b.kernel) <= maxShared &&
    independent(a, b);
}

/** `prog` with sibling kernel steps merged (see the top of this file). */
export function mergeSiblings(prog: Program, maxShared: number): Program {
  const steps = [...prog.steps];
  for (let j = 1; j < steps.length; j++) {
    const b = steps[j];
    if (!mergeable(b, maxShared)) continue;
    // the earliest sibling it can reach, moving past independent steps only (so a prep meets the prep before
    // the gemv between them, and that gemv is left for the next gemv)
    let at = -1;
    for (let i = j - 1; i >= 0 && i >= j - 1 - REACH; i--) {
      const a = steps[i];
      if (mergeable(a, maxShared) && siblings(a, b, maxShared)) at = i;
      if (!independent(a, b)) break;
    }
    if (at < 0) continue;
    steps[at] = merge(steps[at] as KernelStep, b);
    steps.splice(j, 1);
    j--;
  }
  return steps.length === prog.steps.length ? prog : { ...prog, steps };
}

function merge(a: KernelStep, b: KernelStep): KernelStep {
  const ka = a.kernel, kb = b.kernel;
  const ga = ka.grid[0], gb = kb.grid[0];
  // b's buffers after a's; a range both bind with the same access is bound once
  const buffers: Buffer[] = [...ka.buffers];
  const bindings: Binding[] = [...a.bindings];
  const bufOf = new Map<Buffer, Buffer>();
  kb.buffers.forEach((buf, i) => {
    const r = b.bindings[i];
    const same = bindings.findIndex((x, j) =>
      x.buffer === r.buffer && x.offset === r.offset && x.bytes === r.bytes && buffers[j].access === buf.access && buffers[j].elem === buf.elem
    );
    if (same >= 0) return bufOf.set(buf, buffers[same]);
    const nb: Buffer = { ...buf, binding: buffers.length };
    buffers.push(nb);
    bindings.push(r);
    bufOf.set(buf, nb);
  });
  const prefix = freePrefix(ka);
  const vars = new Map<Var, Var>(), shared = new Map<Shared, Shared>();
  const wg: Expr = { k: "builtin", t: "u32", b: "wgid.x" };
  // b's workgroup index counts from its own first workgroup; its grid is its own
  const builtin = (e: Expr): Expr | undefined =>
    e.k !== "builtin" ? undefined
      : e.b === "wgid.x" ? { k: "bin", t: "u32", op: "sub", a: wg, b: { k: "const", t: "u32", v: ga } }
      : e.b === "nwg.x" ? { k: "const", t: "u32", v: gb }
      : e.b === "gid.x" ? { k: "bin", t: "u32", op: "sub", a: e, b: { k: "const", t: "u32", v: ga * kb.workgroup[0] } }
      : undefined;
  const memo = new Map<object, unknown>();
  const copy = (x: unknown): unknown => {
    if (typeof x !== "object" || x === null) return x;
    if (memo.has(x)) return memo.get(x);
    const buf = bufOf.get(x as Buffer);
    if (buf) return buf;
    if (kb.shared.includes(x as Shared)) {
      const s = x as Shared;
      const ns = { ...s, name: prefix + s.name };
      shared.set(s, ns);
      memo.set(x, ns);
      return ns;
    }
    if (Array.isArray(x)) {
      const out = x.map(copy);
      memo.set(x, out);
      return out;
    }
    const e = builtin(x as Expr);
    if (e) {
      memo.set(x, e);
      return e;
    }
    const keys = Object.keys(x);
    if (keys.length === 2 && "name" in x && "t" in x) { // a Var
      const v = x as Var;
      const nv = { ...v, name: prefix + v.name };
      vars.set(v, nv);
      memo.set(x, nv);
      return nv;
    }
    const out: Record<string, unknown> = {};
    memo.set(x, out);
    for (const k of keys) out[k] = copy((x as Record<string, unknown>)[k]);
    return out;
  };
  const bodyB = copy(kb.body) as Stmt[];
  const kernel: Kernel = {
    // the name says the code: which binding each of b's buffers became (a range bound once shows there)
    name: `${ka.name}+${kb.name}@${kb.buffers.map((x) => bufOf.get(x)!.binding).join(".")}`,
    workgroup: ka.workgroup,
    grid: [ga + gb, 1, 1],
    buffers,
    shared: [...ka.shared, ...kb.shared.map((s) => shared.get(s) ?? { ...s, name: prefix + s.name })],
    body: [{ k: "if", c: { k: "bin", t: "bool", op: "lt", a: wg, b: { k: "const", t: "u32", v: ga } }, then: ka.body, else: bodyB }],
    uses: {
      subgroups: ka.uses.subgroups || kb.uses.subgroups,
      f16: ka.uses.f16 || kb.uses.f16,
      checks: ka.uses.checks || kb.uses.checks,
    },
  };
  return {
    k: "kernel",
    kernel,
    bindings,
    grid: [ga + gb, 1, 1],
    work: { bytes: a.work.bytes + b.work.bytes, flops: a.work.flops + b.work.flops },
  };
}

/** A name prefix no variable or shared array of `k` starts with. */
function freePrefix(k: Kernel): string {
  const names: string[] = k.shared.map((s) => s.name);
  const seen = new Set<object>();
  const walk = (x: unknown): void => {
    if (typeof x !== "object" || x === null || seen.has(x)) return;
    seen.add(x);
    if (Array.isArray(x)) return x.forEach(walk);
    const keys = Object.keys(x);
    if (keys.length === 2 && "name" in x && "t" in x) names.push((x as Var).name);
    for (const key of keys) walk((x as Record<string, unknown>)[key]);
  };
  walk(k.body);
  for (let n = 1;; n++) {
    const p = `s${n}_`;
    if (!names.some((x) => x.startsWith(p))) return p;
  }
}
