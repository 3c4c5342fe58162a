// Shared by the chat feature tests (tools, Mistral's tools, reasoning): a model served on the JS device with the
// official `openai` client and a raw JSON poster, and the test tools with the check of get_weather's arguments.
import assert from "node:assert/strict";
import OpenAI from "openai";
import { Engine } from "../../backends/executor.ts";
import { JsDevice } from "../../backends/js/device.ts";
import type { ModelHandle } from "../../llm/model.ts";
import { servingCompile } from "../../llm/serve/batch.ts";
import { listen } from "../../llm/serve/listen.ts";
import { type ServeOptions, Server } from "../../llm/serve/server.ts";
import type { Tool } from "../../llm/tools.ts";

/** A tool with a schema (an enum and a bounded integer) and one without parameters. */
export const TOOLS: Tool[] = [
  {
    type: "function",
    function: {
      name: "get_weather",
      parameters: { type: "object", properties: { unit: { enum: ["c", "f"] }, days: { type: "integer", minimum: 1, maximum: 9 } }, required: ["unit", "days"] },
    },
  },
  { type: "function", function: { name: "now" } },
];

/** get_weather's arguments (a JSON text) satisfy its schema. */
export function checkWeather(args: string): void {
  const a = JSON.parse(args);
  assert.deepEqual(Object.keys(a).sort(), ["days", "unit"]);
  assert.ok(a.unit === "c" || a.unit === "f", args);
  assert.ok(Number.isInteger(a.days) && a.days >= 1 && a.days <= 9, args);
}

/** `m` served on the JS device (two slots, context `ctx`); stop() closes the server and the model. */
export async function serveChat(m: ModelHandle, ctx: number, o: ServeOptions = {}) {
  const exec = new Engine(new JsDevice(), { compile: servingCompile, timeoutMs: 120_000 });
  const server = await Server.open(m, exec, { ctx, slots: 2, chunk: 64, kvBlocks: 2 * Math.ceil(ctx / 16) + 1, ...o });
  const l = await listen(server.handler, { hostname: "127.0.0.1", port: 0 });
  const base = `http://127.0.0.1:${l.port}`;
  return {
    id: server.modelId,
    base,
    client: new OpenAI({ baseURL: `${base}/v1`, apiKey: "none", maxRetries: 0 }),
    /** POSTs a chat body; the status and the parsed JSON answer. */
    post: async (body: object) => {
      const r = await fetch(`${base}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
      return { status: r.status, body: await r.json() };
    },
    stop: async () => {
      await server.shutdown(0);
      await l.close();
      m.close();
    },
  };
}
