// A tiny LlavaForConditionalGeneration folder written by the tests themselves: the text model is the llama
// fixture of tests/families/fixtures (transformers-written weights and tokenizer, renamed under LLaVA's
// prefixes), the tower and projector random f32 weights; and a float64 plain-loop tower + projector that shares
// no code with the graph (the patch convolution straight over the image, no unfolding). The VLM checks that do
// not need transformers' fixtures (tests/vlm/fixgen.py) run against it.
import { copyFileSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openSafetensorsFolder } from "../../llm/formats/safetensors.ts";
import { Rng } from "../rng.ts";

export const TEXT_DIR = new URL("../families/fixtures/llama/", import.meta.url).pathname;
/** The placeholder: the llama fixture's `<|start_header_id|>` (a special token its tokenizer already has). */
export const IMAGE_TOKEN = 2;
export const IMAGE_TEXT = "<|start_header_id|>";
export const V = { dim: 32, heads: 2, hidden: 64, layers: 3, image: 32, patch: 8, channels: 3, textDim: 64 };

export interface LlavaOptions {
  tower: "siglip" | "clip";
  /**
   * Tensor names as transformers 5 keeps them in memory ("model"), as older llava-hf checkpoints have them
   * ("legacy"), or as transformers 5.17 writes them to disk ("disk": legacy, the tower without `vision_model.`).
   */
  layout?: "model" | "legacy" | "disk";
  /** vision_feature_select_strategy (default: "full" for SigLIP, "default" for CLIP). */
  select?: "default" | "full";
  /** vision_feature_layer (default -2). */
  featureLayer?: number;
}

type Entry = [string, number[], Float32Array];

/** Writes a safetensors file of f32 tensors. */
export function writeSafetensors(path: string, tensors: Entry[]): void {
  const header: Record<string, unknown> = {};
  let off = 0;
  for (const [name, shape, a] of tensors) {
    header[name] = { dtype: "F32", shape, data_offsets: [off, off + a.byteLength] };
    off += a.byteLength;
  }
  const h = new TextEncoder().encode(JSON.stringify(header));
  const hb = new Uint8Array(h.length + ((8 - (h.length % 8)) % 8)).fill(0x20);
  hb.set(h);
  const file = new Uint8Array(8 + hb.length + off);
  new DataView(file.buffer).setBigUint64(0, BigInt(hb.length), true);
  file.set(hb, 8);
  let at = 8 + hb.length;
  for (const [, , a] of tensors) {
    file.set(new Uint8Array(a.buffer, a.byteOffset, a.byteLength), at);
    at += a.byteLength;
  }
  writeFileSync(path, file);
}

/** Writes the folder; returns its path and the tower/projector weights by short name (see referenceVision). */
export function writeLlava(o: LlavaOptions): { dir: string; w: Map<string, Float32Array> } {
  const dir = mkdtempSync(join(tmpdir(), "poot-llava-"));
  const layout = o.layout ?? "model";
  const rng = new Rng(`llava-${o.tower}`);
  const w = new Map<string, Float32Array>();
  const tensors: Entry[] = [];
  const text = openSafetensorsFolder(TEXT_DIR);
  for (const t of text.tensors()) {
    const b = text.bytes(t.name);
    const a = new Float32Array(b.slice().buffer);
    const rest = t.name.replace(/^model\./, "");
    const name = t.name.startsWith("lm_head") ? (layout === "model" ? t.name : `language_model.${t.name}`)
      : layout === "model" ? `model.language_model.${rest}` : `language_model.model.${rest}`;
    tensors.push([name, t.shape, a]);
  }
  text.close();
  const { dim: D, hidden: I, layers, image, patch, channels: C, textDim: TD } = V;
  const clip = o.tower === "clip", P = (image / patch) ** 2, T = P + (clip ? 1 : 0);
  const tower = layout === "model" ? "model.vision_tower.vision_model." : layout === "legacy" ? "vision_tower.vision_model." : "vision_tower.";
  const proj = `${layout === "model" ? "model." : ""}multi_modal_projector.`;
  const t = (short: string, name: string, shape: number[], scale: number, base = 0) => {
    const n = shape.reduce((a, b) => a * b, 1), a = new Float32Array(n);
    for (let i = 0; i < n; i++) a[i] = base + scale * (rng.next() * 2 - 1);
    w.set(short, a);
    tensors.push([name, shape, a]);
  };
  t("patch", `${tower}embeddings.patch_embedding.weight`, [D, C, patch, patch], 0.15);
  if (!clip) t("patch_b", `${tower}embeddings.patch_embedding.bias`, [D], 0.2);
  else {
    t("cls", `${tower}embeddings.class_embedding`, [D], 1);
    t("pre", `${tower}pre_layrnorm.weight`, [D], 0.2, 1);
    t("pre_b", `${tower}pre_layrnorm.bias`, [D], 0.2);
  }
  t("pos", `${tower}embeddings.position_embedding.weight`, [T, D], 0.5);
  for (let l = 0; l < layers; l++) {
    const L = `${tower}encoder.layers.${l}.`;
    t(`${l}.ln1`, `${L}layer_norm1.weight`, [D], 0.2, 1);
    t(`${l}.ln1_b`, `${L}layer_norm1.bias`, [D], 0.2);
    for (const m of ["q", "k", "v", "out"]) {
      t(`${l}.${m}`, `${L}self_attn.${m}_proj.weight`, [D, D], 0.35);
      t(`${l}.${m}_b`, `${L}self_attn.${m}_proj.bias`, [D], 0.2);
    }
    t(`${l}.ln2`, `${L}layer_norm2.weight`, [D], 0.2, 1);
    t(`${l}.ln2_b`, `${L}layer_norm2.bias`, [D], 0.2);
    t(`${l}.fc1`, `${L}mlp.fc1.weight`, [I, D], 0.35);
    t(`${l}.fc1_b`, `${L}mlp.fc1.bias`, [I], 0.2);
    t(`${l}.fc2`, `${L}mlp.fc2.weight`, [D, I], 0.25);
    t(`${l}.fc2_b`, `${L}mlp.fc2.bias`, [D], 0.2);
  }
  t("post", `${tower}post_layernorm.weight`, [D], 0.2, 1);
  t("post_b", `${tower}post_layernorm.bias`, [D], 0.2);
  t("mm1", `${proj}linear_1.weight`, [TD, D], 0.3);
  t("mm1_b", `${proj}linear_1.bias`, [TD], 0.2);
  t("mm2", `${proj}linear_2.weight`, [TD, TD], 0.2);
  t("mm2_b", `${proj}linear_2.bias`, [TD], 0.2);
  writeSafetensors(join(dir, "model.safetensors"), tensors);
  const textConfig = JSON.parse(readFileSync(join(TEXT_DIR, "config.json"), "utf8"));
  delete textConfig.architectures;
  writeFileSync(join(dir, "config.json"), JSON.stringify({
    architectures: ["LlavaForConditionalGeneration"],
    model_type: "llava",
    image_token_index: IMAGE_TOKEN,
    projector_hidden_act: "gelu",
    vision_feature_layer: o.featureLayer ?? -2,
    vision_feature_select_strategy: o.select ?? (clip ? "default" : "full"),
    text_config: textConfig,
    vision_config: {
      model_type: clip ? "clip_vision_model" : "siglip_vision_model",
      hidden_size: D, intermediate_size: I, num_hidden_layers: layers, num_attention_heads: V.heads,
      image_size: image, patch_size: patch, ...(clip ? { layer_norm_eps: 1e-5 } : {}),
    },
  }));
  for (const f of ["tokenizer.json", "tokenizer_config.json"]) copyFileSync(join(TEXT_DIR, f), join(dir, f));
  writeFileSync(join(dir, "preprocessor_config.json"), JSON.stringify(clip
    ? { image_processor_type: "CLIPImageProcessor", size: { shortest_edge: image }, crop_size: { height: image, width: image }, do_center_crop: true, resample: 3,
      image_mean: [0.48145466, 0.4578275, 0.40821073], image_std: [0.26862954, 0.26130258, 0.27577711] }
    : { image_processor_type: "SiglipImageProcessor", size: { height: image, width: image }, resample: 2, image_mean: [0.5, 0.5, 0.5], image_std: [0.5, 0.5, 0.5] }));
  return { dir, w };
}

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
  let f = 0;
  for (let n = 60; n >= 1; n--) f = n / 2 / (a + f);
  return s * (1 - Math.exp(-a * a) / Math.sqrt(Math.PI) / (a + f));
}

const ACT = {
  tanh: (x: number) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3))),
  quick: (x: number) => x / (1 + Math.exp(-1.702 * x)),
  erf: (x: number) => 0.5 * x * (1 + erf(x / Math.SQRT2)),
};

/**
 * The tower's selected rows and the projector's rows of one image (pixel values [C, H, W]), in float64: the
 * patch convolution over the image, embeddings, `blocks` pre-norm blocks, the first row dropped when `drop`.
 */
export function referenceVision(w: Map<string, Float32Array>, pix: Float32Array, tower: "siglip" | "clip", blocks: number, drop: boolean): { frames: Float64Array[]; embeds: Float64Array[] } {
  const { dim: D, hidden: I, image, patch: p, channels: C, textDim: TD, heads: H } = V, g = image / p, hd = D / H;
  const W = (k: string) => w.get(k)!;
  const lin = (x: Float64Array, m: Float32Array, b: Float32Array | undefined, out: number, inn: number) => {
    const y = new Float64Array(out);
    for (let o = 0; o < out; o++) {
      let s = b ? b[o] : 0;
      for (let i = 0; i < inn; i++) s += m[o * inn + i] * x[i];
      y[o] = s;
    }
    return y;
  };
  const ln = (x: Float64Array, gw: Float32Array, gb: Float32Array, eps: number) => {
    const mean = x.reduce((a, b) => a + b, 0) / x.length;
    const v = x.reduce((a, b) => a + (b - mean) ** 2, 0) / x.length;
    return x.map((xi, i) => ((xi - mean) / Math.sqrt(v + eps)) * gw[i] + gb[i]);
  };
  const eps = tower === "clip" ? 1e-5 : 1e-6;
  let rows: Float64Array[] = [];
  if (tower === "clip") rows.push(Float64Array.from(W("cls")));
  for (let py = 0; py < g; py++) {
    for (let px = 0; px < g; px++) {
      const r = new Float64Array(D);
      for (let o = 0; o < D; o++) {
        let s = tower === "siglip" ? W("patch_b")[o] : 0;
        for (let c = 0; c < C; c++) {
          for (let y = 0; y < p; y++) for (let x = 0; x < p; x++) s += W("patch")[((o * C + c) * p + y) * p + x] * pix[(c * image + py * p + y) * image + px * p + x];
        }
        r[o] = s;
      }
      rows.push(r);
    }
  }
  rows = rows.map((r, t) => r.map((x, i) => x + W("pos")[t * D + i]));
  if (tower === "clip") rows = rows.map((r) => ln(r, W("pre"), W("pre_b"), eps));
  const act = tower === "clip" ? ACT.quick : ACT.tanh;
  for (let l = 0; l < blocks; l++) {
    const h = rows.map((r) => ln(r, W(`${l}.ln1`), W(`${l}.ln1_b`), eps));
    const q = h.map((r) => lin(r, W(`${l}.q`), W(`${l}.q_b`), D, D));
    const k = h.map((r) => lin(r, W(`${l}.k`), W(`${l}.k_b`), D, D));
    const v = h.map((r) => lin(r, W(`${l}.v`), W(`${l}.v_b`), D, D));
    const att = rows.map(() => new Float64Array(D));
    for (let hh = 0; hh < H; hh++) {
      for (let i = 0; i < rows.length; i++) {
        const s = rows.map((_, j) => {
          let d = 0;
          for (let e = 0; e < hd; e++) d += q[i][hh * hd + e] * k[j][hh * hd + e];
          return d / Math.sqrt(hd);
        });
        const m = Math.max(...s), ex = s.map((x) => Math.exp(x - m)), z = ex.reduce((a, b) => a + b, 0);
        for (let j = 0; j < rows.length; j++) for (let e = 0; e < hd; e++) att[i][hh * hd + e] += (ex[j] / z) * v[j][hh * hd + e];
      }
    }
    rows = rows.map((r, i) => {
      const a = lin(att[i], W(`${l}.out`), W(`${l}.out_b`), D, D);
      const x1 = r.map((x, j) => x + a[j]);
      const m = lin(lin(ln(x1, W(`${l}.ln2`), W(`${l}.ln2_b`), eps), W(`${l}.fc1`), W(`${l}.fc1_b`), I, D).map(act), W(`${l}.fc2`), W(`${l}.fc2_b`), D, I);
      return x1.map((x, j) => x + m[j]);
    });
  }
  const frames = drop ? rows.slice(1) : rows;
  const embeds = frames.map((r) => lin(lin(r, W("mm1"), W("mm1_b"), TD, D).map(ACT.erf), W("mm2"), W("mm2_b"), TD, TD));
  return { frames, embeds };
}

/** Deterministic pixel values in [-1.5, 1.5] for an image of the tower's size. */
export function randomPixels(seed: string): Float32Array {
  const rng = new Rng(seed), a = new Float32Array(V.channels * V.image * V.image);
  for (let i = 0; i < a.length; i++) a[i] = 3 * rng.next() - 1.5;
  return a;
}
