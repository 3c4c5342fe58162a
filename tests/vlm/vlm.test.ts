// The vision-language path without transformers: images decoded and resized against what PIL itself made of them
// (tests/vlm/images/pil.json, written by images/make.py), the patch unfold, the traced tower + projector (graph
// oracle) against a float64 plain-loop tower (tests/vlm/synth.ts), the text step's by-value rows against the
// plain step (oracle, bit-exact), and on every backend present: the tower's rows vs the float64 reference
// within a stated tolerance, generateWithInputs with the tokens' own rows equal to plain generation, and a
// generation with images equal to one with the reference's rows. Typed errors for bad input.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { compileGraph, Driver, Engine, loadModel } from "../../engine.ts";
import { constsFromStore, evaluate } from "../../graph/eval.ts";
import { dtypesFromStore } from "../../llm/families/family.ts";
import { ConfigError, ImageError, InvalidArgumentError, ModelKindError } from "../../llm/errors.ts";
import { decodeImage, decodePNG, encodePNG, imageFromUrl } from "../../llm/image.ts";
import { poot } from "../cli/poot.ts";
import { preprocess, readPreprocess, resize, unfoldPatches } from "../../llm/preprocess.ts";
import { imageRows } from "../../llm/families/vit.ts";
import { expandImages } from "../../llm/vision.ts";
import { type BackendName, openDevice, selectedBackends, slowDevice } from "../devices/index.ts";
import { IMAGE_TEXT, IMAGE_TOKEN, randomPixels, referenceVision, V, writeLlava } from "./synth.ts";

const IMAGES = new URL("./images/", import.meta.url).pathname;
const PIL = JSON.parse(readFileSync(join(IMAGES, "pil.json"), "utf8")) as {
  decode: Record<string, { size: [number, number]; rgb: number[] }>;
  resize: { image: string; resample: 1 | 2 | 3; size: [number, number]; rgb: number[] }[];
};
// Tier 2 for the tower: f32 against float64 over 2 blocks and the projector (|x| up to ~10): |Δ| <= ATOL + RTOL·|x|.
const ATOL = 2e-3, RTOL = 2e-3;

function close(got: ArrayLike<number>, want: ArrayLike<number>, what: string, atol = ATOL, rtol = RTOL): void {
  assert.equal(got.length, want.length, `${what}: length`);
  for (let i = 0; i < want.length; i++) {
    const tol = atol + rtol * Math.abs(want[i]);
    assert.ok(Number.isFinite(got[i]) && Math.abs(got[i] - want[i]) <= tol, `${what}[${i}]: ${got[i]} vs reference ${want[i]} (tolerance ${tol})`);
  }
}
const flat = (rows: Float64Array[]) => Float64Array.from(rows.flatMap((r) => Array.from(r)));

test("PNG decoding equals PIL's convert('RGB') for every color type, bit depth and interlacing PIL writes", async () => {
  for (const [name, want] of Object.entries(PIL.decode).filter(([n]) => n.endsWith(".png"))) {
    const img = await decodeImage(new Uint8Array(readFileSync(join(IMAGES, name))), name);
    assert.deepEqual([img.width, img.height], want.size, name);
    assert.deepEqual(Array.from(img.data), want.rgb, name);
  }
  // Our own encoder round-trips (the fixtures' and tests' images are written with it).
  const img = await decodeImage(new Uint8Array(readFileSync(join(IMAGES, "noise.png"))));
  assert.deepEqual(decodePNG(await encodePNG(img)), img);
});

test("JPEG decoding (jpeg-js) is within 3 steps of libjpeg's (PIL) at 4:4:4, mean under 1; a cut JPEG is an ImageError", async () => {
  const want = PIL.decode["photo.jpg"];
  const bytes = new Uint8Array(readFileSync(join(IMAGES, "photo.jpg")));
  const img = await decodeImage(bytes, "photo.jpg");
  assert.deepEqual([img.width, img.height], want.size);
  let sum = 0;
  img.data.forEach((v, i) => {
    const d = Math.abs(v - want.rgb[i]);
    sum += d;
    assert.ok(d <= 3, `photo.jpg byte ${i}: ${v} vs libjpeg ${want.rgb[i]}`);
  });
  assert.ok(sum / img.data.length < 1, `mean difference ${sum / img.data.length}`);
  await assert.rejects(decodeImage(bytes.subarray(0, 300), "cut.jpg"), (e) => e instanceof ImageError && /cut\.jpg: JPEG: /.test(e.message));
});

test("resize equals PIL's Image.resize (bilinear, bicubic, lanczos; shrinking and enlarging), byte for byte", async () => {
  const src = await decodeImage(new Uint8Array(readFileSync(join(IMAGES, "cat.png"))));
  for (const r of PIL.resize) {
    const got = resize(src, r.size[0], r.size[1], r.resample);
    assert.deepEqual(Array.from(got.data), r.rgb, `resample ${r.resample} to ${r.size.join("x")}`);
  }
});

test("preprocess: shortest edge, center crop, rescale and normalize as transformers' CLIP processor; SigLIP's square", () => {
  // A 6x4 image whose pixels we wrote: no resize needed for the crop arithmetic to show.
  const data = new Uint8Array(6 * 4 * 3).map((_, i) => (i * 37) % 256);
  const img = { width: 6, height: 4, data };
  const p = { resample: 3 as const, crop: { width: 2, height: 2 }, rescale: 1 / 255, mean: [0.5, 0.25, 0] as [number, number, number], std: [0.5, 0.5, 2] as [number, number, number] };
  const out = preprocess(img, p);
  assert.deepEqual([out.width, out.height], [2, 2]);
  // crop's top-left: ((4 - 2) / 2, (6 - 2) / 2) = (1, 2); channel-first (x / 255 - mean) / std
  for (let c = 0; c < 3; c++) {
    for (let y = 0; y < 2; y++) {
      for (let x = 0; x < 2; x++) {
        const v = data[((1 + y) * 6 + 2 + x) * 3 + c];
        assert.ok(Math.abs(out.data[c * 4 + y * 2 + x] - (v / 255 - p.mean[c]) / p.std[c]) < 1e-6);
      }
    }
  }
  // shortest edge 3 of 6x4: 4x3 (the long edge truncated: int(3 · 6 / 4) = 4)
  assert.deepEqual([preprocess(img, { ...p, crop: undefined, resize: { shortest: 3 } }).width], [4]);
});

test("patch unfold: rows in raster order, each (channel, y, x) as the convolution weight reads", () => {
  const H = 4, W = 6, p = 2, pix = Float32Array.from({ length: 3 * H * W }, (_, i) => i);
  const u = unfoldPatches(pix, H, W, p);
  assert.equal(u.length, (H / p) * (W / p) * 3 * p * p);
  // patch (py=1, px=2), channel 2, (y=1, x=0) = pixel (2, 3, 4)
  const row = 1 * 3 + 2, K = 3 * p * p;
  assert.equal(u[row * K + 2 * p * p + 1 * p + 0], 2 * H * W + 3 * W + 4);
});

for (const [tower, layout] of [["siglip", "model"], ["clip", "disk"]] as const) {
  test(`${tower} (${layout} names): the traced tower and projector (graph oracle) equal a float64 tower, two images per step`, () => {
    const s = writeLlava({ tower, layout });
    const m = loadModel(s.dir);
    try {
      assert.equal(m.family.name, "llava");
      const v = m.config.vision!;
      assert.equal(v.featureLayer, 2);
      assert.equal(imageRows(v), 16);
      const { tracer, frames, embeds } = m.family.vision!(m.config, { images: 2 }, { dtypeOf: dtypesFromStore(m.store, m.map) });
      tracer.output("frames", frames);
      tracer.output("embeds", embeds);
      const px = [randomPixels(`${tower}-a`), randomPixels(`${tower}-b`)];
      const patches = px.map((p) => unfoldPatches(p, V.image, V.image, V.patch));
      const pixels = new Float32Array(patches[0].length * 2);
      pixels.set(patches[0]);
      pixels.set(patches[1], patches[0].length);
      const out = evaluate(tracer.build(), { consts: constsFromStore(m.store, m.map), slots: { pixels } }).output;
      const n = 16 * V.dim, e = 16 * V.textDim;
      px.forEach((p, i) => {
        const ref = referenceVision(s.w, p, tower, 2, tower === "clip");
        close((out.frames as Float32Array).subarray(i * n, (i + 1) * n), flat(ref.frames), `${tower} frames of image ${i}`);
        close((out.embeds as Float32Array).subarray(i * e, (i + 1) * e), flat(ref.embeds), `${tower} embeds of image ${i}`);
      });
    } finally {
      m.close();
      rmSync(s.dir, { recursive: true });
    }
  });
}

test("the text step with by-value rows: unused it equals the plain step, with the tokens' own rows too (oracle, bit-exact)", () => {
  const s = writeLlava({ tower: "siglip", layout: "legacy" });
  const m = loadModel(s.dir);
  try {
    assert.equal(m.map.get("tok_embd"), "language_model.model.embed_tokens.weight");
    const R = 8, cap = 16, dt = { dtypeOf: dtypesFromStore(m.store, m.map) }, consts = constsFromStore(m.store, m.map);
    const run = (inputRows: boolean, slots: Record<string, ArrayBufferView>) => {
      const { tracer, logits } = m.family.trace(m.config, { rows: R, cap, inputRows }, dt);
      tracer.output("logits", logits);
      return evaluate(tracer.build(), { consts, slots: { token: Int32Array.from([0, 5, 9, 2, 2, 40, 7, 3]), pos: new Int32Array([0]), ...slots } }).output.logits as Float32Array;
    };
    const plain = run(false, {});
    const tok = new Float32Array(m.store.bytes(m.map.get("tok_embd")!).slice().buffer);
    const ids = [0, 5, 9, 2, 2, 40, 7, 3], D = m.config.dim;
    const own = new Float32Array(R * D);
    ids.forEach((t, r) => own.set(tok.subarray(t * D, (t + 1) * D), r * D));
    assert.deepEqual(run(true, { input_rows: new Float32Array(R * D).fill(7), input_use: new Uint8Array(R) }), plain);
    assert.deepEqual(run(true, { input_rows: own, input_use: new Uint8Array(R).fill(1) }), plain);
    const other = run(true, { input_rows: new Float32Array(R * D).fill(0.5), input_use: Uint8Array.from([0, 0, 0, 1, 1, 0, 0, 0]) });
    assert.notDeepEqual(other, plain);
  } finally {
    m.close();
    rmSync(s.dir, { recursive: true });
  }
});

test("placeholders expand to each image's rows; a count that does not match is refused", () => {
  assert.deepEqual(expandImages([0, 7, 2, 9], 7, 1, 3), { ids: [0, 7, 7, 7, 2, 9], at: [1] });
  assert.deepEqual(expandImages([7, 1, 7], 7, 2, 2), { ids: [7, 7, 1, 7, 7], at: [0, 3] });
  assert.throws(() => expandImages([0, 1], 7, 1, 3), /1 image for 0 image placeholder tokens/);
});

test("bad images and VLM configs: typed errors naming what was wrong", async () => {
  await assert.rejects(decodeImage(new TextEncoder().encode("GIF89a...."), "x.gif"), (e) => e instanceof ImageError && /x\.gif: not a PNG or JPEG/.test(e.message));
  const png = new Uint8Array(readFileSync(join(IMAGES, "rgb8.png")));
  await assert.rejects(decodeImage(png.subarray(0, 60), "cut.png"), /cut\.png: PNG: .*(runs past|truncated)/);
  const huge = new Uint8Array(png);
  new DataView(huge.buffer).setUint32(16, 100000);
  new DataView(huge.buffer).setUint32(20, 100000);
  await assert.rejects(decodeImage(huge, "huge.png"), /more than \d+ pixels/);
  const s = writeLlava({ tower: "clip" });
  const edit = (f: (j: Record<string, unknown>) => void) => {
    const j = JSON.parse(readFileSync(join(s.dir, "config.json"), "utf8"));
    f(j);
    writeFileSync(join(s.dir, "config.json"), JSON.stringify(j));
  };
  const cfg = JSON.parse(readFileSync(join(s.dir, "config.json"), "utf8"));
  try {
    edit((j) => ((j.vision_config as Record<string, unknown>).model_type = "pixtral"));
    assert.throws(() => loadModel(s.dir), (e) => e instanceof ConfigError && /vision_config\.model_type.*'pixtral' is not supported/.test(e.message));
    edit((j) => ((j.vision_config as Record<string, unknown>).model_type = "clip_vision_model", j.vision_feature_layer = [-2, -1]));
    assert.throws(() => loadModel(s.dir), /vision_feature_layer.*list of layers/);
    edit((j) => ((j.vision_feature_layer = -2), ((j.text_config as Record<string, unknown>).hidden_size = "wide")));
    assert.throws(() => loadModel(s.dir), /text_config\.hidden_size/);
    writeFileSync(join(s.dir, "config.json"), JSON.stringify(cfg));
    writeFileSync(join(s.dir, "preprocessor_config.json"), JSON.stringify({ resample: 0 }));
    assert.throws(() => loadModel(s.dir), /preprocessor_config\.json: field 'resample': 0 is not supported/);
  } finally {
    rmSync(s.dir, { recursive: true });
  }
  assert.ok(readPreprocess("/nonexistent", "siglip", 32).resize);
});

for (const backend of selectedBackends()) {
  const dev = await openDevice(backend as BackendName);
  const skip = slowDevice(dev);
  test(`${backend}: tower rows vs float64, generateWithInputs with the tokens' own rows = generate, images = their reference rows`, { skip, timeout: 600_000 }, async () => {
    if (typeof dev === "string") return;
    for (const tower of ["siglip", "clip"] as const) {
      const s = writeLlava({ tower });
      const m = loadModel(s.dir);
      const driver = await Driver.open(m, new Engine(dev, { compile: compileGraph, ownsDevice: false }), { ctx: 64, prefill: [8] });
      try {
        const px = randomPixels(`${tower}-dev`);
        const [rows] = await driver.imageEmbeddings([{ pixelValues: px }]);
        const ref = referenceVision(s.w, px, tower, 2, tower === "clip");
        close(rows, flat(ref.embeds), `${backend} ${tower} embeds`);
        // By-value rows that equal the tokens' own embedding rows change nothing.
        const ids = driver.tokenize("Once upon a time, there was");
        const D = m.config.dim, tok = new Float32Array(m.store.bytes(m.map.get("tok_embd")!).slice().buffer);
        const own = new Float32Array(3 * D);
        for (let i = 0; i < 3; i++) own.set(tok.subarray(ids[2 + i] * D, (ids[2 + i] + 1) * D), i * D);
        const plain = await driver.generate(ids, { maxTokens: 6 });
        const given = await driver.generateWithInputs(ids, [{ at: 2, rows: own }], { maxTokens: 6 });
        assert.deepEqual(given.generatedIds, plain.generatedIds);
        // An image: its rows from the tower equal the reference's rows given by value.
        const prompt = `${IMAGE_TEXT} Once upon a`;
        const withImage = await driver.generate(prompt, { images: [{ pixelValues: px }], maxTokens: 8 });
        assert.equal(withImage.promptIds.filter((t) => t === IMAGE_TOKEN).length, 16);
        const refRows = Float32Array.from(flat(ref.embeds));
        const byRef = await driver.generateWithInputs(withImage.promptIds, [{ at: withImage.promptIds.indexOf(IMAGE_TOKEN), rows: refRows }], { maxTokens: 8 });
        assert.deepEqual(withImage.generatedIds, byRef.generatedIds);
        // From PNG bytes through the processor config.
        const png = new Uint8Array(readFileSync(join(IMAGES, "cat.png")));
        const fromPng = await driver.generate(prompt, { images: [png], maxTokens: 4 });
        assert.equal(fromPng.generatedIds.length, 4);
        await assert.rejects(driver.generate("no placeholder", { images: [png] }), InvalidArgumentError);
        await assert.rejects(driver.generate(prompt, { images: [new Uint8Array([1, 2, 3])] }), ImageError);
        await assert.rejects(driver.generateWithInputs(ids, [{ at: ids.length - 1, rows: own }]), /run past the prompt/);
        await assert.rejects(driver.generateWithInputs(ids, [{ at: 0, rows: new Float32Array(D + 1) }]), /whole rows/);
      } finally {
        await driver.close();
        m.close();
        rmSync(s.dir, { recursive: true });
      }
    }
  });
}

test("a text-only model refuses images (ModelKindError)", { timeout: 120_000 }, async () => {
  const dev = await openDevice("js");
  if (typeof dev === "string") return;
  const m = loadModel(new URL("../families/fixtures/llama/", import.meta.url).pathname);
  const driver = await Driver.open(m, new Engine(dev, { compile: compileGraph, ownsDevice: false }), { ctx: 32, prefill: [8] });
  try {
    await assert.rejects(driver.generate("hello", { images: [new Uint8Array(4)] }), ModelKindError);
    await assert.rejects(driver.imageEmbeddings([new Uint8Array(4)]), ModelKindError);
  } finally {
    await driver.close();
    m.close();
  }
});

test("data: URLs decode; remote and malformed ones are ImageErrors naming the part", () => {
  const png = new Uint8Array(readFileSync(join(IMAGES, "rgb8.png")));
  let b = "";
  for (const x of png) b += String.fromCharCode(x);
  assert.deepEqual(imageFromUrl(`data:image/png;base64,${btoa(b)}`, "u"), png);
  assert.throws(() => imageFromUrl("https://example.com/a.png", "messages[0].content[1].image_url"), /messages\[0\]\.content\[1\]\.image_url: only data: URLs .*https: URL/);
  assert.throws(() => imageFromUrl("data:image/png,abc", "u"), /must be base64/);
  assert.throws(() => imageFromUrl("data:image/png;base64,@@@", "u"), /outside base64/);
  assert.throws(() => imageFromUrl("data:image/png;base64,abcde", "u"), /malformed/);
});

test("js: chat with an image part = generate over the template's text; poot run --image and --messages image_url", { timeout: 300_000 }, async () => {
  const dev = await openDevice("js");
  if (typeof dev === "string") return;
  const s = writeLlava({ tower: "siglip" });
  writeFileSync(join(s.dir, "chat_template.json"), JSON.stringify({
    chat_template: "{{ bos_token }}{% for m in messages %}USER: {% for c in m['content'] %}{% if c['type'] == 'image' %}" +
      `${IMAGE_TEXT}\n{% else %}{{ c['text'] }}{% endif %}{% endfor %}{% endfor %} ASSISTANT:`,
  }));
  const m = loadModel(s.dir);
  const png = new Uint8Array(readFileSync(join(IMAGES, "grid.png")));
  const driver = await Driver.open(m, new Engine(dev, { compile: compileGraph, ownsDevice: false }), { ctx: 64, prefill: [8] });
  try {
    const chat = await driver.chat([{ role: "user", content: [{ type: "image", image: png }, { type: "text", text: "Once upon" }] }], { maxTokens: 5 });
    const plain = await driver.generate(`${IMAGE_TEXT}\nOnce upon ASSISTANT:`, { images: [png], maxTokens: 5, addBos: true });
    assert.equal(chat.promptIds.filter((t) => t === IMAGE_TOKEN).length, 16);
    // The template's "USER: " prefix aside, the image rows and what follows are the same tokens.
    assert.deepEqual(chat.promptIds.slice(chat.promptIds.indexOf(IMAGE_TOKEN), chat.promptIds.indexOf(IMAGE_TOKEN) + 16), plain.promptIds.slice(1, 17));
    assert.equal(chat.generatedIds.length, 5);
  } finally {
    await driver.close();
    m.close();
  }
  const cli = (args: string[]) => poot(["run", "-m", s.dir, "--backend", "js", "-n", "3", "--json", ...args]);
  const a = cli(["--image", join(IMAGES, "cat.png"), "-p", "Once upon"]);
  assert.equal(a.code, 0, a.stderr);
  const sum = JSON.parse(a.stdout.trim().split("\n").at(-1)!);
  assert.equal(sum.prompt_token_ids.filter((t: number) => t === IMAGE_TOKEN).length, 16);
  assert.equal(sum.generated_token_ids.length, 3);
  let b = "";
  for (const x of readFileSync(join(IMAGES, "cat.png"))) b += String.fromCharCode(x);
  const msgs = join(s.dir, "m.json");
  writeFileSync(msgs, JSON.stringify([{ role: "user", content: [{ type: "image_url", image_url: { url: `data:image/png;base64,${btoa(b)}` } }, { type: "text", text: "Once" }] }]));
  const c = cli(["--messages", msgs]);
  assert.equal(c.code, 0, c.stderr);
  assert.equal(JSON.parse(c.stdout.trim().split("\n").at(-1)!).prompt_token_ids.filter((t: number) => t === IMAGE_TOKEN).length, 16);
  const bad = cli(["--image", join(s.dir, "missing.png"), "-p", "x"]);
  assert.equal(bad.code, 1);
  assert.match(bad.stderr, /ImageError: .*missing\.png: cannot be read/);
  const text = poot(["run", "--backend", "js", "-n", "1", "--image", join(IMAGES, "cat.png"), "-p", "x"]);
  assert.match(text.stderr, /ModelKindError: .*no vision tower/);
  rmSync(s.dir, { recursive: true });
});
