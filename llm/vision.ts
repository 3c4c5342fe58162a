// Runs a vision-language model's tower and projector (llm/families/vit.ts) on an Executor, and lays the projected
// rows into a prompt the LLaVA way: each image placeholder token (`<image>`, the config's image_token_index)
// expands to the image's row count, and those rows are given by value in place of the placeholders' embedding
// rows (the driver's generateWithInputs / StepShape.inputRows).
//
// The vision entry (one image per step) compiles on first use, not at open: a text-only prompt never pays for
// it. Pixels are slot values, never baked into a program.
import type { EntryId, Executor } from "../backends/executor.ts";
import { ImageError, InvalidArgumentError, ModelKindError } from "./errors.ts";
import type { ModelHandle } from "./model.ts";
import type { Tokenizer } from "./tokenizer/mod.ts";
import { decodeImage, type RGBImage } from "./image.ts";
import { preprocess, unfoldPatches } from "./preprocess.ts";
import { imageRows, VISION_SLOT, type VisionInfo } from "./families/vit.ts";

/**
 * An image for a prompt: PNG or JPEG bytes, decoded RGB, or pixel values already made by the model's processor
 * (f32 [channels, size, size], channels first: what transformers' processor returns as pixel_values).
 */
export type ImageInput = Uint8Array | RGBImage | { pixelValues: Float32Array };

/** Rows given by value in place of some prompt tokens' rows: rows [n·dim] from prompt index `at` on. */
export interface PromptInput {
  /** The prompt index of the first token whose row is replaced. */
  at: number;
  /** The rows, n·dim values (n rows of the model's width). */
  rows: Float32Array;
}

/** A prompt's given rows, flat: rows [ids·dim] and where they replace the token's row (1) or not (0). */
export interface RowInputs {
  rows: Float32Array;
  use: Uint8Array;
}

/** What the vision step gives for one image. */
export interface VisionOutput {
  /** The tower's selected hidden rows [rows·visionDim]. */
  frames: Float32Array;
  /** The projected rows [rows·textDim]. */
  embeds: Float32Array;
}

export class VisionRunner {
  readonly #model: ModelHandle;
  readonly #exec: Executor;
  readonly #v: VisionInfo;
  #entry?: EntryId;

  constructor(model: ModelHandle, exec: Executor) {
    if (!model.config.vision || !model.family.vision) throw new ModelKindError(model.arch, "has no vision tower: it reads text only");
    this.#model = model;
    this.#exec = exec;
    this.#v = model.config.vision;
  }

  /** Rows one image takes in the prompt. */
  get rowsPerImage(): number {
    return imageRows(this.#v);
  }

  #step(): EntryId {
    if (this.#entry !== undefined) return this.#entry;
    const { tracer, frames, embeds } = this.#model.family.vision!(this.#model.config, { images: 1 }, { dtypeOf: this.#dtypeOf });
    tracer.output("frames", frames);
    tracer.output("embeds", embeds);
    this.#entry = this.#exec.addEntry(`${this.#model.arch}:vision:images=1`, tracer.build());
    return this.#entry;
  }

  readonly #dtypeOf = (role: { role: string; layer?: number }) => {
    const name = this.#model.map.get(role.layer === undefined ? role.role : `${role.role}@${role.layer}`);
    return this.#model.store.info(name!)!.dtype;
  };

  /** The pixel values of an image as the model's processor makes them (f32 [channels, size, size]). */
  async pixels(img: ImageInput, what: string): Promise<Float32Array> {
    const v = this.#v, n = v.channels * v.imageSize * v.imageSize;
    if (img && typeof img === "object" && "pixelValues" in img) {
      if (!(img.pixelValues instanceof Float32Array) || img.pixelValues.length !== n) {
        throw new InvalidArgumentError(what, `pixelValues must be a Float32Array of ${v.channels}x${v.imageSize}x${v.imageSize} = ${n} values`);
      }
      return img.pixelValues;
    }
    const rgb = img instanceof Uint8Array ? await decodeImage(img, what) : checkRGB(img, what);
    const p = preprocess(rgb, this.#model.preprocess!);
    if (p.height !== v.imageSize || p.width !== v.imageSize) {
      throw new ImageError(what, `the processor config makes ${p.width}x${p.height} images; the tower reads ${v.imageSize}x${v.imageSize}`);
    }
    return p.data;
  }

  /** Runs the tower and projector on one image's pixel values. */
  async run(pixels: Float32Array): Promise<VisionOutput> {
    const v = this.#v;
    const r = await this.#exec.step(this.#step(), { [VISION_SLOT]: unfoldPatches(pixels, v.imageSize, v.imageSize, v.patchSize, v.channels) });
    return { frames: r.outputs.frames as Float32Array, embeds: r.outputs.embeds as Float32Array };
  }

  /** Projected rows of each image, in order. */
  async embed(images: readonly ImageInput[]): Promise<Float32Array[]> {
    const out: Float32Array[] = [];
    for (const [i, img] of images.entries()) out.push((await this.run(await this.pixels(img, `images[${i}]`))).embeds);
    return out;
  }
}

function checkRGB(img: unknown, what: string): RGBImage {
  const r = img as RGBImage;
  if (!r || typeof r !== "object" || !(r.data instanceof Uint8Array) || !Number.isInteger(r.width) || !Number.isInteger(r.height) ||
    r.width < 1 || r.height < 1 || r.data.length !== r.width * r.height * 3) {
    throw new InvalidArgumentError(what, "must be PNG/JPEG bytes (Uint8Array), {width, height, data} RGB bytes, or {pixelValues}");
  }
  return r;
}

/**
 * The prompt with each image placeholder expanded to `perImage` copies (LLaVA's processor does the same on
 * the text), and where each image's rows start. The count of placeholders must equal `images`.
 */
export function expandImages(ids: readonly number[], imageToken: number, images: number, perImage: number): { ids: number[]; at: number[] } {
  const found = ids.filter((t) => t === imageToken).length;
  if (found !== images) {
    throw new InvalidArgumentError("images", `${images} image${images === 1 ? "" : "s"} for ${found} image placeholder token${found === 1 ? "" : "s"} (id ${imageToken}) in the prompt: put one placeholder where each image goes`);
  }
  const out: number[] = [], at: number[] = [];
  for (const t of ids) {
    if (t !== imageToken) out.push(t);
    else {
      at.push(out.length);
      for (let i = 0; i < perImage; i++) out.push(t);
    }
  }
  return { ids: out, at };
}

/**
 * Token ids of a text with `token`'s text (an image placeholder such as `<image>`) split out first and put back
 * as that token, the rest tokenized as usual (special tokens in the user's text stay text).
 */
export function tokenizeAround(tok: Tokenizer, text: string, token: number, addBos?: boolean): number[] {
  if (typeof text !== "string") throw new InvalidArgumentError("prompt", "must be a string or an array of token ids");
  const [first, ...rest] = text.split(tok.tokenText(token));
  const ids = tok.encode(first, { addBos });
  for (const piece of rest) ids.push(token, ...(piece ? tok.encode(piece, { addBos: false }) : []));
  return ids;
}

/** Checks given rows against a prompt of `n` ids and width `dim`, and lays them out flat. */
export function rowInputs(inputs: unknown, n: number, dim: number): RowInputs {
  if (!Array.isArray(inputs)) throw new InvalidArgumentError("inputs", "must be an array of {at, rows}");
  const out: RowInputs = { rows: new Float32Array(n * dim), use: new Uint8Array(n) };
  inputs.forEach((x: PromptInput, i) => {
    const what = `inputs[${i}]`;
    if (!x || typeof x !== "object" || !Number.isInteger(x.at) || x.at < 0) throw new InvalidArgumentError(`${what}.at`, "must be a prompt index (an integer >= 0)");
    if (!(x.rows instanceof Float32Array) || x.rows.length === 0 || x.rows.length % dim !== 0) {
      throw new InvalidArgumentError(`${what}.rows`, `must be a non-empty Float32Array of whole rows of ${dim} values`);
    }
    const count = x.rows.length / dim;
    if (x.at + count > n) throw new InvalidArgumentError(what, `rows ${x.at}..${x.at + count - 1} run past the prompt's ${n} tokens`);
    if (out.use.subarray(x.at, x.at + count).some((u) => u === 1)) throw new InvalidArgumentError(what, "overlaps the rows of an earlier input");
    for (const r of x.rows) if (!Number.isFinite(r)) throw new InvalidArgumentError(`${what}.rows`, "holds a NaN or infinite value");
    out.rows.set(x.rows, x.at * dim);
    out.use.fill(1, x.at, x.at + count);
  });
  return out;
}
