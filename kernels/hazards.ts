// Which steps of a recorded list need the device to wait for the steps before them: a step waits (a barrier
// before it) only where it touches bytes that a step since the last barrier wrote (read after write, write
// after write) or writes bytes such a step reads (write after read). Steps without such an overlap may run
// together (the recordings' barriers; kernels/lower/siblings.ts's launches of two kernels as one). Backend-neutral: a span names its buffer by any identity (a VkBuffer handle, a device address's
// allocation), so a backend passes what tells its allocations apart.

/** Bytes [lo, hi) of one buffer. */
export interface Span {
  buffer: unknown;
  lo: number;
  hi: number;
}
/** What one step reads and writes. */
export interface StepAccess {
  reads: Span[];
  writes: Span[];
}

const overlaps = (a: readonly Span[], b: readonly Span[]) =>
  a.some((x) => b.some((y) => x.buffer === y.buffer && x.lo < y.hi && y.lo < x.hi));

/** Whether `b` touches bytes `a` writes or writes bytes `a` reads: the two may not run together. */
export function conflicts(a: StepAccess, b: StepAccess): boolean {
  return overlaps(b.reads, a.writes) || overlaps(b.writes, a.writes) || overlaps(b.writes, a.reads);
}

/** For each step, whether it needs a barrier before it (never the first; every other one when `all`). */
export function barriersBefore(steps: readonly StepAccess[], all = false): boolean[] {
  const reads: Span[] = [], writes: Span[] = [];
  return steps.map((a, i) => {
    const need = i > 0 && (all || conflicts({ reads, writes }, a));
    if (need) reads.length = writes.length = 0;
    reads.push(...a.reads);
    writes.push(...a.writes);
    return need;
  });
}
