// A vision-language model served: POST /v1/chat/completions with image_url parts (data: URLs) through the fetch
// handler (no socket), on every backend present. The image's rows come from the tower run between batch steps and
// are given by value in the batched prefill; the reply equals the Driver's (greedy) for the same conversation,
// a text-only request on the same server still works, and bad images are 400s naming the part.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { compileGraph, Driver, Engine, loadModel } from "../../engine.ts";
import { servingCompile } from "../../llm/serve/batch.ts";
import { Server } from "../../llm/serve/server.ts";
import { openDevice, selectedBackends, slowDevice } from "../devices/index.ts";
import { IMAGE_TEXT, writeLlava } from "./synth.ts";

const IMAGES = new URL("./images/", import.meta.url).pathname;
const post = (path: string, body: unknown) =>
  new Request(`http://x${path}`, { method: "POST", body: JSON.stringify(body), headers: { "content-type": "application/json" } });
function dataUrl(file: string): string {
  let b = "";
  for (const x of readFileSync(join(IMAGES, file))) b += String.fromCharCode(x);
  return `data:image/png;base64,${btoa(b)}`;
}

for (const backend of selectedBackends()) {
  const dev = await openDevice(backend);
  test(`serve a VLM on ${backend}: chat with image_url parts equals the driver's reply; text-only still served; bad images are 400s`, { skip: slowDevice(dev), timeout: 600_000 }, async () => {
    if (typeof dev === "string") return;
    const s = writeLlava({ tower: "clip" });
    writeFileSync(join(s.dir, "chat_template.json"), JSON.stringify({
      chat_template: "{{ bos_token }}{% for m in messages %}USER: {% if m['content'] is string %}{{ m['content'] }}{% else %}" +
        `{% for c in m['content'] %}{% if c['type'] == 'image' %}${IMAGE_TEXT}\n{% else %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}{% endfor %} ASSISTANT:`,
    }));
    const model = loadModel(s.dir);
    const messages = [{ role: "user", content: [{ type: "image_url", image_url: { url: dataUrl("cat.png") } }, { type: "text", text: "Once upon a time" }] }];
    const server = await Server.open(model, new Engine(dev, { compile: servingCompile, ownsDevice: false }), { ctx: 64, slots: 2, chunk: 8, kvBlocks: 2 * 4 + 1 });
    let served: string, twice: string;
    try {
      const ask = async (body: unknown) => {
        const res = await server.handler(post("/v1/chat/completions", body));
        return { status: res.status, body: await res.json() };
      };
      const a = await ask({ messages, max_tokens: 6, temperature: 0 });
      assert.equal(a.status, 200, JSON.stringify(a.body));
      served = a.body.choices[0].message.content;
      assert.ok(a.body.usage.prompt_tokens > 16, "the image's 16 rows are in the prompt");
      // The same image again (no prefix sharing for image prompts), and a text-only request on the same server.
      twice = (await ask({ messages, max_tokens: 6, temperature: 0 })).body.choices[0].message.content;
      assert.equal(twice, served);
      const t = await ask({ messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 4, temperature: 0 });
      assert.equal(t.status, 200);
      for (const [url, code] of [["https://example.com/a.png", "invalid_image_url"], ["data:image/png;base64,AAAA", "invalid_image"]]) {
        const bad = await ask({ messages: [{ role: "user", content: [{ type: "image_url", image_url: { url } }] }] });
        assert.equal(bad.status, 400, url);
        assert.equal(bad.body.error.code, code, url);
      }
      const two = await ask({ messages: [{ role: "user", content: [{ type: "text", text: `two ${IMAGE_TEXT}` }, { type: "image_url", image_url: { url: dataUrl("cat.png") } }] }] });
      assert.equal(two.status, 400, "a placeholder in the text plus an image part: the counts differ");
    } finally {
      await server.shutdown(0);
    }
    // The Driver (its own compile, not the serving one) on the same conversation: the same greedy text.
    const driver = await Driver.open(model, new Engine(dev, { compile: compileGraph, ownsDevice: false }), { ctx: 64, prefill: [8] });
    try {
      const png = new Uint8Array(readFileSync(join(IMAGES, "cat.png")));
      const r = await driver.chat([{ role: "user", content: [{ type: "image", image: png }, { type: "text", text: "Once upon a time" }] }], { maxTokens: 6 });
      assert.equal(served, r.text);
    } finally {
      await driver.close();
      model.close();
      rmSync(s.dir, { recursive: true });
    }
  });
}
