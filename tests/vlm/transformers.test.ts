// Tier 3 for the vision-language path: random-weight LlavaForConditionalGeneration checkpoints written by
// transformers (tests/vlm/fixgen.py, run on the GPU machine) against poot on every backend present:
//   - the processor's pixel_values vs llm/preprocess.ts on the committed PNGs (within one 8-bit step),
//   - the tower's selected rows and the projector's rows vs transformers' (tier-2 tolerance, from its pixel_values),
//   - the prompt ids (placeholder expanded) and fp32 greedy tokens; a flip is allowed only where transformers'
//     top-two margin is inside the tolerance (then the rest of the sequence is not compared).
// Until the fixtures exist every test here skips, naming the command that makes them.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { compileGraph, Driver, Engine, loadModel } from "../../engine.ts";
import { decodeImage } from "../../llm/image.ts";
import { preprocess } from "../../llm/preprocess.ts";
import { type BackendName, openDevice, selectedBackends, slowDevice } from "../devices/index.ts";

const FIXTURES = new URL("./fixtures/", import.meta.url).pathname;
const IMAGES = new URL("./images/", import.meta.url).pathname;
const MODELS = ["llava-siglip", "llava-clip"];
const MISSING = "fixtures not generated yet (run tests/vlm/fixgen.py on the GPU machine)";
// Tier 2 against transformers' fp32 (a different summation order over the same weights).
const ATOL = 2e-3, RTOL = 2e-3, MARGIN = 1e-2;

interface Expected {
  image_token: number;
  prompt: string;
  /** The token greedy decoding never picks (the image placeholder). */
  suppressed: number;
  images: { file: string; pixel_values: number[]; frames: number[]; embeds: number[]; ids: number[]; greedy: number[]; margins: number[] }[];
  chat: { messages: { role: string; content: { type: string; text?: string }[] }[]; text: string; ids: number[]; greedy: number[]; margins: number[]; image: string };
}

function close(got: ArrayLike<number>, want: ArrayLike<number>, what: string, atol = ATOL, rtol = RTOL): void {
  assert.equal(got.length, want.length, `${what}: length`);
  for (let i = 0; i < want.length; i++) {
    const tol = atol + rtol * Math.abs(want[i]);
    assert.ok(Number.isFinite(got[i]) && Math.abs(got[i] - want[i]) <= tol, `${what}[${i}]: ${got[i]} vs transformers ${want[i]} (tolerance ${tol})`);
  }
}

/** Greedy tokens equal transformers' up to the first step whose reference margin is inside the tolerance. */
function sameTokens(got: number[], want: number[], margins: number[], what: string): void {
  for (let i = 0; i < want.length; i++) {
    if (got[i] === want[i]) continue;
    assert.ok(margins[i] < MARGIN, `${what}: token ${i} is ${got[i]}, transformers ${want[i]} (margin ${margins[i]} >= ${MARGIN})`);
    return;
  }
}

for (const name of MODELS) {
  const dir = join(FIXTURES, name);
  const skip = existsSync(join(dir, "expected.json")) ? false : MISSING;
  const exp = skip ? undefined : JSON.parse(readFileSync(join(dir, "expected.json"), "utf8")) as Expected;

  test(`${name}: the processor's pixel values (resize, crop, rescale, normalize) within one 8-bit step`, { skip }, async () => {
    const m = loadModel(dir);
    try {
      const p = m.preprocess!;
      for (const e of exp!.images) {
        const got = preprocess(await decodeImage(new Uint8Array(readFileSync(join(IMAGES, e.file))), e.file), p);
        // one 8-bit step of the input is rescale/std after normalization
        close(got.data, e.pixel_values, `${name} ${e.file} pixel values`, (p.rescale / Math.min(...p.std)) * 1.01, 0);
      }
    } finally {
      m.close();
    }
  });

  for (const backend of selectedBackends()) {
    const dev = skip ? skip : await openDevice(backend as BackendName);
    test(`${backend}: ${name} tower and projector rows, prompt ids and greedy tokens equal transformers'`, { skip: skip || slowDevice(dev), timeout: 600_000 }, async () => {
      if (typeof dev === "string") return;
      const m = loadModel(dir);
      const driver = await Driver.open(m, new Engine(dev, { compile: compileGraph, ownsDevice: false }), { ctx: 128 });
      // fixgen.py never lets transformers pick the <image> placeholder; a -100 bias does the same here.
      const sampler = { logitBias: { [exp!.suppressed]: -100 } };
      try {
        for (const e of exp!.images) {
          const pv = Float32Array.from(e.pixel_values);
          const [rows] = await driver.imageEmbeddings([{ pixelValues: pv }]);
          close(rows, e.embeds, `${name} ${e.file} projector rows`);
          const r = await driver.generate(exp!.prompt, { images: [{ pixelValues: pv }], maxTokens: e.greedy.length, ignoreEos: true, sampler });
          assert.deepEqual(r.promptIds, e.ids, `${name} ${e.file}: prompt ids`);
          sameTokens(r.generatedIds, e.greedy, e.margins, `${name} ${e.file}`);
          // From the PNG through poot's own processor: the same tokens (pixels within one 8-bit step).
          const png = new Uint8Array(readFileSync(join(IMAGES, e.file)));
          const viaPng = await driver.generate(exp!.prompt, { images: [png], maxTokens: e.greedy.length, ignoreEos: true, sampler });
          sameTokens(viaPng.generatedIds, e.greedy, e.margins, `${name} ${e.file} from the PNG`);
        }
        const c = exp!.chat;
        const png = new Uint8Array(readFileSync(join(IMAGES, c.image)));
        // The conversation through poot's chat path: the image part renders as the template's <image>.
        const messages = c.messages.map((m) => ({ role: m.role, content: m.content.map((p) => (p.type === "image" ? { type: "image" as const, image: png } : { type: "text" as const, text: p.text! })) }));
        const r = await driver.chat(messages, { maxTokens: c.greedy.length, ignoreEos: true, sampler });
        assert.deepEqual(r.promptIds, c.ids, `${name} chat: prompt ids`);
        sameTokens(r.generatedIds, c.greedy, c.margins, `${name} chat`);
      } finally {
        await driver.close();
        m.close();
      }
    });
  }
}
