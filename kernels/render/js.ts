// Renders a Kernel to a JavaScript function that runs its whole grid on the CPU over typed-array views of the
// bound buffers. Two code shapes:
// - scalar: one invocation after another, straight-line code over hoisted typed arrays. Used when the
//   order of invocations cannot be observed: no barriers and no subgroup ops, or one invocation per
//   workgroup, or subgroups of one lane without barriers. This is the fast path the JS device relies on.
// - simt: a workgroup runs in lockstep, every local is an array over the workgroup's invocations and every
//   statement runs for the active lanes under a mask (divergent if/for/return). Barriers are then free (all
//   lanes finish a statement before the next starts); subgroup reductions and shuffles read the other
//   lanes' values from per-statement temporaries.
// f32 arithmetic is rounded after every op (Math.fround), f16 with Math.f16round, integers wrap at 32 bits.
// Out-of-range behaviour of integer ops, stated here because the IR leaves it open: x/0 and x%0 give 0,
// shift amounts are taken mod 32, float->int casts truncate and saturate (NaN -> 0).
// Subgroups are `subgroupSize` consecutive invocations (by linear local id); a reduction combines the active
// lanes only (sequentially, in lane order); a shuffle from a lane past the subgroup returns the caller's own
// value and one from an inactive lane returns 0.
// Out-of-bounds: each binding is its own typed-array view, so a stray store never reaches another binding
// (it is dropped) and a stray load yields NaN/0; `debug: true` turns both into a fault with code 0.// The statement and expression code generator is js_gen.ts; this module chooses the code shape and wraps the
// body in the function that runs the grid.
import type { Expr, Kernel, Shared, Stmt } from "../ir.ts";
import { KernelError, stmtExprs } from "../ir.ts";
import * as rt from "./js_runtime.ts";
import { Gen, LANE_ARRAY, type ViewClass } from "./js_gen.ts";
import { rollLoops } from "./roll.ts";
export { JsKernelFault, OOB_CODE } from "./js_runtime.ts";

export interface JsRenderOptions {
  /** Lanes per subgroup (the target's caps.subgroupSize); 1 turns subgroup ops into identities. */
  subgroupSize: number;
  /** Bounds- and alignment-check every access and check that barriers are reached by the whole workgroup. */
  debug?: boolean;
  /** Force the lockstep path (tests use it to run scalar-safe kernels both ways). */
  forceSimt?: boolean;
  /** Roll the library's unrolled blocks back into loops on the scalar path (render/roll.ts; default true). */
  roll?: boolean;
}

/** A bound byte range: a whole ArrayBuffer or a window of one. */
export interface JsBinding {
  buffer: ArrayBufferLike;
  offset?: number;
  bytes?: number;
}
export type View = Float32Array | Uint16Array | Int16Array | Int32Array | Uint32Array | Int8Array | Uint8Array;

export interface JsKernel {
  readonly kernel: Kernel;
  readonly source: string;
  readonly path: "scalar" | "simt";
  /** Typed-array views of the bindings in the order the code wants them; make once per binding set, reuse. */
  bind(bindings: JsBinding[]): View[];
  /** Runs every workgroup of the grid (the kernel's own grid unless one is given). Throws JsKernelFault. */
  run(views: View[], grid?: [number, number, number]): void;
}

const CTORS: Record<ViewClass, new (b: ArrayBufferLike, o: number, n: number) => View> = {
  Float32Array, Uint16Array, Int16Array, Int32Array, Uint32Array, Int8Array, Uint8Array,
};
const BYTES: Record<ViewClass, number> = {
  Float32Array: 4, Uint16Array: 2, Int16Array: 2, Int32Array: 4, Uint32Array: 4, Int8Array: 1, Uint8Array: 1,
};

function exprUsesSubgroup(e: Expr): boolean {
  switch (e.k) {
    case "subgroup": case "shuffle": return true;
    case "un": case "cast": case "bitcast": return exprUsesSubgroup(e.a);
    case "bin": return exprUsesSubgroup(e.a) || exprUsesSubgroup(e.b);
    case "fma": case "select": return exprUsesSubgroup(e.a) || exprUsesSubgroup(e.b) ||
      exprUsesSubgroup(e.k === "fma" ? e.c : e.c);
    case "load": case "sload": return exprUsesSubgroup(e.index);
    case "pack2": return exprUsesSubgroup(e.a) || exprUsesSubgroup(e.b);
    default: return false;
  }
}
function scan(body: Stmt[], acc: { barrier: boolean; subgroup: boolean }): void {
  for (const s of body) {
    if (s.k === "barrier") acc.barrier = true;
    for (const e of stmtExprs(s)) if (exprUsesSubgroup(e)) acc.subgroup = true;
    if (s.k === "for") scan(s.body, acc);
    if (s.k === "if") {
      scan(s.then, acc);
      scan(s.else, acc);
    }
  }
}

/** Chooses the code shape: scalar when no schedule can tell invocations apart, else lockstep. */
export function pathOf(k: Kernel, subgroupSize: number): "scalar" | "simt" {
  const u = { barrier: false, subgroup: false };
  scan(k.body, u);
  const wg = k.workgroup[0] * k.workgroup[1] * k.workgroup[2];
  if (wg === 1) return "scalar";
  if (u.barrier || k.uses.mma || k.uses.staging || k.uses.coop) return "simt";
  if (u.subgroup && subgroupSize > 1) return "simt";
  return "scalar";
}

type RunFn = (v: View[], nx: number, ny: number, nz: number) => void;
/**
 * Functions made from a source text, shared by every kernel of that text in the process (other devices, engines,
 * recompiled programs): V8 optimizes a big kernel once, not once per copy. Sharing is safe because a run is
 * synchronous and leaves nothing a later run reads (shared memory and lane arrays are written before read).
 * The least recently used go past COMPILED_MAX.
 */
const COMPILED = new Map<string, RunFn>();
const COMPILED_MAX = 512;

/** Renders `k` for the CPU. */
export function renderJs(k: Kernel, opts: JsRenderOptions): JsKernel {
  const sg = opts.subgroupSize;
  if (!Number.isInteger(sg) || sg < 1) throw new KernelError(`${k.name}: subgroup size ${sg}`);
  const path = opts.forceSimt ? "simt" : pathOf(k, sg);
  const simt = path === "simt";
  // V8 compiles a function of thousands of statements for seconds; unrolling buys a CPU nothing.
  const g = new Gen(simt || opts.roll === false ? k : rollLoops(k), simt, sg, opts.debug ?? false);
  const [wx, wy, wz] = k.workgroup;

  // Generate the body first: it discovers the views, variables and temporaries the code needs.
  g.block(g.k.body);
  const body = g.out.splice(0);
  const views = g.viewList();
  const src: string[] = [
    `"use strict";`,
    `const fr = Math.fround;
const { h16, H2F, BF2F, f2h, f2bf, toI32, toU32, bitsU, bitsI, fromBits, mma16816, wgmma, coopLoad, coopMad, coopStore, pack2, cpWait, ldsm, dot4, Fault } = RT;`,
    `const K = ${JSON.stringify(k.name)};`,
    `function fail(code) { throw new Fault(K, code); }`,
    `function ck(i, n, what, align) { if (!(i >= 0 && i < n) || i % align !== 0) throw new Fault(K, 0, "access " + what + "[" + i + "] outside 0.." + (n - 1) + (align > 1 ? " or not aligned to " + align : "")); return i; }`,
  ];
  for (const s of k.shared) src.push(`const S_${s.name} = new ${sharedClass(s)}(${s.count});`);
  if (simt) {
    const n = wx * wy * wz;
    src.push(`const N = ${n};`);
    src.push(`const LX = new Uint32Array(N), LY = new Uint32Array(N), LZ = new Uint32Array(N), LIN = new Uint32Array(N), LANE = new Uint32Array(N);`);
    src.push(`for (let l = 0; l < N; l++) { LX[l] = l % ${wx}; LY[l] = ((l / ${wx}) | 0) % ${wy}; LZ[l] = (l / ${wx * wy}) | 0; LIN[l] = l; LANE[l] = l % ${sg}; }`);
    src.push(`const M0 = new Uint8Array(N), R = new Uint8Array(N);`);
    src.push(`function bar(m) { let n = 0; for (let l = 0; l < N; l++) n += m[l]; if (n !== 0 && n !== N) throw new Fault(K, 0, "barrier reached by " + n + " of " + N + " invocations (returned or divergent)"); }`);
    for (const [name, t] of g.varDecls()) src.push(`const ${name} = ${t === "bool" ? "new Array(N).fill(false)" : `new ${LANE_ARRAY[t]}(N)`};`);
    src.push(...g.head);
  }
  // The work sits in a function called once per invocation (scalar) or workgroup (simt): called many times,
  // it is optimized as a whole, where one big grid loop would only get on-stack replacement of inner loops.
  const vlist = views.map((v) => v.name).join(", ");
  const params = `${vlist}${vlist ? ", " : ""}wx, wy, wz, NX, NY, NZ`;
  if (simt) {
    // copies a workgroup never waited for must not land in the next one's shared memory
    const cp = k.uses.staging ? [`  CPQ.open = []; CPQ.closed = [];`] : [];
    if (k.uses.staging) src.push(`const CPQ = { open: [], closed: [] };`);
    src.push(`function group(${params}) {`, `  M0.fill(1); R.fill(0);`, ...cp, ...body, `}`);
  } else {
    src.push(`function inv(${params}, lx, ly, lz) {`);
    const decls = g.varDecls().map(([n, t]) => `${n} = ${t === "bool" ? "false" : "0"}`);
    if (decls.length) src.push(`  let ${decls.join(", ")};`);
    src.push(...body, `}`);
  }
  src.push(`return function run(V, NX, NY, NZ) {`);
  views.forEach((v, i) => src.push(`  const ${v.name} = V[${i}];`));
  src.push(`  for (let wz = 0; wz < NZ; wz++) for (let wy = 0; wy < NY; wy++) for (let wx = 0; wx < NX; wx++) {`);
  if (simt) {
    src.push(`    group(${params});`);
  } else {
    const loops = [`for (let lz = 0; lz < ${wz}; lz++)`, `for (let ly = 0; ly < ${wy}; ly++)`, `for (let lx = 0; lx < ${wx}; lx++)`]
      .filter((_, i) => [wz, wy, wx][i] > 1);
    const args = `${params}, ${wx > 1 ? "lx" : "0"}, ${wy > 1 ? "ly" : "0"}, ${wz > 1 ? "lz" : "0"}`;
    src.push(`    ${loops.join(" ")} inv(${args});`);
  }
  src.push(`  }`);
  src.push(`};`);
  const source = src.join("\n");

  let fn = COMPILED.get(source);
  if (fn) { // most recently used last
    COMPILED.delete(source);
  } else {
    try {
      fn = new Function("RT", source)({ ...rt, Fault: rt.JsKernelFault }) as RunFn;
    } catch (e) {
      throw new KernelError(`${k.name}: generated JavaScript does not compile: ${(e as Error).message}\n${source}`);
    }
    if (COMPILED.size >= COMPILED_MAX) COMPILED.delete(COMPILED.keys().next().value!);
  }
  COMPILED.set(source, fn);
  const bind = (bindings: JsBinding[]): View[] => {
    if (bindings.length !== k.buffers.length) {
      throw new KernelError(`${k.name}: ${bindings.length} bindings for ${k.buffers.length} buffers`);
    }
    return views.map(({ binding, cls }) => {
      const b = bindings[binding];
      const off = b.offset ?? 0, bytes = b.bytes ?? b.buffer.byteLength - off;
      const size = BYTES[cls];
      if (off % size !== 0) throw new KernelError(`${k.name}: binding ${binding} offset ${off} not aligned for ${cls}`);
      if (off + bytes > b.buffer.byteLength) throw new KernelError(`${k.name}: binding ${binding} past its buffer`);
      return new CTORS[cls](b.buffer, off, Math.floor(bytes / size));
    });
  };
  return {
    kernel: k,
    source,
    path,
    bind,
    run(v, grid = k.grid) {
      fn(v, grid[0], grid[1], grid[2]);
    },
  };
}

function sharedClass(s: Shared): string {
  return LANE_ARRAY[s.t];
}
