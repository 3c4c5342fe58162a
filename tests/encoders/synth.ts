// A tiny BERT folder written by the tests themselves (random f32 weights, a hand-made WordPiece vocabulary),
// and a plain-loop BERT forward that shares no code with the graph: the encoder checks that do not need the
// transformers fixtures (tests/encoders/fixtures/, written by fixgen/make.py) run against it.
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Rng } from "../rng.ts";

export const VOCAB = [
  "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "dog", "ran", "to", "park", "a", "little",
  "hello", "world", "!", ",", ".", "?", "un", "##able", "##s", "play", "##ing", "##ed", "cafe", "你", "好", "1", "##2", "##3",
];

export interface SynthOptions {
  labels?: number;
  /** sentence-transformers pooling mode written to 1_Pooling/config.json (none: no modules.json). */
  pooling?: "mean" | "cls" | "lasttoken";
  normalize?: boolean;
  /** Tensor name prefix of the encoder (default "bert." under a head, "" without). */
  prefix?: string;
  /** An XLMRobertaForSequenceClassification: positions from pad_token_id + 1, RoBERTa's classifier tensors. */
  roberta?: boolean;
}

export const DIMS = { dim: 16, heads: 2, hidden: 32, layers: 2, positions: 24, types: 2, eps: 1e-12 };

/** Writes the folder; returns its path and the weights by tensor name. */
export function writeBert(o: SynthOptions = {}): { dir: string; w: Map<string, Float32Array> } {
  const dir = mkdtempSync(join(tmpdir(), "poot-bert-"));
  const { dim: D, hidden: I, layers, positions, types } = DIMS, V = VOCAB.length;
  const rng = new Rng(`bert-${o.labels ?? 0}`);
  const w = new Map<string, Float32Array>();
  const p = o.prefix ?? (o.labels ? (o.roberta ? "roberta." : "bert.") : "");
  const t = (name: string, shape: number[], scale: number, base = 0) => {
    const n = shape.reduce((a, b) => a * b, 1), a = new Float32Array(n);
    for (let i = 0; i < n; i++) a[i] = base + scale * (rng.next() * 2 - 1);
    w.set(name, a);
    return [name, shape] as const;
  };
  const shapes: (readonly [string, number[]])[] = [
    t(`${p}embeddings.word_embeddings.weight`, [V, D], 1), t(`${p}embeddings.position_embeddings.weight`, [positions, D], 1),
    t(`${p}embeddings.token_type_embeddings.weight`, [types, D], 1),
    t(`${p}embeddings.LayerNorm.weight`, [D], 0.2, 1), t(`${p}embeddings.LayerNorm.bias`, [D], 0.2),
  ];
  for (let l = 0; l < layers; l++) {
    const L = `${p}encoder.layer.${l}.`;
    for (const m of ["attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"]) {
      shapes.push(t(`${L}${m}.weight`, [D, D], 0.4), t(`${L}${m}.bias`, [D], 0.2));
    }
    shapes.push(t(`${L}attention.output.LayerNorm.weight`, [D], 0.2, 1), t(`${L}attention.output.LayerNorm.bias`, [D], 0.2));
    shapes.push(t(`${L}intermediate.dense.weight`, [I, D], 0.4), t(`${L}intermediate.dense.bias`, [I], 0.2));
    shapes.push(t(`${L}output.dense.weight`, [D, I], 0.3), t(`${L}output.dense.bias`, [D], 0.2));
    shapes.push(t(`${L}output.LayerNorm.weight`, [D], 0.2, 1), t(`${L}output.LayerNorm.bias`, [D], 0.2));
  }
  if (o.roberta) {
    shapes.push(t("classifier.dense.weight", [D, D], 0.4), t("classifier.dense.bias", [D], 0.2));
    shapes.push(t("classifier.out_proj.weight", [o.labels!, D], 0.5), t("classifier.out_proj.bias", [o.labels!], 0.2));
  } else {
    shapes.push(t(`${p}pooler.dense.weight`, [D, D], 0.4), t(`${p}pooler.dense.bias`, [D], 0.2));
    if (o.labels) shapes.push(t("classifier.weight", [o.labels, D], 0.5), t("classifier.bias", [o.labels], 0.2));
  }
  // safetensors: header JSON then the raw little-endian f32 data.
  const header: Record<string, unknown> = {};
  let off = 0;
  for (const [name, shape] of shapes) {
    const n = w.get(name)!.byteLength;
    header[name] = { dtype: "F32", shape, data_offsets: [off, off + n] };
    off += n;
  }
  const h = new TextEncoder().encode(JSON.stringify(header));
  const pad = (8 - (h.length % 8)) % 8;
  const hb = new Uint8Array(h.length + pad).fill(0x20);
  hb.set(h);
  const file = new Uint8Array(8 + hb.length + off);
  new DataView(file.buffer).setBigUint64(0, BigInt(hb.length), true);
  file.set(hb, 8);
  let at = 8 + hb.length;
  for (const [name] of shapes) {
    const b = new Uint8Array(w.get(name)!.buffer);
    file.set(b, at);
    at += b.length;
  }
  writeFileSync(join(dir, "model.safetensors"), file);
  writeFileSync(join(dir, "config.json"), JSON.stringify({
    architectures: [o.roberta ? "XLMRobertaForSequenceClassification" : o.labels ? "BertForSequenceClassification" : "BertModel"],
    model_type: o.roberta ? "xlm-roberta" : "bert", vocab_size: V, hidden_size: D,
    num_hidden_layers: layers, num_attention_heads: DIMS.heads, intermediate_size: I, max_position_embeddings: positions,
    type_vocab_size: types, layer_norm_eps: DIMS.eps, hidden_act: "gelu", pad_token_id: 0,
    ...(o.labels ? { id2label: Object.fromEntries(Array.from({ length: o.labels }, (_, i) => [String(i), `LABEL_${i}`])) } : {}),
  }));
  const vocab = Object.fromEntries(VOCAB.map((v, i) => [v, i]));
  writeFileSync(join(dir, "tokenizer.json"), JSON.stringify({
    version: "1.0",
    added_tokens: VOCAB.slice(0, 5).map((content, id) => ({ id, content, special: true, normalized: false, lstrip: false, rstrip: false, single_word: false })),
    normalizer: { type: "BertNormalizer", clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
    pre_tokenizer: { type: "BertPreTokenizer" },
    post_processor: {
      type: "TemplateProcessing",
      single: [{ SpecialToken: { id: "[CLS]", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "[SEP]", type_id: 0 } }],
      pair: [{ SpecialToken: { id: "[CLS]", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "[SEP]", type_id: 0 } },
        { Sequence: { id: "B", type_id: 1 } }, { SpecialToken: { id: "[SEP]", type_id: 1 } }],
      special_tokens: { "[CLS]": { id: "[CLS]", ids: [2], tokens: ["[CLS]"] }, "[SEP]": { id: "[SEP]", ids: [3], tokens: ["[SEP]"] } },
    },
    decoder: { type: "WordPiece", prefix: "##", cleanup: true },
    model: { type: "WordPiece", unk_token: "[UNK]", continuing_subword_prefix: "##", max_input_chars_per_word: 100, vocab },
  }));
  writeFileSync(join(dir, "tokenizer_config.json"), JSON.stringify({ tokenizer_class: "BertTokenizer", do_lower_case: true }));
  if (o.pooling) {
    const mods = [{ idx: 0, name: "0", path: "", type: "sentence_transformers.models.Transformer" },
      { idx: 1, name: "1", path: "1_Pooling", type: "sentence_transformers.models.Pooling" }];
    if (o.normalize) mods.push({ idx: 2, name: "2", path: "2_Normalize", type: "sentence_transformers.models.Normalize" });
    writeFileSync(join(dir, "modules.json"), JSON.stringify(mods));
    mkdirSync(join(dir, "1_Pooling"));
    writeFileSync(join(dir, "1_Pooling", "config.json"), JSON.stringify({
      word_embedding_dimension: D, pooling_mode_cls_token: o.pooling === "cls", pooling_mode_mean_tokens: o.pooling === "mean",
      pooling_mode_lasttoken: o.pooling === "lasttoken", pooling_mode_max_tokens: false,
    }));
  }
  return { dir, w };
}

/** erf to double precision (Abramowitz & Stegun 7.1.28 is too coarse; this is the series / continued fraction). */
function erf(x: number): number {
  const s = Math.sign(x), a = Math.abs(x);
  if (a < 2.5) {
    let sum = a, term = a;
    for (let n = 1; n < 60; n++) {
      term *= (-a * a) / n;
      sum += term / (2 * n + 1);
    }
    return (s * 2 * sum) / Math.sqrt(Math.PI);
  }
  // erfc continued fraction for large |x|.
  let f = 0;
  for (let n = 60; n >= 1; n--) f = n / 2 / (a + f);
  return s * (1 - Math.exp(-a * a) / Math.sqrt(Math.PI) / (a + f));
}

/** The last hidden state [len, D] of one text, in float64 loops straight from the BERT paper's equations. */
export function referenceHidden(w: Map<string, Float32Array>, ids: number[], types: number[], prefix = "", posOffset = 0): Float64Array[] {
  const { dim: D, heads: H, hidden: I, layers, eps } = DIMS, hd = D / H, n = ids.length;
  const g = (name: string) => w.get(prefix + name)!;
  const lin = (x: Float64Array, W: Float32Array, b: Float32Array, out: number) => {
    const inn = x.length, y = new Float64Array(out);
    for (let o = 0; o < out; o++) {
      let s = b[o];
      for (let i = 0; i < inn; i++) s += W[o * inn + i] * x[i];
      y[o] = s;
    }
    return y;
  };
  const ln = (x: Float64Array, wt: Float32Array, b: Float32Array) => {
    const m = x.reduce((a, v) => a + v, 0) / x.length;
    const v = x.reduce((a, u) => a + (u - m) ** 2, 0) / x.length;
    return x.map((u, i) => ((u - m) / Math.sqrt(v + eps)) * wt[i] + b[i]);
  };
  let h = ids.map((t, r) => {
    const x = new Float64Array(D);
    for (let i = 0; i < D; i++) x[i] = g("embeddings.word_embeddings.weight")[t * D + i] + g("embeddings.position_embeddings.weight")[(r + posOffset) * D + i] + g("embeddings.token_type_embeddings.weight")[types[r] * D + i];
    return ln(x, g("embeddings.LayerNorm.weight"), g("embeddings.LayerNorm.bias"));
  });
  for (let l = 0; l < layers; l++) {
    const L = (s: string) => g(`encoder.layer.${l}.${s}`);
    const q = h.map((x) => lin(x, L("attention.self.query.weight"), L("attention.self.query.bias"), D));
    const k = h.map((x) => lin(x, L("attention.self.key.weight"), L("attention.self.key.bias"), D));
    const v = h.map((x) => lin(x, L("attention.self.value.weight"), L("attention.self.value.bias"), D));
    const ctx = h.map(() => new Float64Array(D));
    for (let hh = 0; hh < H; hh++) {
      for (let r = 0; r < n; r++) {
        const s = new Float64Array(n);
        for (let c = 0; c < n; c++) {
          let d = 0;
          for (let i = 0; i < hd; i++) d += q[r][hh * hd + i] * k[c][hh * hd + i];
          s[c] = d / Math.sqrt(hd);
        }
        const mx = Math.max(...s), e = s.map((x) => Math.exp(x - mx)), z = e.reduce((a, b) => a + b, 0);
        for (let c = 0; c < n; c++) for (let i = 0; i < hd; i++) ctx[r][hh * hd + i] += (e[c] / z) * v[c][hh * hd + i];
      }
    }
    h = h.map((x, r) => ln(lin(ctx[r], L("attention.output.dense.weight"), L("attention.output.dense.bias"), D).map((u, i) => u + x[i]), L("attention.output.LayerNorm.weight"), L("attention.output.LayerNorm.bias")));
    h = h.map((x) => {
      const up = lin(x, L("intermediate.dense.weight"), L("intermediate.dense.bias"), I).map((u) => 0.5 * u * (1 + erf(u / Math.SQRT2)));
      return ln(lin(up, L("output.dense.weight"), L("output.dense.bias"), D).map((u, i) => u + x[i]), L("output.LayerNorm.weight"), L("output.LayerNorm.bias"));
    });
  }
  return h;
}

/** The reranker's logit: tanh of a dense layer on the first row, then the classifier (BERT's or RoBERTa's names). */
export function referenceScore(w: Map<string, Float32Array>, ids: number[], types: number[], roberta = false): number {
  // RoBERTa positions count from pad_token_id (0 here) + 1.
  const h = referenceHidden(w, ids, types, roberta ? "roberta." : "bert.", roberta ? 1 : 0)[0], D = DIMS.dim;
  const pw = w.get(roberta ? "classifier.dense.weight" : "bert.pooler.dense.weight")!, pb = w.get(roberta ? "classifier.dense.bias" : "bert.pooler.dense.bias")!;
  const p = Array.from({ length: D }, (_, o) => Math.tanh(pb[o] + h.reduce((a, x, i) => a + pw[o * D + i] * x, 0)));
  const cw = w.get(roberta ? "classifier.out_proj.weight" : "classifier.weight")!, cb = w.get(roberta ? "classifier.out_proj.bias" : "classifier.bias")!;
  return cb[0] + p.reduce((a, x, i) => a + cw[i] * x, 0);
}
