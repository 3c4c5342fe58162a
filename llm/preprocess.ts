// An image processor as a model's preprocessor_config.json states it (transformers' CLIPImageProcessor,
// SiglipImageProcessor and their fast twins): resize (to a fixed size, or the shortest edge to a length),
// center crop, rescale (·1/255), normalize by image_mean/image_std, channels first; then the patches unfolded
// for the vision step (llm/families/vit.ts).
//
// Resizing is PIL's Image.resize on 8-bit RGB: a separable convolution (horizontal pass, then vertical), the
// filter widened by the scale when shrinking (antialiasing), coefficients normalized and rounded to 22-bit
// fixed point, each pass rounded and clipped to 8 bits. `resample` is PIL's code: 1 lanczos, 2 bilinear,
// 3 bicubic (a = -0.5); 0 (nearest) is not supported.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { ConfigError } from "./errors.ts";
import { openText } from "./formats/safetensors.ts";
import type { RGBImage } from "./image.ts";

const size = z.object({
  height: z.number().int().positive().optional(),
  width: z.number().int().positive().optional(),
  shortest_edge: z.number().int().positive().optional(),
}).loose();
const PreprocessSchema = z.object({
  do_resize: z.boolean().optional(),
  size: z.union([size, z.number().int().positive()]).optional(),
  resample: z.number().int().min(0).max(5).optional(),
  do_center_crop: z.boolean().optional(),
  crop_size: z.union([size, z.number().int().positive()]).optional(),
  do_rescale: z.boolean().optional(),
  rescale_factor: z.number().positive().optional(),
  do_normalize: z.boolean().optional(),
  image_mean: z.union([z.array(z.number()).length(3), z.number()]).optional(),
  image_std: z.union([z.array(z.number().positive()).length(3), z.number().positive()]).optional(),
}).loose();

/** What the image processor does, resolved (defaults: transformers' BaseImageProcessor and the tower's size). */
export interface Preprocess {
  resize?: { height: number; width: number } | { shortest: number };
  resample: 1 | 2 | 3;
  crop?: { height: number; width: number };
  rescale: number;
  mean: [number, number, number];
  std: [number, number, number];
}

/** CLIP's mean and std, transformers' OPENAI_CLIP_MEAN/STD (the CLIP processor's defaults). */
const CLIP_MEAN: [number, number, number] = [0.48145466, 0.4578275, 0.40821073];
const CLIP_STD: [number, number, number] = [0.26862954, 0.26130258, 0.27577711];

/**
 * The folder's preprocessor_config.json, or the `image_processor` of its processor_config.json (where
 * transformers 5 writes it); without either, the tower's own processor defaults at `imageSize` (SigLIP: resize
 * to the square, bicubic, mean = std = 0.5; CLIP: shortest edge, center crop, CLIP's mean/std).
 */
export function readPreprocess(dir: string, tower: "siglip" | "clip", imageSize: number): Preprocess {
  const pre = join(dir, "preprocessor_config.json"), proc = join(dir, "processor_config.json");
  const file = existsSync(pre) || !existsSync(proc) ? pre : proc;
  let json = existsSync(file) ? parseJson(file) : {};
  if (file === proc) {
    const inner = (json as { image_processor?: unknown }).image_processor;
    if (inner === undefined) json = {};
    else if (typeof inner !== "object" || inner === null || Array.isArray(inner)) throw new ConfigError(file, "image_processor", "must be an object");
    else json = inner;
  }
  const r = PreprocessSchema.safeParse(json);
  if (!r.success) throw new ConfigError(file, r.error.issues[0].path.join("."), r.error.issues[0].message);
  const c = r.data;
  const fail = (field: string, msg: string): never => {
    throw new ConfigError(file, field, msg);
  };
  const sq = (s: z.infer<typeof size> | number | undefined, field: string) => {
    if (s === undefined) return undefined;
    if (typeof s === "number") return { height: s, width: s };
    if (s.height !== undefined && s.width !== undefined) return { height: s.height, width: s.width };
    return fail(field, "needs height and width");
  };
  const three = (v: number | number[] | undefined, dflt: [number, number, number]): [number, number, number] =>
    v === undefined ? dflt : typeof v === "number" ? [v, v, v] : [v[0], v[1], v[2]];
  const resample = c.resample ?? 3;
  if (resample !== 1 && resample !== 2 && resample !== 3) fail("resample", `${resample} is not supported (1 lanczos, 2 bilinear, 3 bicubic are)`);
  let resize: Preprocess["resize"];
  if (c.do_resize ?? true) {
    const s = c.size;
    if (s !== undefined && typeof s === "object" && s.shortest_edge !== undefined) resize = { shortest: s.shortest_edge };
    else resize = sq(s, "size") ?? (tower === "clip" ? { shortest: imageSize } : { height: imageSize, width: imageSize });
  }
  const crop = (c.do_center_crop ?? tower === "clip") ? sq(c.crop_size, "crop_size") ?? { height: imageSize, width: imageSize } : undefined;
  const normalize = c.do_normalize ?? true;
  const dm: [number, number, number] = tower === "clip" ? CLIP_MEAN : [0.5, 0.5, 0.5];
  const ds: [number, number, number] = tower === "clip" ? CLIP_STD : [0.5, 0.5, 0.5];
  return {
    resize,
    resample: resample as 1 | 2 | 3,
    crop,
    rescale: (c.do_rescale ?? true) ? c.rescale_factor ?? 1 / 255 : 1,
    mean: normalize ? three(c.image_mean, dm) : [0, 0, 0],
    std: normalize ? three(c.image_std, ds) : [1, 1, 1],
  };
}

function parseJson(file: string): unknown {
  try {
    return JSON.parse(openText(file));
  } catch (e) {
    throw new ConfigError(file, "", `not valid JSON (${(e as Error).message})`);
  }
}

/** The pixel values the model reads: f32 [3, height, width] (channels first), as the processor makes them. */
export function preprocess(img: RGBImage, p: Preprocess): { data: Float32Array; height: number; width: number } {
  let im = img;
  if (p.resize) {
    let h: number, w: number;
    if ("shortest" in p.resize) {
      // transformers' get_resize_output_image_size(default_to_square=False): the long edge truncated.
      const short = Math.min(im.width, im.height), long = Math.max(im.width, im.height);
      const s = p.resize.shortest, l = Math.floor((s * long) / short);
      [w, h] = im.width <= im.height ? [s, l] : [l, s];
    } else ({ height: h, width: w } = p.resize);
    im = resize(im, w, h, p.resample);
  }
  if (p.crop) im = centerCrop(im, p.crop.width, p.crop.height);
  const { width: W, height: H } = im, out = new Float32Array(3 * H * W);
  for (let c = 0; c < 3; c++) {
    // transformers rescales in float64 and stores float32, then normalizes in float32: (x·s - mean) / std
    const m = Math.fround(p.mean[c]), d = Math.fround(p.std[c]);
    for (let i = 0; i < H * W; i++) out[c * H * W + i] = Math.fround(Math.fround(im.data[3 * i + c] * p.rescale) - m) / d;
  }
  return { data: out, height: H, width: W };
}

/** transformers' center_crop: the top-left corner at ((H - h) / 2, (W - w) / 2) rounded down; zero-padded when smaller. */
export function centerCrop(img: RGBImage, w: number, h: number): RGBImage {
  const top = Math.floor((img.height - h) / 2), left = Math.floor((img.width - w) / 2);
  const out = new Uint8Array(w * h * 3);
  for (let y = 0; y < h; y++) {
    const sy = y + top;
    if (sy < 0 || sy >= img.height) continue;
    for (let x = 0; x < w; x++) {
      const sx = x + left;
      if (sx >= 0 && sx < img.width) out.set(img.data.subarray(3 * (sy * img.width + sx), 3 * (sy * img.width + sx) + 3), 3 * (y * w + x));
    }
  }
  return { width: w, height: h, data: out };
}

// PIL's filters (libImaging/Resample.c) with their supports.
const FILTERS: Record<1 | 2 | 3, { support: number; f: (x: number) => number }> = {
  1: { support: 3, f: (x) => (x > -3 && x < 3 ? sinc(x) * sinc(x / 3) : 0) },
  2: { support: 1, f: (x) => (x < 0 && (x = -x), x < 1 ? 1 - x : 0) },
  3: {
    support: 2,
    f: (x) => {
      const a = -0.5;
      if (x < 0) x = -x;
      if (x < 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
      if (x < 2) return (((x - 5) * x + 8) * x - 4) * a;
      return 0;
    },
  },
};
function sinc(x: number): number {
  if (x === 0) return 1;
  x *= Math.PI;
  return Math.sin(x) / x;
}

const PRECISION_BITS = 32 - 8 - 2;

/** Fixed-point coefficients of one axis: per output index, the first input index and the weights. */
function coefficients(inSize: number, outSize: number, filter: 1 | 2 | 3): { bounds: Int32Array; k: Int32Array; ksize: number } {
  const { support: s0, f } = FILTERS[filter];
  const scale = inSize / outSize, filterscale = Math.max(scale, 1), support = s0 * filterscale;
  const ksize = Math.ceil(support) * 2 + 1;
  const bounds = new Int32Array(outSize * 2), k = new Int32Array(outSize * ksize), w = new Float64Array(ksize);
  for (let xx = 0; xx < outSize; xx++) {
    const center = (xx + 0.5) * scale, ss = 1 / filterscale;
    // C's (int) truncates toward zero
    const xmin = Math.max(Math.trunc(center - support + 0.5), 0);
    const xmax = Math.min(Math.trunc(center + support + 0.5), inSize) - xmin;
    let ww = 0;
    for (let x = 0; x < xmax; x++) ww += w[x] = f((x + xmin - center + 0.5) * ss);
    for (let x = 0; x < xmax; x++) {
      const v = ww !== 0 ? w[x] / ww : w[x];
      k[xx * ksize + x] = v < 0 ? Math.trunc(-0.5 + v * (1 << PRECISION_BITS)) : Math.trunc(0.5 + v * (1 << PRECISION_BITS));
    }
    bounds[2 * xx] = xmin;
    bounds[2 * xx + 1] = xmax;
  }
  return { bounds, k, ksize };
}

function clip8(v: number): number {
  const x = Math.floor(v / (1 << PRECISION_BITS)); // an arithmetic shift right of the accumulator
  return x < 0 ? 0 : x > 255 ? 255 : x;
}

/** PIL's Image.resize((w, h), resample) of an 8-bit RGB image (see the top of this file). */
export function resize(img: RGBImage, w: number, h: number, resample: 1 | 2 | 3): RGBImage {
  let cur = img;
  if (w !== cur.width) {
    const { bounds, k, ksize } = coefficients(cur.width, w, resample);
    const out = new Uint8Array(w * cur.height * 3);
    for (let y = 0; y < cur.height; y++) {
      for (let x = 0; x < w; x++) {
        const xmin = bounds[2 * x], xmax = bounds[2 * x + 1];
        for (let c = 0; c < 3; c++) {
          let ss = 1 << (PRECISION_BITS - 1);
          for (let i = 0; i < xmax; i++) ss += cur.data[3 * (y * cur.width + xmin + i) + c] * k[x * ksize + i];
          out[3 * (y * w + x) + c] = clip8(ss);
        }
      }
    }
    cur = { width: w, height: cur.height, data: out };
  }
  if (h !== cur.height) {
    const { bounds, k, ksize } = coefficients(cur.height, h, resample);
    const out = new Uint8Array(cur.width * h * 3);
    for (let y = 0; y < h; y++) {
      const ymin = bounds[2 * y], ymax = bounds[2 * y + 1];
      for (let x = 0; x < cur.width; x++) {
        for (let c = 0; c < 3; c++) {
          let ss = 1 << (PRECISION_BITS - 1);
          for (let i = 0; i < ymax; i++) ss += cur.data[3 * ((ymin + i) * cur.width + x) + c] * k[y * ksize + i];
          out[3 * (y * cur.width + x) + c] = clip8(ss);
        }
      }
    }
    cur = { width: cur.width, height: h, data: out };
  }
  return cur;
}

/**
 * Unfolds pixel values f32 [3, H, W] into patch rows [(H/p)·(W/p), 3·p·p]: patches row-major, each patch's
 * values ordered (channel, y, x), the order of a patch convolution's weight [dim, 3, p, p] read as a matrix.
 */
export function unfoldPatches(pix: Float32Array, H: number, W: number, p: number, channels = 3): Float32Array {
  const gh = H / p, gw = W / p, K = channels * p * p, out = new Float32Array(gh * gw * K);
  for (let py = 0; py < gh; py++) {
    for (let px = 0; px < gw; px++) {
      const o = (py * gw + px) * K;
      for (let c = 0; c < channels; c++) {
        for (let y = 0; y < p; y++) {
          const src = c * H * W + (py * p + y) * W + px * p;
          out.set(pix.subarray(src, src + p), o + c * p * p + y * p);
        }
      }
    }
  }
  return out;
}
