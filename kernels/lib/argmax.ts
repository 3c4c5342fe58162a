// Argmax of long rows (a vocab of logits) in two dispatches: many workgroups each reduce a contiguous chunk
// of a row to one candidate (value, index), then one team per row merges the candidates. One workgroup per
// row (rows.ts argmax) leaves a wide GPU with one busy SM; this spreads the read over all of them. Within a
// chunk a lane visits its elements in increasing order and keeps the first of equals, and candidates merge
// by argmaxBetter (larger value, then smaller index; the first NaN beats everything), so the result is the
// single-pass one.
import { type Buffer, f32, type Kernel, KernelBuilder, KernelError, u32, type Val } from "../ir.ts";
import type { Caps } from "../target.ts";
import { gridFor, type IType, type Team, team, wgIndex } from "./common.ts";
import { argmaxMerge } from "./rows.ts";

/** Chunk length (a multiple of 4 elements) and chunk count for rows of n: about 1024 elements a chunk, at most 256 chunks. */
export function argmaxChunks(n: number): { chunk: number; parts: number } {
  const chunk = Math.ceil(Math.max(1024, n / 256) / 4) * 4;
  return { chunk, parts: Math.ceil(n / chunk) };
}

/**
 * Phase 1: workgroup (row, c) reduces x[row, c*chunk .. min(n, (c+1)*chunk)).
 * Bindings: x f32 [rows, n] (r); part u32 [rows, parts, 2] (w): value bits, index in the row (n: none).
 */
export function argmaxPartial(caps: Caps, s: { rows: number; n: number; name?: string }): Kernel {
  return argmaxKernel(caps, s);
}

/**
 * argmaxPartial and argmaxCombine in one dispatch (for targets where a dispatch costs more than the merge: see
 * lib.attentionFused): each workgroup writes its candidate, then after a device barrier counts itself done on
 * its row's counter; the workgroup that counts last merges the row's candidates in its first subgroup (the
 * result is the same: argmax's order of equals is fixed by index) and zeroes the counter.
 * Bindings: x f32 [rows, n] (r); part u32 [rows, parts, 2] then u32 counters [rows], all zero before the first
 * dispatch (rw: State); out [rows] u32|i32 (w). Needs a grid of exactly rows * parts workgroups and subgroups
 * (argmaxFusable).
 */
export function argmaxFused(caps: Caps, s: { rows: number; n: number; out?: IType; name?: string }): Kernel {
  const why = argmaxFusable(caps, s);
  if (why) throw new KernelError(`argmax: no fused merge: ${why}`);
  return argmaxKernel(caps, s, s.out ?? "u32");
}
/** Why argmaxFused cannot serve the shape on these caps, or "" (it can). */
export function argmaxFusable(caps: Caps, s: { rows: number; n: number }): string {
  if (!caps.subgroups || caps.subgroupSize < 2) return "no subgroups";
  const items = s.rows * argmaxChunks(s.n).parts, grid = gridFor(caps, items);
  if (grid[0] * grid[1] * grid[2] !== items) return `${items} chunks do not fill the grid`;
  return "";
}
/** Bytes of argmaxFused's part binding: the candidates, then a counter per row. */
export function argmaxFusedBytes(s: { rows: number; n: number }): number {
  return (s.rows * argmaxChunks(s.n).parts * 2 + s.rows) * 4;
}

function argmaxKernel(caps: Caps, s: { rows: number; n: number; name?: string }, fused?: IType): Kernel {
  const { rows, n } = s;
  if (!(rows >= 1 && n >= 1) || rows * n >= 2 ** 32) throw new KernelError(`argmax_partial: bad shape ${rows}x${n}`);
  const { chunk, parts } = argmaxChunks(n);
  const t = team(caps, { rows: 1, wide: 256 });
  const items = rows * parts;
  const grid = gridFor(caps, items);
  const name = fused ? `argmax_fused_r${rows}_n${n}_p${parts}_${fused}` : `argmax_partial_r${rows}_n${n}_p${parts}`;
  const b = new KernelBuilder(s.name ?? name, { workgroup: t.size, grid });
  const x = b.buffer("x", "f32", "r");
  const part = b.buffer("part", "u32", fused ? "rw" : "w");
  const out = fused ? b.buffer("out", fused, "w") : undefined;
  const w = b.let(wgIndex(b, grid), "u32", "item");
  if (grid[0] * grid[1] * grid[2] > items) b.if(w.ge(items), () => b.return());
  const lane = t.lanes === 1 ? u32(0) : b.lid.x;
  const row = rows === 1 ? u32(0) : b.let(w.div(parts), "u32", "row");
  const c = rows === 1 ? w : b.let(w.mod(parts), "u32", "c");
  const base = b.let(row.mul(n), "u32", "base");
  const start = b.let(c.mul(chunk), "u32", "start");
  const end = b.let(start.add(chunk).min(n), "u32", "end");
  const vw = n % 4 === 0 ? 4 : 1; // chunk is a multiple of 4, so with n every vector stays inside its chunk
  const bv = b.let(f32(-Infinity), "f32", "bv");
  const bi = b.let(u32(n), "u32", "bi");
  const visit = (v: Val, i: Val) => {
    const take = b.let(bi.ge(n).or(v.ne(v).and(bv.eq(bv))).or(v.gt(bv)), "bool", "take"); // first, first NaN, or larger
    b.set(bv, take.select(v, bv));
    b.set(bi, take.select(i, bi));
  };
  const trips = Math.ceil(chunk / (t.lanes * vw));
  b.for(start.add(lane.mul(vw)), end, t.lanes * vw, (i) => {
    const vs = vw > 1 ? b.loadv(x, base.add(i), vw) : [b.load(x, base.add(i))];
    vs.forEach((v, e) => visit(v, e ? i.add(e) : i));
  }, { unroll: Math.min(4, trips) });
  argmaxMerge(b, t, lane, bv, bi, n);
  const write = () => {
    const at = b.let(w.mul(2), "u32", "at");
    b.store(part, at, bv.bitcast("u32"));
    b.store(part, at.add(1), bi);
  };
  if (t.lanes === 1) write();
  else b.if(lane.eq(u32(0)), write);
  if (out) {
    // Count this workgroup done (release before, acquire after); the last one's first subgroup merges the
    // row with shuffles only (no barrier inside the branch), as argmaxCombine would.
    const ctr = b.let(row.add(items * 2), "u32", "ctr"), flag = b.shared("last", "u32", 1);
    b.barrier("device");
    b.if(b.lid.x.eq(u32(0)), () => b.sstore(flag, 0, b.atomicFetch(part, ctr, "add", 1).eq(parts - 1).select(u32(1), u32(0))));
    b.barrier("device");
    const sg = caps.subgroupSize;
    b.if(b.sload(flag, 0).eq(u32(1)).and(b.builtin("sgid").eq(u32(0))), () => {
      const one: Team = { lanes: sg, rows: 1, size: sg, shared: false, sgs: 1 }, l = b.builtin("lane");
      const [mv, mi] = mergeParts(b, part, row, l, sg, parts, n);
      argmaxMerge(b, one, l, mv, mi, n);
      b.if(l.eq(u32(0)), () => {
        b.store(out, row, fused === "i32" ? mi.bitcast("i32") : mi);
        b.atomic(part, ctr, "and", 0);
      });
    });
  }
  return b.build();
}

/** A lane's best of the row's candidates lane, lane + step, ... (argmaxCombine's scan): [value, index]. */
function mergeParts(b: KernelBuilder, part: Buffer, row: Val, lane: Val, step: number, parts: number, n: number): [Val, Val] {
  const bv = b.let(f32(-Infinity), "f32", "bv");
  const bi = b.let(u32(n), "u32", "bi");
  b.for(lane, u32(parts), step, (p) => {
    const at = b.let(row.mul(parts).add(p).mul(2), "u32", "at");
    const ov = b.let(b.load(part, at).bitcast("f32"), "f32", "ov");
    const oi = b.let(b.load(part, at.add(1)), "u32", "oi");
    // Candidates of one lane come in increasing chunk order: a later one wins only when strictly better.
    const oNan = ov.ne(ov), mNan = bv.ne(bv);
    const take = b.let(oi.lt(n).and(bi.ge(n).or(oNan.and(mNan.not())).or(mNan.not().and(oNan.not()).and(ov.gt(bv)))), "bool", "take");
    b.set(bv, take.select(ov, bv));
    b.set(bi, take.select(oi, bi));
  });
  return [bv, bi];
}

/**
 * Phase 2: one team per row merges the row's `parts` candidates.
 * Bindings: part u32 [rows, parts, 2] (r); out [rows] u32|i32 (w).
 */
export function argmaxCombine(caps: Caps, s: { rows: number; n: number; out?: IType; name?: string }): Kernel {
  const { rows, n } = s;
  const ot = s.out ?? "u32";
  const { parts } = argmaxChunks(n);
  const t = team(caps, { rows: 1, wide: Math.min(256, Math.max(32, parts)) });
  const grid = gridFor(caps, rows);
  const b = new KernelBuilder(s.name ?? `argmax_combine_r${rows}_n${n}_p${parts}_${ot}`, { workgroup: t.size, grid });
  const part = b.buffer("part", "u32", "r");
  const out = b.buffer("out", ot, "w");
  const row = b.let(wgIndex(b, grid), "u32", "row");
  if (grid[0] * grid[1] * grid[2] > rows) b.if(row.ge(rows), () => b.return());
  const lane = t.lanes === 1 ? u32(0) : b.lid.x;
  const [bv, bi] = mergeParts(b, part, row, lane, t.lanes, parts, n);
  argmaxMerge(b, t, lane, bv, bi, n);
  const write = () => b.store(out, row, ot === "i32" ? bi.bitcast("i32") : bi);
  if (t.lanes === 1) write();
  else b.if(lane.eq(u32(0)), write);
  return b.build();
}
