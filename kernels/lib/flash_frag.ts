// The MMA fragment arithmetic both flash attention kernels (flash.ts, flash_staged.ts) share: an f32 pair packed
// as f16 words (hi, and with `split` the lo remainder the hi half lost), operands as [part][word], the product
// over the split parts in one fixed order, and a row's sum over the quad of lanes that hold its columns.
import { type KernelBuilder, un, type Val } from "../ir.ts";

/** f32 pair -> hi (and lo) f16 words. */
export function f16Words(b: KernelBuilder, split: boolean, x0: Val, x1: Val): Val[] {
  const hi = b.let(b.pack2("f16", x0, x1), "u32", "hw");
  if (!split) return [hi];
  const lo = b.pack2("f16", x0.sub(un("f16bits", hi.and(0xffff))), x1.sub(un("f16bits", hi.shr(16))));
  return [hi, b.let(lo, "u32", "lw")];
}

/** [part][word] from per-word f32 pairs. */
export function f16Parts(b: KernelBuilder, split: boolean, pairs: [Val, Val][]): Val[][] {
  const ws = pairs.map(([x0, x1]) => f16Words(b, split, x0, x1));
  return ws[0].map((_, p) => ws.map((w) => w[p]));
}

/**
 * acc + A B over the split parts: lo*hi, hi*lo, then hi*hi where present (a fixed order, so both kernels
 * round alike).
 */
export function mmaSplit(b: KernelBuilder, A: Val[][], B: Val[][], c: Val[]): Val[] {
  let acc = c;
  if (A.length > 1) acc = b.mma("f16", A[1], B[0], acc);
  if (B.length > 1) acc = b.mma("f16", A[0], B[1], acc);
  return b.mma("f16", A[0], B[0], acc);
}

/** Each row's partial sums added over the quad (lanes 4g..4g+3 hold row g's columns): the rows' totals. */
export function quadRowSums(b: KernelBuilder, l: Val[]): Val[] {
  return l.map((x) => {
    let v = x;
    for (const off of [1, 2]) v = b.let(v.add(b.shuffle("xor", v, off)), "f32", "lt");
    return v;
  });
}
