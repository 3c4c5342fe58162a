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
  /**
   * Tensor parallelism (graph/passes/tp.ts): this constant is one of `count` equal parts of the role's tensor
   * along `axis`; rank r of a tp-rank group holds part floor(r·count/tp) (graph/shard.ts slices it at load).
   */
  shard?: Shard;
}

/** One of `count` equal parts along `axis` (count divides the group size; count < tp replicates parts). */
export interface Shard {
  axis: number;
  count: number;
}

/** Canonical string key of a role: "attn.q@3", or "tok_embd" without a layer; a shard adds "/a0:2". */
export function roleKey(r: WeightRole): string {
  const base = r.layer === undefined ? r.role : `${r.role}@${r.layer}`;
  return r.shard ? `${base}/a${r.shard.axis}:${r.shard.count}` : base;
}

/** Binds roles (by roleKey) to store tensor names. A constant whose role the map does not name is unbound. */
export type WeightMap = Map<string, string>;

/** A tensor of a file held in one buffer: its info and the byte offset of its data. */
export interface TensorEntry extends TensorInfo {
  offset: number;
}

/** A WeightStore over one buffer (a whole model file): `bytes` returns views into it, never copies. */
export function bufferStore(buffer: Uint8Array, entries: readonly TensorEntry[]): WeightStore {
  const byName = new Map<string, TensorEntry>();
  for (const e of entries) {
    if (byName.has(e.name)) throw new RangeError(`tensor ${e.name} listed twice`);
    if (e.offset < 0 || e.offset + e.byteLength > buffer.byteLength) {
      throw new RangeError(`tensor ${e.name} [${e.offset}, +${e.byteLength}) lies outside the ${buffer.byteLength}-byte file`);
    }
    byName.set(e.name, e);
  }
  return {
    tensors: () => [...byName.values()].map(({ offset: _, ...info }) => info),
    info(name) {
      const e = byName.get(name);
      if (!e) return undefined;
      const { offset: _, ...info } = e;
      return info;
    },
    bytes(name) {
      const e = byName.get(name);
      if (!e) throw new RangeError(`no tensor ${name}`);
      return buffer.subarray(e.offset, e.offset + e.byteLength);
    },
  };
}
