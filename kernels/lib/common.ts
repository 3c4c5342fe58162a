// Shared pieces of the kernel library: how invocations are grouped onto rows for each target, grids that
// respect the per-dimension workgroup limits, cross-lane reductions (subgroup or shared-memory tree), and
// and the weight layouts (f32/f16/bf16 and GGUF blocks, dequantized by dequant.ts).
import { type EType, type KernelBuilder, type ReduceOp, type Shared, u32, type Val } from "../ir.ts";
import type { Caps } from "../target.ts";
import { isQType, QLAYOUT, type QType } from "./dequant.ts";

/** Float storage types a kernel reads or writes as f32. */
export type FType = "f32" | "f16" | "bf16";
/** Weight layouts a matmul/gemv/gather reads: plain floats or GGUF blocks (dequant.ts). */
export type WType = FType | QType;
/** Integer types of device-side indices (token ids, positions, slot map entries). */
export type IType = "u32" | "i32";

/** Storage element type a binding of this layout is declared with (block types are raw bytes). */
export function elemOf(w: WType): EType {
  return isQType(w) ? "u8" : w;
}
/** Bytes of a [rows, cols] tensor in layout w. */
export function bytesOf(w: WType, rows: number, cols: number): number {
  if (isQType(w)) {
    const l = QLAYOUT[w];
    if (cols % l.elems !== 0) throw new RangeError(`${w} rows need a multiple of ${l.elems} columns, got ${cols}`);
    return rows * (cols / l.elems) * l.bytes;
  }
  return rows * cols * (w === "f32" ? 4 : 2);
}

/**
 * A team is the set of invocations that cooperate on one row: one subgroup where subgroups exist (several
 * rows per workgroup, no barriers), several subgroups of one workgroup for long rows (`wide`: subgroup
 * reductions combined through shared memory), else a power-of-two workgroup reducing through shared memory
 * (one row per workgroup). On a target with one-lane subgroups (the JS device) a team is one invocation.
 */
export interface Team {
  lanes: number;
  /** Rows per workgroup. */
  rows: number;
  /** Invocations per workgroup (lanes * rows). */
  size: number;
  /** Reduces through a shared-memory tree (no subgroups). */
  shared: boolean;
  /** Subgroups per row (> 1 for a wide team). */
  sgs: number;
}
export function team(caps: Caps, opts: { maxLanes?: number; wg?: number; rows?: number; wide?: number } = {}): Team {
  const wg = Math.min(opts.wg ?? 256, caps.maxWorkgroupSize);
  if (caps.subgroups && caps.subgroupSize <= wg) {
    const lanes = caps.subgroupSize;
    if (lanes > 1 && opts.wide && opts.wide > lanes) {
      let sgs = 1;
      while (sgs * 2 * lanes <= Math.min(opts.wide, caps.maxWorkgroupSize)) sgs *= 2;
      if (sgs > 1) return { lanes: sgs * lanes, rows: 1, size: sgs * lanes, shared: false, sgs };
    }
    // no more rows per workgroup than there are rows (8 heads should not launch 256-row workgroups)
    const rows = Math.max(1, Math.min(Math.floor(wg / lanes), opts.rows ?? Infinity));
    return { lanes, rows, size: lanes * rows, shared: false, sgs: 1 };
  }
  let lanes = 1;
  while (lanes * 2 <= Math.min(opts.maxLanes ?? 128, caps.maxWorkgroupSize)) lanes *= 2;
  return { lanes, rows: 1, size: lanes, shared: lanes > 1, sgs: 1 };
}

/** A grid of `count` workgroups laid out within the per-dimension limits (x first, then y, then z). */
export function gridFor(caps: Caps, count: number): [number, number, number] {
  const [mx, my] = caps.maxWorkgroupsPerDim;
  const gx = Math.max(1, Math.min(count, mx));
  const rest = Math.ceil(count / gx);
  const gy = Math.max(1, Math.min(rest, my));
  const gz = Math.ceil(rest / gy);
  if (gz > caps.maxWorkgroupsPerDim[2]) throw new RangeError(`${count} workgroups exceed the target's grid`);
  return [gx, gy, gz];
}
/** A u32 index from a u32 or i32 buffer value (negative i32 becomes >= 2^31, failing any `< bound` check). */
export function asIndex(v: Val): Val {
  return v.t === "i32" ? v.bitcast("u32") : v;
}

/**
 * `count` items spread over a workgroup of `threads` invocations (`t` the invocation's index): round r gives
 * item e = t + r·threads, its last round guarded where it is partial. The cooperative staging of the tiled kernels.
 */
export function eachItem(b: KernelBuilder, t: Val, threads: number, count: number, body: (e: Val, r: number) => void): void {
  for (let r = 0; r * threads < count; r++) {
    const e = r ? t.add(r * threads) : t;
    if ((r + 1) * threads > count) b.if(e.lt(count), () => body(e, r));
    else body(e, r);
  }
}

/** The linear workgroup index of a grid made by gridFor. */
export function wgIndex(b: KernelBuilder, grid: [number, number, number]): Val {
  let i = b.wgid.x;
  if (grid[1] > 1 || grid[2] > 1) i = i.add(b.wgid.y.mul(grid[0]));
  if (grid[2] > 1) i = i.add(b.wgid.z.mul(grid[0] * grid[1]));
  return i;
}

/** Lane within the team and the team's row within the workgroup. */
export function teamIds(b: KernelBuilder, t: Team): { lane: Val; local: Val } {
  if (t.shared || t.sgs > 1) return { lane: b.lid.x, local: u32(0) };
  if (t.lanes === 1) return { lane: u32(0), local: b.lid.x };
  return { lane: b.builtin("lane"), local: b.builtin("sgid") };
}

/** Row handled by this team: workgroup index * rows per workgroup + local row. */
export function teamRow(b: KernelBuilder, t: Team, grid: [number, number, number]): { lane: Val; row: Val } {
  const { lane, local } = teamIds(b, t);
  const wg = wgIndex(b, grid);
  const row = t.rows === 1 ? wg : wg.mul(t.rows).add(local);
  return { lane, row: b.let(row, "u32", "row") };
}
/** Grid and workgroup shape for `rows` team rows. */
export function teamGrid(caps: Caps, t: Team, rows: number): [number, number, number] {
  return gridFor(caps, Math.ceil(rows / t.rows));
}

const scratch = new WeakMap<KernelBuilder, Map<string, Shared>>();
export function sharedFor(b: KernelBuilder, t: Team, ty: "f32" | "i32" | "u32", slot = 0): Shared {
  let m = scratch.get(b);
  if (!m) scratch.set(b, m = new Map());
  const key = `${ty}${slot}`;
  let s = m.get(key);
  if (!s) m.set(key, s = b.shared(`red_${key}`, ty, t.shared ? t.lanes : t.sgs));
  return s;
}

function combine(op: ReduceOp, a: Val, b: Val): Val {
  return op === "add" ? a.add(b) : op === "max" ? a.max(b) : a.min(b);
}

/**
 * Reduces `v` over the team; every lane gets the result. The shared-memory variant has barriers, so every
 * invocation of the workgroup must call it (teams of one row per workgroup return only as a whole).
 */
export function teamReduce(b: KernelBuilder, t: Team, op: ReduceOp, v: Val): Val {
  if (t.lanes === 1) return v;
  if (t.sgs > 1) { // subgroups reduce, then their results meet in shared memory
    if (v.t !== "f32" && v.t !== "i32" && v.t !== "u32") throw new RangeError(`team reduction of ${v.t}`);
    const s = sharedFor(b, t, v.t);
    const r = b.let(b.subgroupReduce(op, v), v.t, "red");
    b.if(b.builtin("lane").eq(u32(0)), () => b.sstore(s, b.builtin("sgid"), r));
    b.barrier();
    let acc = b.sload(s, 0);
    for (let w = 1; w < t.sgs; w++) acc = combine(op, acc, b.sload(s, w));
    const out = b.let(acc, v.t, "red");
    b.barrier(); // the next reduction may overwrite the scratch
    return out;
  }
  if (!t.shared) return b.let(b.subgroupReduce(op, v), v.t, "red");
  if (v.t !== "f32" && v.t !== "i32" && v.t !== "u32") throw new RangeError(`team reduction of ${v.t}`);
  const s = sharedFor(b, t, v.t);
  const lane = b.lid.x;
  b.sstore(s, lane, v);
  b.barrier();
  for (let h = t.lanes / 2; h >= 1; h /= 2) {
    b.if(lane.lt(h), () => b.sstore(s, lane, combine(op, b.sload(s, lane), b.sload(s, lane.add(h)))));
    b.barrier();
  }
  const r = b.let(b.sload(s, 0), s.t, "red");
  b.barrier(); // the next reduction may overwrite the scratch
  return r;
}

/** Largest vector width (elements, power of two, <= 16 bytes) whose alignment `count` elements keep. */
export function vecWidth(esize: number, count: number): number {
  let v = Math.max(1, Math.floor(16 / esize));
  while (v > 1 && count % v !== 0) v /= 2;
  return v;
}

/** Sum of values as a balanced tree of adds (short dependency chains, a fixed order). */
export function pairwise(v: Val[]): Val {
  let xs = v;
  while (xs.length > 1) {
    const next: Val[] = [];
    for (let i = 0; i < xs.length; i += 2) next.push(i + 1 < xs.length ? xs[i].add(xs[i + 1]) : xs[i]);
    xs = next;
  }
  return xs[0];
}
