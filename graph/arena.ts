// Offsets for temporaries in one arena buffer: two values share bytes only when their lifetimes are disjoint.
// Greedy by size (largest first), each placed at the lowest aligned offset free over its whole lifetime.

export interface Interval {
  bytes: number;
  /** Index of the first step that writes the value. */
  first: number;
  /** Index of the last step that reads it (>= first). */
  last: number;
}

export interface ArenaLayout {
  offsets: number[];
  bytes: number;
}

export function layoutArena(values: Interval[], align = 256): ArenaLayout {
  const up = (n: number) => Math.ceil(n / align) * align;
  const order = values.map((_, i) => i).sort((a, b) => values[b].bytes - values[a].bytes || values[a].first - values[b].first);
  const placed: { off: number; end: number; v: Interval }[] = [];
  const offsets = new Array<number>(values.length).fill(0);
  let total = 0;
  for (const i of order) {
    const v = values[i];
    const size = up(Math.max(v.bytes, 1));
    const busy = placed
      .filter((p) => p.v.first <= v.last && v.first <= p.v.last)
      .sort((a, b) => a.off - b.off);
    let off = 0;
    for (const p of busy) {
      if (off + size <= p.off) break;
      off = Math.max(off, p.end);
    }
    placed.push({ off, end: off + size, v });
    offsets[i] = off;
    total = Math.max(total, off + size);
  }
  return { offsets, bytes: total };
}
