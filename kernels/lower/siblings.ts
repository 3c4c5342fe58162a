// Sibling kernels launched as one: two kernel steps that touch no common bytes (neither writes what the other
// reads or writes) run as one dispatch whose first workgroups run the first kernel and the rest the second.
//
// A Q4_K_M layer quantizes x twice for its q/k/v projections (q and k are q4_k, v is q6_k: two x layouts) and
// runs two gemvs; both pairs are independent, so a layer has two launches fewer (each ~1.5-2 µs on the H200,
// where a dependent launch's drain and ramp cost more than either prep's work; Vulkan, which already overlaps
// independent dispatches, gains less: 8B q4_k_m 2.370 -> 2.340 ms a token). A step moves earlier past
// steps it has no hazard with to meet its sibling; the byte ranges of the bindings decide (arena reuse shows
// there as overlap, so the plan's lifetimes hold). Plain data in and out; results do not change: every
// workgroup runs exactly what it ran before.
import type { Buffer, Expr, Kernel, Stmt, Var } from "../ir.ts";
import type { Binding, Program, Step } from "../program.ts";
import type { Caps } from "../target.ts";
import { conflicts, type Span, type StepAccess } from "../hazards.ts";

/** How far back (in steps) a kernel may move to meet its sibling. */
const REACH = 2;

/** What a step reads and writes, by program buffer; none for a collective (nothing moves across it). */
function accessOf(s: Step): StepAccess | undefined {
  const span = (b: Binding): Span => ({ buffer: b.buffer, lo: b.offset, hi: b.offset + b.bytes });
  if (s.k === "copy") return { reads: [span(s.src)], writes: [span(s.dst)] };
  if (s.k !== "kernel") return undefined;
  const io = s.kernel.buffers.map((b, i) => ({ access: b.access, span: span(s.bindings[i]) }));
  return { reads: io.filter((x) => x.access !== "w").map((x) => x.span), writes: io.filter((x) => x.access !== "r").map((x) => x.span) };
}
/** Whether two steps may run in either order or at once. */
function independent(x: Step, y: Step): boolean {
  const ax = accessOf(x), ay = accessOf(y);
  return ax !== undefined && ay !== undefined && !conflicts(ax, ay);
}

type KernelStep = Extract<Step, { k: "kernel" }>;
/** Kernels this pass may merge: a 1-D grid, and none of the statements that tie a kernel to its own launch. */
function mergeable(s: Step): s is KernelStep {
  if (s.k !== "kernel") return false;
  const k = s.kernel, u = k.uses;
  return k.grid[1] === 1 && k.grid[2] === 1 && !u.staging && !u.wgmma && !u.mma && !u.coop;
}
/** Shared memory a kernel declares, 4 bytes an element at most (an upper bound for the merged kernel's). */
function sharedBytes(k: Kernel): number {
  return k.shared.reduce((n, s) => n + s.count * 4, 0);
}
function siblings(a: KernelStep, b: KernelStep, caps: Caps): boolean {
  const [wa, wb] = [a.kernel.workgroup, b.kernel.workgroup];
  if (wa[0] !== wb[0] || wa[1] !== wb[1] || wa[2] !== wb[2]) return false;
  if (a.kernel.grid[0] + b.kernel.grid[0] > caps.maxWorkgroupsPerDim[0]) return false;
  if (sharedBytes(a.kernel) + sharedBytes(b.kernel) > caps.maxSharedBytes) return false;
  // the bindings the merged kernel declares (a range both bind alike counted once) and a fault word where checks
  // set one (SPIR-V, WGSL) must fit the device's per-stage limit (WebGPU's default is 8)
  const shared = b.bindings.filter((r, i) => a.bindings.some((x, j) => sameBinding(x, a.kernel.buffers[j], r, b.kernel.buffers[i]))).length;
  const fault = !caps.trap && (a.kernel.uses.checks || b.kernel.uses.checks) ? 1 : 0;
  if (a.bindings.length + b.bindings.length - shared + fault > (caps.maxStorageBuffers ?? Infinity)) return false;
  return independent(a, b);
}
const sameBinding = (x: Binding, xb: Buffer, y: Binding, yb: Buffer) =>
  x.buffer === y.buffer && x.offset === y.offset && x.bytes === y.bytes && xb.access === yb.access && xb.elem === yb.elem;

/** `prog` with sibling kernel steps merged (see the top of this file). */
export function mergeSiblings(prog: Program, caps: Caps): Program {
  const steps = [...prog.steps];
  for (let j = 1; j < steps.length; j++) {
    const b = steps[j];
    if (!mergeable(b)) continue;
    // the earliest sibling it can reach, moving past independent steps only (so a prep meets the prep before
    // the gemv between them, and that gemv is left for the next gemv)
    let at = -1;
    for (let i = j - 1; i >= 0 && i >= j - 1 - REACH; i--) {
      const a = steps[i];
      if (mergeable(a) && siblings(a, b, caps)) at = i;
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
    const same = bindings.findIndex((x, j) => sameBinding(x, buffers[j], r, buf));
    if (same >= 0) return bufOf.set(buf, buffers[same]);
    const nb: Buffer = { ...buf, binding: buffers.length };
    buffers.push(nb);
    bindings.push(r);
    bufOf.set(buf, nb);
  });
  const prefix = freePrefix(ka);
  const wg: Expr = { k: "builtin", t: "u32", b: "wgid.x" };
  const u32 = (v: number): Expr => ({ k: "const", t: "u32", v });
  // each part sees its own grid: a's nwg.x is its own count; b's workgroups (and invocations) count from its first
  const keepA = new Map<object, object>([...ka.buffers, ...ka.shared].map((x) => [x, x]));
  const bodyA = rebase(ka.body, (e) => (e.b === "nwg.x" ? u32(ga) : undefined), keepA);
  const sharedB = new Map(kb.shared.map((x) => [x, { ...x, name: prefix + x.name }]));
  const bodyB = rebase(kb.body, (e) =>
    e.b === "wgid.x" ? { k: "bin", t: "u32", op: "sub", a: wg, b: u32(ga) }
      : e.b === "nwg.x" ? u32(gb)
      : e.b === "gid.x" ? { k: "bin", t: "u32", op: "sub", a: e, b: u32(ga * kb.workgroup[0]) }
      : undefined, new Map<object, object>([...bufOf, ...sharedB]), prefix);
  const kernel: Kernel = {
    // the name says the code: which binding each of b's buffers became (a range bound once shows there)
    name: `${ka.name}+${kb.name}@${kb.buffers.map((x) => bufOf.get(x)!.binding).join(".")}`,
    workgroup: ka.workgroup,
    grid: [ga + gb, 1, 1],
    buffers,
    shared: [...ka.shared, ...sharedB.values()],
    body: [{ k: "if", c: { k: "bin", t: "bool", op: "lt", a: wg, b: u32(ga) }, then: bodyA, else: bodyB }],
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

type BuiltinExpr = Extract<Expr, { k: "builtin" }>;
/**
 * A copy of `body` with builtins replaced where `f` says, the objects of `seed` replaced by its values (buffers,
 * shared arrays: the kernel's own lists must hold the very objects its statements name), and with a `prefix`,
 * every variable renamed. Shared sub-trees stay shared (the IR is a DAG of plain objects).
 */
function rebase(body: Stmt[], f: (e: BuiltinExpr) => Expr | undefined, seed: Map<object, object>, prefix?: string): Stmt[] {
  const memo = new Map<object, unknown>(seed);
  const copy = (x: unknown): unknown => {
    if (typeof x !== "object" || x === null) return x;
    if (memo.has(x)) return memo.get(x);
    if (Array.isArray(x)) {
      const out = x.map(copy);
      memo.set(x, out);
      return out;
    }
    const e = (x as Expr).k === "builtin" ? f(x as BuiltinExpr) : undefined;
    if (e) {
      memo.set(x, e);
      return e;
    }
    const keys = Object.keys(x);
    if (prefix && keys.length === 2 && "name" in x && "t" in x) { // a Var
      const nv = { ...(x as Var), name: prefix + (x as Var).name };
      memo.set(x, nv);
      return nv;
    }
    const out: Record<string, unknown> = {};
    memo.set(x, out);
    for (const k of keys) out[k] = copy((x as Record<string, unknown>)[k]);
    return out;
  };
  return copy(body) as Stmt[];
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
