// What a model file gives the layers below llm/: named tensors with raw bytes, and the typed roles a graph
// uses to name its constants. Formats (llm/formats) produce a WeightStore; a family produces a WeightMap.
import type { DType } from "./dtype.ts";

/** One tensor of a model file. `shape` is row-major, outermost first (a matrix is [out, in]). */
export interface TensorInfo {
  name: string;
  dtype: DType;
  shape: number[];
  byteLength: number;
}

/** Read-only access to a model file's tensors. `bytes` returns a view of the file's own bytes (no copy). */
export interface WeightStore {
  tensors(): Iterable<TensorInfo>;
  info(name: string): TensorInfo | undefined;
  bytes(name: string): Uint8Array;
}

/** The typed role by which a graph names a constant, e.g. {layer: 3, role: "attn.q"}; layer-less for globals. */
export interface WeightRole {
  role: string;
  layer?: number;
}

/** Canonical string key of a role: "attn.q@3", or "tok_embd" without a layer. */
export function roleKey(r: WeightRole): string {
  return r.layer === undefined ? r.role : `${r.role}@${r.layer}`;
}

/** Binds roles (by roleKey) to store tensor names. A constant whose role the map does not name is unbound. */
export type WeightMap = Map<string, string>;
