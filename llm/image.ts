// Image decoding to 8-bit RGB, as PIL's `Image.open(f).convert("RGB")` gives it to a transformers processor.
//
// PNG is decoded here (node:zlib inflates; every color type, bit depths 1-16, Adam7 interlace; alpha is
// dropped as convert("RGB") drops it, 16-bit samples keep their high byte, 16-bit gray clips to 255 as PIL's).
// JPEG is decoded by the jpeg-js package (pure JS): within 3 steps of libjpeg at 4:4:4; at 4:2:0 it replicates
// chroma where libjpeg interpolates, so sharp color edges differ more (tests/vlm/images/make.py). Every
// failure is an ImageError naming the image; a file over `maxPixels` is refused before its pixels are made.
import { inflateSync } from "node:zlib";
import { decode as decodeJpeg } from "jpeg-js";
import { ImageError } from "./errors.ts";

/** An image as 8-bit RGB, row-major, 3 bytes per pixel. */
export interface RGBImage {
  /** Pixels per row. */
  width: number;
  /** Rows. */
  height: number;
  /** width·height·3 bytes: R, G, B per pixel, rows top to bottom. */
  data: Uint8Array;
}

/** Largest image decoded (pixels): 64 MP, as a 8K x 8K photo. */
export const MAX_PIXELS = 64 * 1024 * 1024;

const PNG_SIG = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];

/** The format of image bytes by their signature, or undefined. */
export function imageFormat(b: Uint8Array): "png" | "jpeg" | undefined {
  if (b.length >= 8 && PNG_SIG.every((x, i) => b[i] === x)) return "png";
  if (b.length >= 3 && b[0] === 0xff && b[1] === 0xd8 && b[2] === 0xff) return "jpeg";
  return undefined;
}

/** Decodes PNG or JPEG bytes to RGB; `what` names the image in errors. */
// deno-lint-ignore require-await -- a bad image must reject the promise, not throw where the caller did not await
export async function decodeImage(bytes: Uint8Array, what = "image", maxPixels = MAX_PIXELS): Promise<RGBImage> {
  if (!(bytes instanceof Uint8Array)) throw new ImageError(what, "must be the bytes of a PNG or JPEG file (a Uint8Array)");
  const f = imageFormat(bytes);
  if (f === "png") return decodePNG(bytes, what, maxPixels);
  if (f === "jpeg") return decodeJPEG(bytes, what, maxPixels);
  throw new ImageError(what, `not a PNG or JPEG file (starts with ${[...bytes.subarray(0, 4)].map((x) => x.toString(16).padStart(2, "0")).join(" ") || "nothing"})`);
}

/** Decodes a PNG file to RGB (see the top of this file). */
export function decodePNG(b: Uint8Array, what = "image", maxPixels = MAX_PIXELS): RGBImage {
  const fail = (msg: string): never => {
    throw new ImageError(what, `PNG: ${msg}`);
  };
  const view = new DataView(b.buffer, b.byteOffset, b.byteLength);
  let at = 8, ihdr: { w: number; h: number; depth: number; color: number; interlace: number } | undefined;
  let palette: Uint8Array | undefined;
  const idat: Uint8Array[] = [];
  for (;;) {
    if (at + 8 > b.length) fail(`truncated at byte ${at} (no IEND chunk)`);
    const len = view.getUint32(at), type = String.fromCharCode(...b.subarray(at + 4, at + 8));
    if (at + 12 + len > b.length) fail(`chunk ${JSON.stringify(type)} at byte ${at} runs past the end of the file`);
    const data = b.subarray(at + 8, at + 8 + len);
    at += 12 + len;
    if (type === "IHDR") {
      if (len !== 13) fail("IHDR is not 13 bytes");
      const d = new DataView(data.buffer, data.byteOffset, 13);
      ihdr = { w: d.getUint32(0), h: d.getUint32(4), depth: data[8], color: data[9], interlace: data[12] };
    } else if (type === "PLTE") palette = data;
    else if (type === "IDAT") idat.push(data);
    else if (type === "IEND") break;
  }
  if (!ihdr) return fail("no IHDR chunk");
  const { w, h, depth, color, interlace } = ihdr;
  if (w === 0 || h === 0) fail(`empty image (${w}x${h})`);
  if (w * h > maxPixels) fail(`${w}x${h} is more than ${maxPixels} pixels`);
  const channels = ({ 0: 1, 2: 3, 3: 1, 4: 2, 6: 4 } as Record<number, number>)[color] ?? fail(`color type ${color} is not a PNG color type`);
  const depths = color === 0 ? [1, 2, 4, 8, 16] : color === 3 ? [1, 2, 4, 8] : [8, 16];
  if (!depths.includes(depth)) fail(`bit depth ${depth} is not valid for color type ${color}`);
  if (color === 3 && !palette) fail("a palette image has no PLTE chunk");
  if (interlace > 1) fail(`interlace method ${interlace} is not a PNG interlace method`);
  let raw: Uint8Array;
  try {
    raw = new Uint8Array(inflateSync(concat(idat)));
  } catch (e) {
    return fail(`the image data does not inflate (${(e as Error).message})`);
  }
  const bitsPerPixel = channels * depth, bpp = Math.max(1, bitsPerPixel >> 3);
  const out = new Uint8Array(w * h * 3);
  // A sample as 8 bits: high byte of 16, low depths scaled to 0-255 (PIL's L mode); palette indices raw.
  const sample = (row: Uint8Array, i: number): number => {
    if (depth === 8) return row[i];
    // PIL opens 16-bit gray as 32-bit integers and clips them to 255 in convert("RGB"); other 16-bit types keep the high byte
    if (depth === 16) return color === 0 ? Math.min(255, (row[2 * i] << 8) | row[2 * i + 1]) : row[2 * i];
    const per = 8 / depth, v = (row[Math.floor(i / per)] >> (8 - depth * (1 + (i % per)))) & ((1 << depth) - 1);
    return color === 3 ? v : Math.round((v * 255) / ((1 << depth) - 1));
  };
  const put = (row: Uint8Array, x: number, o: number) => {
    if (color === 3) {
      const p = sample(row, x);
      if (3 * p + 2 >= palette!.length) fail(`palette index ${p} is past the palette's ${palette!.length / 3} entries`);
      out.set(palette!.subarray(3 * p, 3 * p + 3), o);
    } else if (channels <= 2) out.fill(sample(row, x * channels), o, o + 3);
    else for (let c = 0; c < 3; c++) out[o + c] = sample(row, x * channels + c);
  };
  // Adam7 passes (x0, y0, dx, dy), or the whole image once.
  const passes = interlace ? [[0, 0, 8, 8], [4, 0, 8, 8], [0, 4, 4, 8], [2, 0, 4, 4], [0, 2, 2, 4], [1, 0, 2, 2], [0, 1, 1, 2]] : [[0, 0, 1, 1]];
  let pos = 0;
  for (const [x0, y0, dx, dy] of passes) {
    const pw = Math.ceil((w - x0) / dx), ph = Math.ceil((h - y0) / dy);
    if (pw <= 0 || ph <= 0) continue;
    const stride = Math.ceil((pw * bitsPerPixel) / 8);
    let prev = new Uint8Array(stride);
    for (let y = 0; y < ph; y++) {
      if (pos + 1 + stride > raw.length) fail(`image data ends at row ${y} of ${ph}`);
      const filter = raw[pos];
      const row = raw.slice(pos + 1, pos + 1 + stride);
      pos += 1 + stride;
      unfilter(row, prev, filter, bpp) || fail(`row ${y} has filter type ${filter} (0-4 are PNG's)`);
      for (let x = 0; x < pw; x++) put(row, x, ((y0 + y * dy) * w + x0 + x * dx) * 3);
      prev = row;
    }
  }
  return { width: w, height: h, data: out };
}

/** Undoes a PNG row filter in place; false for an unknown filter type. */
function unfilter(row: Uint8Array, prev: Uint8Array, filter: number, bpp: number): boolean {
  const n = row.length;
  if (filter === 0) return true;
  if (filter === 1) for (let i = bpp; i < n; i++) row[i] += row[i - bpp];
  else if (filter === 2) for (let i = 0; i < n; i++) row[i] += prev[i];
  else if (filter === 3) for (let i = 0; i < n; i++) row[i] += ((i >= bpp ? row[i - bpp] : 0) + prev[i]) >> 1;
  else if (filter === 4) {
    for (let i = 0; i < n; i++) {
      const a = i >= bpp ? row[i - bpp] : 0, b = prev[i], c = i >= bpp ? prev[i - bpp] : 0;
      const p = a + b - c, pa = Math.abs(p - a), pb = Math.abs(p - b), pc = Math.abs(p - c);
      row[i] += pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
    }
  } else return false;
  return true;
}

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((a, p) => a + p.length, 0));
  let o = 0;
  for (const p of parts) (out.set(p, o), o += p.length);
  return out;
}

/** Decodes a JPEG with jpeg-js (pure JS; baseline and progressive, 4:2:0 chroma replicated, not interpolated). */
export function decodeJPEG(b: Uint8Array, what = "image", maxPixels = MAX_PIXELS): RGBImage {
  let img;
  try {
    img = decodeJpeg(b, { useTArray: true, formatAsRGBA: false, maxResolutionInMP: maxPixels / 1e6, maxMemoryUsageInMB: 1024, tolerantDecoding: false });
  } catch (e) {
    throw new ImageError(what, `JPEG: ${(e as Error).message ?? String(e)}`);
  }
  if (img.data.length !== img.width * img.height * 3) throw new ImageError(what, `JPEG: decoded ${img.data.length} bytes for ${img.width}x${img.height} RGB`);
  return { width: img.width, height: img.height, data: new Uint8Array(img.data.buffer, img.data.byteOffset, img.data.length) };
}

/**
 * The bytes of an image URL: a base64 `data:image/...` URL. Anything else (http, https, file) is refused with an
 * ImageError: poot never downloads.
 */
export function imageFromUrl(url: unknown, what: string): Uint8Array {
  if (typeof url !== "string" || url === "") throw new ImageError(what, "must be a data: URL string");
  const m = /^data:(image\/[\w.+-]+)?(;[^,]*)?,/i.exec(url);
  if (!m) {
    const scheme = /^([a-z][\w+.-]*):/i.exec(url)?.[1] ?? "no scheme";
    throw new ImageError(what, `only data: URLs are accepted (got ${scheme === "no scheme" ? "no scheme" : `a ${scheme}: URL`}); poot never downloads images`);
  }
  if (!/;base64$/i.test(m[2] ?? "")) throw new ImageError(what, "a data: URL of an image must be base64 (data:image/png;base64,...)");
  const body = url.slice(m[0].length);
  if (!/^[A-Za-z0-9+/=\s]*$/.test(body)) throw new ImageError(what, "the data: URL's base64 has characters outside base64");
  let bin: string;
  try {
    bin = atob(body.replace(/\s+/g, ""));
  } catch {
    throw new ImageError(what, "the data: URL's base64 is malformed");
  }
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** Encodes RGB as a PNG (filter 0, one IDAT): for tests and fixtures that write images whose pixels they know. */
export async function encodePNG(img: RGBImage): Promise<Uint8Array> {
  const { deflateSync } = await import("node:zlib");
  const { width: w, height: h, data } = img;
  const raw = new Uint8Array(h * (1 + 3 * w));
  for (let y = 0; y < h; y++) raw.set(data.subarray(y * 3 * w, (y + 1) * 3 * w), y * (1 + 3 * w) + 1);
  const chunk = (type: string, body: Uint8Array) => {
    const c = new Uint8Array(12 + body.length), v = new DataView(c.buffer);
    v.setUint32(0, body.length);
    c.set([...type].map((ch) => ch.charCodeAt(0)), 4);
    c.set(body, 8);
    v.setUint32(8 + body.length, crc32(c.subarray(4, 8 + body.length)));
    return c;
  };
  const ihdr = new Uint8Array(13), v = new DataView(ihdr.buffer);
  v.setUint32(0, w);
  v.setUint32(4, h);
  ihdr.set([8, 2, 0, 0, 0], 8);
  return concat([new Uint8Array(PNG_SIG), chunk("IHDR", ihdr), chunk("IDAT", new Uint8Array(deflateSync(raw))), chunk("IEND", new Uint8Array(0))]);
}

function crc32(b: Uint8Array): number {
  let c = ~0;
  for (const x of b) {
    c ^= x;
    for (let k = 0; k < 8; k++) c = (c >>> 1) ^ (0xedb88320 & -(c & 1));
  }
  return ~c >>> 0;
}
