// Loops unrolled before rendering, as the PTX renderer unrolls them: a loop with constant bounds whose unroll
// hint covers its trip count (at most 256 trips) becomes its body once per trip, each copy after an
// assignment of that trip's index. SPIR-V's Unroll loop control is only a hint a driver may ignore and WGSL has
// none, so without this a split-K combine's 32 independent loads would go one L2 round trip at a time.
import type { Expr, Kernel, Stmt } from "../ir.ts";

const MAX_TRIPS = 256;

/** `kernel` with every fully-unrollable loop unrolled (the same object when there is none). */
export function unrollLoops(kernel: Kernel): Kernel {
  let changed = false;
  const walk = (body: Stmt[]): Stmt[] => {
    const out = body.flatMap((s): Stmt[] => {
      if (s.k === "if") {
        const then = walk(s.then), otherwise = walk(s.else);
        return then === s.then && otherwise === s.else ? [s] : [{ ...s, then, else: otherwise }];
      }
      if (s.k !== "for") return [s];
      const inner = walk(s.body);
      const trips = constTrips(s.start, s.end, s.step);
      if (trips === undefined || Math.max(1, Math.floor(s.unroll)) < trips || trips > MAX_TRIPS) {
        return inner === s.body ? [s] : [{ ...s, body: inner }];
      }
      changed = true;
      const start = (s.start as { v: number }).v;
      return Array.from({ length: trips }, (_, j): Stmt[] => [
        { k: "assign", v: s.v, e: { k: "const", t: s.v.t, v: start + j * s.step } },
        ...inner,
      ]).flat();
    });
    return out.length === body.length && out.every((s, i) => s === body[i]) ? body : out;
  };
  const body = walk(kernel.body);
  return changed ? { ...kernel, body } : kernel;
}

/** Trip count of `for (v = start; v < end; v += step)` when both bounds are constants. */
function constTrips(start: Expr, end: Expr, step: number): number | undefined {
  if (start.k !== "const" || end.k !== "const" || !(step > 0)) return undefined;
  return Math.max(0, Math.ceil((end.v - start.v) / step));
}
