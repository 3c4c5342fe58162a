// An op case's weights loaded into an Engine as a model file would hold them (one buffer, every tensor at its
// offset), and the same bytes as the oracle's consts.
import type { Engine } from "../../backends/executor.ts";
import type { Device } from "../../backends/device.ts";
import { type Storage, storageFromBytes } from "../../graph/dtype.ts";
import { bufferStore, type TensorEntry } from "../../graph/weights.ts";
import type { OpCase } from "./cases.ts";

export async function loadCaseWeights(eng: Engine<Device>, c: OpCase): Promise<Record<string, Storage>> {
  const total = c.weights.reduce((a, w) => a + w.bytes.byteLength, 0);
  const file = new Uint8Array(total);
  const entries: TensorEntry[] = [];
  let off = 0;
  for (const w of c.weights) {
    file.set(w.bytes, off);
    entries.push({ name: w.role, dtype: w.dtype, shape: w.shape, byteLength: w.bytes.byteLength, offset: off });
    off += w.bytes.byteLength;
  }
  const store = bufferStore(file, entries);
  await eng.loadWeights(store, new Map(c.weights.map((w) => [w.role, w.role])));
  return Object.fromEntries(c.weights.map((w) => [w.role, storageFromBytes(w.dtype, store.bytes(w.role))]));
}
