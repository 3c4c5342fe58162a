// The shape every fuzz case file (`tests/fuzz/<what>_cases.ts`, exporting `cases`) shares, and the seeded
// random source the runner hands to `setup`. A case writes its inputs under a fresh directory and says how
// the command line must end: the exit code and the one stderr line.

export interface FuzzCase {
  /** Unique, e.g. "gguf/shape/ffn-171". */
  name: string;
  /** The class it covers, e.g. "12.1 shape vs metadata". */
  cls: string;
  /** Writes the inputs under `dir` (a fresh temp dir) with the seeded `rng` (uniform [0,1)); returns the CLI args after `poot`. */
  setup(dir: string, rng: () => number): string[] | Promise<string[]>;
  stdin?: string;
  /** Expected exit code (2 = bad command line, 1 = bad input/model). */
  exit: number;
  /** The one stderr line must match this. */
  message: RegExp;
  /** Optional: the typed error the library throws for the same input (its class name), for in-process tables. */
  error?: string;
  /**
   * Run with XDG_RUNTIME_DIR unset (else it is a directory inside the case's): poot then makes a private runtime
   * dir under TMPDIR before it opens a backend that probes Mesa (cli/main.ts), so a case that must fail before
   * any backend opens shows such a dir as a write.
   */
  noRuntimeDir?: boolean;
}

/** mulberry32, the tests' seeded uniform [0,1) source (the same sequence on every runtime). */
import { rng as seeded } from "../graph/random_graph.ts";
export { seeded };

/** The run's seed: POOT_FUZZ_SEED (a number, or "random"), else a fixed default so CI repeats itself. */
export function fuzzSeed(): number {
  const env = (globalThis as { process?: { env: Record<string, string | undefined> } }).process?.env ?? {};
  const s = env.POOT_FUZZ_SEED;
  if (s === "random") return Math.floor(Math.random() * 2 ** 32);
  if (s !== undefined && s !== "" && Number.isInteger(Number(s))) return Number(s) >>> 0;
  return 12;
}

/** A case's own stream: the run's seed mixed with the case name, so adding a case changes no other. */
export function caseRng(seed: number, name: string): () => number {
  let h = seed ^ 0x9e3779b9;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193);
  return seeded(h);
}

/** An integer in [lo, hi] from `rng`. */
export function pick(rng: () => number, lo: number, hi: number): number {
  return lo + Math.floor(rng() * (hi - lo + 1));
}
