// Data movement indexed by device-side values: update-slice (write rows of K/V at the slot's position),
// scatter (rows through an index buffer, e.g. a paged WriteMap), gather (embedding rows by token id).
// Every index read from a buffer is checked, so a bad slot faults with a distinct code instead of writing
// somewhere else.
import { type EType, type Kernel, KernelBuilder, KernelError, type Val } from "../ir.ts";
import type { Caps } from "../target.ts";
import { FAULT } from "./codes.ts";
import { asIndex, elemOf, gridFor, type IType, wgIndex, type WType } from "./common.ts";
import { chunkValues, dequantChunk, isQType, QLAYOUT, qWords } from "./dequant.ts";

const WG = 64;

/** One invocation per `per` consecutive elements of `total`; returns the first element's index. */
function elements(b: KernelBuilder, total: number, per: number, grid: [number, number, number], wg: number): Val {
  const idx = b.let(wgIndex(b, grid).mul(wg).add(b.lid.x), "u32", "idx");
  if (grid[0] * grid[1] * grid[2] * wg * per > total) b.if(idx.ge(total / per), () => b.return());
  return per === 1 ? idx : b.let(idx.mul(per), "u32", "e");
}
function layout(caps: Caps, total: number, per: number): { wg: number; grid: [number, number, number] } {
  const wg = Math.min(WG, caps.maxWorkgroupSize);
  return { wg, grid: gridFor(caps, Math.ceil(total / per / wg)) };
}
function perOf(width: number, types: EType[]): number {
  return width % 4 === 0 && types.every((t) => t !== "i8" && t !== "u8") ? 4 : 1;
}
function copyN(b: KernelBuilder, src: ReturnType<KernelBuilder["buffer"]>, si: Val, dst: typeof src, di: Val, per: number): void {
  if (per > 1) b.storev(dst, di, b.loadv(src, si, per));
  else b.store(dst, di, b.load(src, si));
}
function sameClass(a: EType, b: EType): boolean {
  const f = (t: EType) => t === "f32" || t === "f16" || t === "bf16";
  return f(a) === f(b);
}

export interface UpdateSliceShape {
  rows: number;
  width: number;
  cap: number;
  src?: EType;
  dst?: EType;
  pos?: IType;
  name?: string;
}
/**
 * dst[pos + r, :] = src[r, :] for r < rows (the K/V cache write at the slot's position).
 * Bindings: src [rows, width] (r); pos [1] u32|i32 (r); dst [cap, width] (rw).
 * Faults FAULT.UPDATE_POS when pos + rows > cap (or pos < 0).
 */
export function updateSlice(caps: Caps, s: UpdateSliceShape): Kernel {
  const { rows, width, cap } = s;
  const st = s.src ?? "f32", dt = s.dst ?? "f32", pt = s.pos ?? "u32";
  if (rows > cap || cap * width >= 2 ** 32) throw new KernelError(`update_slice: ${rows} rows into cap ${cap}`);
  if (!sameClass(st, dt)) throw new KernelError(`update_slice: ${st} -> ${dt}`);
  const total = rows * width, per = perOf(width, [st, dt]);
  const { wg, grid } = layout(caps, total, per);
  const b = new KernelBuilder(s.name ?? `update_slice_r${rows}_w${width}_c${cap}_${st}_${dt}_${pt}`, { workgroup: wg, grid });
  const src = b.buffer("src", st, "r");
  const P = b.buffer("pos", pt, "r");
  const dst = b.buffer("dst", dt, "rw");
  const pos = b.let(asIndex(b.load(P, 0)), "u32", "pos");
  b.check(pos.le(cap - rows), FAULT.UPDATE_POS);
  const e = elements(b, total, per, grid, wg);
  copyN(b, src, e, dst, pos.mul(width).add(e), per);
  return b.build();
}

export interface ScatterShape {
  rows: number;
  width: number;
  cap: number;
  src?: EType;
  dst?: EType;
  index?: IType;
  name?: string;
}
/**
 * dst[idx[r], :] = src[r, :] for r < rows (paged KV writes through a WriteMap).
 * Bindings: src [rows, width] (r); idx [rows] u32|i32 (r); dst [cap, width] (rw).
 * Faults FAULT.SCATTER_INDEX when an index is >= cap (or negative).
 */
export function scatter(caps: Caps, s: ScatterShape): Kernel {
  const { rows, width, cap } = s;
  const st = s.src ?? "f32", dt = s.dst ?? "f32", it = s.index ?? "u32";
  if (cap * width >= 2 ** 32 || rows * width >= 2 ** 32) throw new KernelError("scatter: indices exceed 32 bits");
  if (!sameClass(st, dt)) throw new KernelError(`scatter: ${st} -> ${dt}`);
  const total = rows * width, per = perOf(width, [st, dt]);
  const { wg, grid } = layout(caps, total, per);
  const b = new KernelBuilder(s.name ?? `scatter_r${rows}_w${width}_c${cap}_${st}_${dt}_${it}`, { workgroup: wg, grid });
  const src = b.buffer("src", st, "r");
  const I = b.buffer("idx", it, "r");
  const dst = b.buffer("dst", dt, "rw");
  const e = elements(b, total, per, grid, wg);
  const r = e.div(width);
  const to = b.let(asIndex(b.load(I, r)), "u32", "to");
  b.check(to.lt(cap), FAULT.SCATTER_INDEX);
  copyN(b, src, e, dst, to.mul(width).add(e.mod(width)), per);
  return b.build();
}

export interface GatherShape {
  rows: number;
  width: number;
  /** Rows of the table. */
  vocab: number;
  table: WType;
  ids?: IType;
  name?: string;
}
/**
 * out[r, :] = table[ids[r], :] as f32 (embedding lookup; block rows are dequantized in place, one invocation
 * per chunk of a block, bit-exact with ggml's dequantization).
 * Bindings: table [vocab, width] in layout `table` (r); ids [rows] u32|i32 (r); out f32 [rows, width] (w).
 * Faults FAULT.GATHER_ID when an id is >= vocab (or negative).
 */
export function gather(caps: Caps, s: GatherShape): Kernel {
  const { rows, width, vocab, table } = s;
  const it = s.ids ?? "u32";
  const q = isQType(table) ? QLAYOUT[table] : undefined;
  if (q && width % q.elems !== 0) throw new KernelError(`gather ${table}: width ${width} not a multiple of ${q.elems}`);
  if (vocab * width >= 2 ** 32) throw new KernelError("gather: indices exceed 32 bits");
  const perRow = q ? (width / q.elems) * q.chunks : width;
  const total = rows * perRow, per = q ? 1 : perOf(width, [elemOf(table)]);
  const { wg, grid } = layout(caps, total, per);
  const b = new KernelBuilder(s.name ?? `gather_${table}_r${rows}_w${width}_v${vocab}_${it}`, { workgroup: wg, grid });
  const T = b.buffer("table", elemOf(table), "r");
  const I = b.buffer("ids", it, "r");
  const out = b.buffer("out", "f32", "w");
  const e = elements(b, total, per, grid, wg);
  const r = e.div(perRow), j = b.let(e.mod(perRow), "u32", "j");
  const id = b.let(asIndex(b.load(I, r)), "u32", "id");
  b.check(id.lt(vocab), FAULT.GATHER_ID);
  if (!q || !isQType(table)) {
    const at = id.mul(width).add(j);
    if (per > 1) b.storev(out, e, b.loadv(T, at, per));
    else b.store(out, e, b.load(T, at));
  } else {
    // j = block within the row * chunks + chunk
    const nb = width / q.elems;
    const blk = b.let(j.div(q.chunks), "u32", "blk");
    const base = b.let(id.mul(nb).add(blk).mul(qWords(table)), "u32", "base");
    const ch = dequantChunk(b, T, table, base, j.mod(q.chunks));
    const o = b.let(r.mul(width).add(blk.mul(q.elems)).add(ch.at), "u32", "o");
    for (const { off, v } of chunkValues(ch, b)) b.store(out, off ? o.add(off) : o, v);
  }
  return b.build();
}
