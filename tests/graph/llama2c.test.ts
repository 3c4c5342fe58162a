import { test } from "node:test";
import assert from "node:assert/strict";
import { readLlama2c } from "../../llm/formats/llama2c.ts";
import { llamaWeights, tensorName, weightMap } from "../../llm/families/llama.ts";
import { model } from "./stories.ts";

// Writes stories260K in llama2.c's "version 1" export layout (256-byte header, norms first).
function toVersion1(): Uint8Array {
  const c = model.config, s = model.store;
  const parts: Uint8Array[] = [];
  const header = new Uint8Array(256);
  const dv = new DataView(header.buffer);
  dv.setUint32(0, 0x616b3432, true);
  dv.setInt32(4, 1, true);
  [c.dim, c.hidden, c.layers, c.heads, c.kvHeads, c.vocab, model.seqLen].forEach((v, i) => dv.setInt32(8 + 4 * i, v, true));
  header[36] = 1; // shared classifier
  parts.push(header);
  const layers = (f: string) => Array.from({ length: c.layers }, (_, l) => s.bytes(`${f}.${l}`));
  parts.push(...layers("rms_att_weight"), ...layers("rms_ffn_weight"), s.bytes("rms_final_weight"), s.bytes("token_embedding_table"));
  for (const f of ["wq", "wk", "wv", "wo", "w1", "w2", "w3"]) parts.push(...layers(f));
  const out = new Uint8Array(parts.reduce((a, p) => a + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

test("llama2.c version 0 header and tensor layout of stories260K", () => {
  assert.equal(model.version, 0);
  assert.deepEqual(
    [model.config.dim, model.config.hidden, model.config.layers, model.config.heads, model.config.kvHeads, model.config.vocab, model.seqLen],
    [64, 172, 5, 8, 4, 512, 512],
  );
  assert.equal(model.config.tiedEmbeddings, true);
  assert.deepEqual(model.store.info("wk.4")?.shape, [32, 64]);
  // Every role the step reads is bound, with the shape the step expects.
  const map = weightMap(model.config, "llama2c", [...model.store.tensors()].map((t) => t.name));
  for (const { role, shape } of llamaWeights(model.config)) {
    assert.deepEqual(model.store.info(map.get(role.layer === undefined ? role.role : `${role.role}@${role.layer}`)!)?.shape, shape);
  }
  assert.equal(tensorName("gguf", { role: "ffn.down", layer: 2 }), "blk.2.ffn_down.weight");
  assert.equal(tensorName("llama2c", { role: "ffn.down", layer: 2 }), "w2.2");
});

test("llama2.c version 1 export reads to the same tensors", () => {
  const v1 = readLlama2c(toVersion1());
  assert.equal(v1.version, 1);
  assert.deepEqual(v1.config, model.config);
  for (const t of model.store.tensors()) assert.deepEqual(v1.store.bytes(t.name), model.store.bytes(t.name), t.name);
});

test("bad checkpoints are refused with a RangeError", () => {
  assert.throws(() => readLlama2c(new Uint8Array(10)), RangeError);
  const hdr = new Uint8Array(28);
  new Int32Array(hdr.buffer).set([64, 172, 5, 8, 3, 512, 512]); // 8 heads, 3 kv heads
  assert.throws(() => readLlama2c(hdr), /bad header/);
  const v2 = new Uint8Array(300);
  new DataView(v2.buffer).setUint32(0, 0x616b3432, true);
  new DataView(v2.buffer).setInt32(4, 2, true);
  assert.throws(() => readLlama2c(v2), /version 2/);
  assert.throws(() => readLlama2c(model.store.bytes("token_embedding_table").slice(0, 4096)), RangeError);
});
