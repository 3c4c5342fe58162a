// The tests' one seeded generator: mulberry32 (the same sequence on every runtime), uniform in [0, 1).
// Every test that needs random data draws from it, through `rng` or the small `Rng` wrapper below; a seed
// of `Rng` may be a number or a string (hashed with FNV-1a, so a case's name can be its seed).

/** mulberry32 from a 32-bit seed: uniform numbers in [0, 1). */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** FNV-1a of the seed's text (so "7" and 7 are the same seed, and a case's name can be one). */
export function seedOf(seed: number | string): number {
  let h = 2166136261;
  for (const ch of String(seed)) h = Math.imul(h ^ ch.charCodeAt(0), 16777619);
  return h >>> 0;
}

/** The generator with the helpers tests want. */
export class Rng {
  private readonly r: () => number;
  constructor(seed: number | string) {
    this.r = rng(seedOf(seed));
  }
  /** Uniform in [0, 1). */
  next(): number {
    return this.r();
  }
  /** Uniform in [lo, hi). */
  uniform(lo: number, hi: number): number {
    return lo + (hi - lo) * this.r();
  }
  /** An f32 uniform in [lo, hi] (rounded to f32). */
  float(lo: number, hi: number): number {
    return Math.fround(this.uniform(lo, hi));
  }
  /** An integer in [0, a), or in [a, b) when b is given. */
  int(a: number, b?: number): number {
    return b === undefined ? Math.floor(this.r() * a) : a + Math.floor(this.r() * (b - a));
  }
  /** 32 random bits. */
  u32(): number {
    return Math.floor(this.r() * 4294967296) >>> 0;
  }
  f32(n: number, lo = -1, hi = 1): Float32Array {
    const a = new Float32Array(n);
    for (let i = 0; i < n; i++) a[i] = this.uniform(lo, hi);
    return a;
  }
}
