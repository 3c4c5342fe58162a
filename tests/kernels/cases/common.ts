// What a kernel-library conformance case is (tests/kernels/cases.ts), and the helpers its case files share.
import { bytes } from "../data.ts";
import type { Kernel } from "../../../kernels/ir.ts";
import type { Caps } from "../../../kernels/target.ts";

export interface Expect {
  /** Which binding to read back. */
  binding: number;
  type: "f32" | "f16" | "bf16" | "u32" | "i32";
  want: ArrayLike<number>;
  /** Absent: exact. */
  tol?: { abs: number; rel: number };
  mag?: ArrayLike<number>;
}
export interface KernelCase {
  /** Unique and descriptive, e.g. "matmul q8_0 n=33 k=64 batch=3". */
  name: string;
  make(caps: Caps): Kernel;
  /** Initial bytes of every binding, in binding order (outputs included), each a multiple of 16 bytes. */
  inputs(): Uint8Array[];
  /** The reference results for these inputs. Empty for fault cases. */
  expect(inputs: Uint8Array[]): Expect[];
  /** A fault case: the dispatch must raise KernelFault with this code. */
  fault?: number;
  /** The kernel takes a tuning or a kernel the library would not choose for it (a GemvTune given; the tiled matmul at a few rows). */
  forced?: boolean;
}

export const EPS = 2 ** -24;
export const u32b = (v: number[]) => bytes(Uint32Array.from(v));
export const i32b = (v: number[]) => bytes(Int32Array.from(v));
/** Caches inputs per case so expect() and the run see the same bytes. */
export function memo(f: () => Uint8Array[]): () => Uint8Array[] {
  let v: Uint8Array[] | undefined;
  return () => (v ??= f()).map((b) => b.slice());
}
