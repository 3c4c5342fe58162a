// One rank's weights of a tensor-parallel group: the model's WeightStore and WeightMap seen through a TpPlan
// (graph/passes/tp.ts). A split role is bound under its sharded role key ("attn.q@3/a0:2") to this rank's part;
// the whole tensor stays bound only where the plan says a graph also reads it whole (a tied embedding).
//
// A split along axis 0 (rows: q/k/v, gate/up, the output head, biases) is a view of the model file's bytes, no
// copy; a split along axis 1 (columns: o, down) copies this rank's columns, 1/count of the tensor, row by row.
// Block types (q8_0, q4_k, ...) split along columns only at whole blocks; anything else is a ShardError naming
// the tensor. Rank r of tp holds part floor(r·count/tp): a count below tp replicates parts (K/V heads).
import { BLOCK, byteSize, isBlock } from "./dtype.ts";
import { roleKey, type Shard, type TensorInfo, type WeightMap, type WeightRole, type WeightStore } from "./weights.ts";

/** How each role name is split; `whole` keeps the whole tensor bound too (a graph reads it whole elsewhere). */
export type ShardPlan = Record<string, Shard & { whole?: boolean }>;

/** A tensor that cannot be split as the plan asks. */
export class ShardError extends Error {
  constructor(readonly tensor: string, message: string) {
    super(`${tensor}: ${message}`);
    this.name = "ShardError";
  }
}

/** Parses a roleKey back to its role ("attn.q@3" -> {role: "attn.q", layer: 3}). */
function parseKey(key: string): WeightRole {
  const at = key.lastIndexOf("@");
  return at < 0 ? { role: key } : { role: key.slice(0, at), layer: Number(key.slice(at + 1)) };
}

/** Which part of a `count`-way split rank `rank` of `tp` holds. */
export function partOf(rank: number, tp: number, count: number): number {
  return Math.floor((rank * count) / tp);
}

/** The info and bytes of part `part` of `count` of a tensor along `axis`. */
export function slicePart(info: TensorInfo, bytes: Uint8Array, s: Shard, part: number): { info: TensorInfo; bytes: Uint8Array } {
  const shape = info.shape;
  if (s.axis >= shape.length) throw new ShardError(info.name, `has no axis ${s.axis} to split (shape [${shape}])`);
  if (shape[s.axis] % s.count !== 0) throw new ShardError(info.name, `axis ${s.axis} of [${shape}] does not split ${s.count} ways`);
  const local = shape.map((d, i) => (i === s.axis ? d / s.count : d));
  const inner = shape.slice(s.axis + 1).reduce((a, b) => a * b, 1);
  const outer = shape.slice(0, s.axis).reduce((a, b) => a * b, 1);
  if (isBlock(info.dtype) && s.axis === shape.length - 1 && local[s.axis] % BLOCK[info.dtype].elems !== 0) {
    throw new ShardError(info.name, `a ${s.count}-way split of ${shape[s.axis]} columns is not whole ${info.dtype} blocks`);
  }
  const partBytes = byteSize(info.dtype as "f32", local[s.axis] * inner);
  const rowBytes = partBytes * s.count;
  const out: TensorInfo = { ...info, shape: local, byteLength: partBytes * outer };
  if (s.count === 1) return { info: out, bytes }; // a group of one's "split": the whole tensor, no copy
  if (outer === 1) return { info: out, bytes: bytes.subarray(part * partBytes, (part + 1) * partBytes) };
  const copy = new Uint8Array(partBytes * outer);
  for (let o = 0; o < outer; o++) copy.set(bytes.subarray(o * rowBytes + part * partBytes, o * rowBytes + (part + 1) * partBytes), o * partBytes);
  return { info: out, bytes: copy };
}

/** Rank `rank` of a `tp`-rank group's view of the model's weights under `plan`. */
export function rankWeights(store: WeightStore, map: WeightMap, plan: ShardPlan, rank: number, tp: number): { store: WeightStore; map: WeightMap } {
  const rmap: WeightMap = new Map();
  const parts = new Map<string, { src: string; shard: Shard; part: number }>();
  for (const [key, tensor] of map) {
    const role = parseKey(key);
    const spec = plan[role.role];
    if (!spec) {
      rmap.set(key, tensor);
      continue;
    }
    if (spec.whole) rmap.set(key, tensor);
    const shard = { axis: spec.axis, count: spec.count };
    if (shard.count === 1) {
      rmap.set(roleKey({ ...role, shard }), tensor); // a group of one's "part" is the tensor (one buffer for both)
      continue;
    }
    const part = partOf(rank, tp, spec.count);
    const name = `${tensor}#a${shard.axis}:${shard.count}.${part}`;
    rmap.set(roleKey({ ...role, shard }), name);
    parts.set(name, { src: tensor, shard, part });
  }
  const sliced = (name: string) => {
    const p = parts.get(name)!;
    const info = store.info(p.src);
    if (!info) throw new ShardError(p.src, "the model file lacks it");
    return slicePart(info, store.bytes(p.src), p.shard, p.part);
  };
  const infoOf = (name: string): TensorInfo | undefined => {
    const p = parts.get(name);
    if (!p) return store.info(name);
    const info = store.info(p.src);
    if (!info) return undefined;
    const shape = info.shape.map((d, i) => (i === p.shard.axis ? d / p.shard.count : d));
    return { ...info, name, shape, byteLength: info.byteLength / p.shard.count };
  };
  return {
    map: rmap,
    store: {
      tensors: () => [...store.tensors(), ...[...parts.keys()].map((n) => infoOf(n)!).filter(Boolean)],
      info: infoOf,
      bytes: (name) => (parts.has(name) ? sliced(name).bytes : store.bytes(name)),
    },
  };
}
