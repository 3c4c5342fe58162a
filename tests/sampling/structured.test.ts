// Structured output through the Driver (llm/grammar.ts, xgrammar's mask applied by the device sampler):
// - stories260K, 100 seeds (0..19 under Bun; in CI Deno runs 20..99, see ALL_SEEDS) at temperature 1 under a JSON schema: every output parses and validates
//   (zod schema equal to the JSON schema) and ends by end-of-generation, not by the token limit;
// - json_object: every output that ends (eos) within 200 tokens parses as a JSON object (an object has no size
//   bound: stories260K often runs past 200 tokens; the count is printed);
// - a grammar admitting one string yields exactly that string, also with a logit bias against its tokens;
// - the family fixtures (tests/families/, tiny random-weight models of 7 families with their real tokenizers,
//   SPM byte-fallback and GPT-2 byte-level): 100 seeds each (split alike) under the schema with a `pattern` for the name in
//   place of maxLength, each output validates (random weights spell UTF-16 surrogates byte by byte, which
//   xgrammar admits in free strings and which decode as 3 U+FFFD each; llm/grammar.ts says why);
// - bad formats are GrammarErrors naming the part that is wrong.
// JS device (the sampler kernel is held to its oracle on every device by process.test.ts).
import { test } from "node:test";
import assert from "node:assert/strict";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { z } from "zod";
import { compileGraph, Driver, Engine, loadModel } from "../../engine.ts";
import { JsDevice } from "../../backends/js/device.ts";
import { GrammarError } from "../../llm/grammar.ts";
import { FAMILY_DIRS, FIXTURES } from "../families/fixtures.ts";

const SCHEMA = {
  type: "object",
  properties: {
    name: { type: "string", maxLength: 12 },
    age: { type: "integer", minimum: 0, maximum: 120 },
    happy: { type: "boolean" },
    color: { enum: ["red", "green", "blue"] },
  },
  required: ["name", "age", "happy", "color"],
  additionalProperties: false,
};
const FIXTURE_SCHEMA = { ...SCHEMA, properties: { ...SCHEMA.properties, name: { type: "string", pattern: "^[a-z ]{1,12}$" } } };
const Zod = z.object({
  name: z.string().refine((s) => [...s].length <= 12, "maxLength 12 (code points, as JSON Schema counts)"),
  age: z.number().int().min(0).max(120),
  happy: z.boolean(),
  color: z.enum(["red", "green", "blue"]),
}).strict();

function validates(text: string, what: string, limited = true): void {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    assert.fail(`${what}: not JSON (${(e as Error).message}): ${JSON.stringify(text)}`);
  }
  const r = (limited ? Zod : Zod.extend({ name: z.string().regex(/^[a-z ]{1,12}$/) })).safeParse(v);
  assert.ok(r.success, `${what}: ${JSON.stringify(text)} fails the schema: ${r.success ? "" : r.error.message}`);
}

/**
 * Seeds on stories260K and per family fixture: 100. Under Bun, seeds 0..19: what depends on the runtime (xgrammar's
 * WASM under JavaScriptCore, the mask it hands the sampler) runs on every token of 20 outputs of each model, while
 * the JS device's numerics run ~9x slower there (the reason .ci/test runs the numerics suites under Deno only).
 * Deno runs all 100, or, where the same run of .ci/test runs Bun's part beside it (it sets POOT_RUNTIME_SPLIT=1
 * for both), seeds 20..99: each seed's check still runs once in CI, under one runtime or the other.
 */
const ALL_SEEDS = 100, BUN_SEEDS = 20;
const [FROM, TO] = "Bun" in globalThis ? [0, BUN_SEEDS] : [process.env.POOT_RUNTIME_SPLIT === "1" ? BUN_SEEDS : 0, ALL_SEEDS];
const SEEDS = TO - FROM;
const seedRange = FROM === 0 ? `${SEEDS} seeds` : `seeds ${FROM}..${TO - 1}`;

const stories = loadModel(fileURLToPath(new URL("../../models/stories260K/stories260K.gguf", import.meta.url)));

test(`structured output on stories260K: ${seedRange} at T 1 all parse and validate; a one-string grammar yields it`, { timeout: 600_000 }, async () => {
  const engine = new Engine(new JsDevice({}), { compile: compileGraph });
  const driver = await Driver.open(stories, engine, { ctx: 256, prefill: [16, 4] });
  try {
    const seen = new Set<string>();
    for (let seed = FROM; seed < TO; seed++) {
      const r = await driver.generate("Once upon a time", { maxTokens: 150, sampler: { temperature: 1, seed }, format: { type: "json_schema", schema: SCHEMA } });
      assert.equal(r.finish, "eos", `seed ${seed}: ended by ${r.finish}: ${JSON.stringify(r.text)}`);
      validates(r.text, `seed ${seed}`);
      seen.add(r.text);
    }
    assert.ok(seen.size > SEEDS / 2, `seeds give different objects (${seen.size} distinct of ${SEEDS})`);
    // json_object has no size bound: an output cut by the token limit is a valid prefix, not checked here
    let ended = 0;
    for (let seed = 0; seed < 10; seed++) {
      const r = await driver.generate("Lily", { maxTokens: 200, sampler: { temperature: 0.7, seed, topK: 5 }, format: { type: "json_object" } });
      if (r.finish !== "eos") continue;
      ended++;
      const v = JSON.parse(r.text);
      assert.ok(v !== null && typeof v === "object" && !Array.isArray(v), `json_object seed ${seed}: ${r.text}`);
    }
    console.log(`json_object: ${ended} of 10 outputs ended within 200 tokens (each of those parsed as an object)`);
    const only = "The little dog ran home.";
    const grammar = `root ::= ${JSON.stringify(only)}`;
    const tok = stories.tokenizer;
    const against = Object.fromEntries(tok.encode(" little dog", { addBos: false }).map((t) => [t, -100]));
    for (const sampler of [{ temperature: 1, seed: 5 }, { temperature: 0 }, { temperature: 1.5, seed: 9, logitBias: against }]) {
      const r = await driver.generate("Once", { maxTokens: 60, sampler, format: { type: "grammar", grammar } });
      assert.equal(r.text, only);
      assert.equal(r.finish, "eos");
    }
    await assert.rejects(driver.generate("Once", { format: { type: "grammar", grammar: "root ::= (" } }), GrammarError);
    await assert.rejects(driver.generate("Once", { format: { type: "json_schema", schema: "not an object" } }), /json_schema: the schema must be a JSON object/);
    await assert.rejects(driver.generate("Once", { format: { type: "yaml" } as never }), /is not json_schema, json_object or grammar/);
    // the driver keeps working after the errors
    assert.equal((await driver.generate("Once", { maxTokens: 30, format: { type: "grammar", grammar } })).text, only);
  } finally {
    await driver.close();
  }
});

for (const family of FAMILY_DIRS) {
  test(`structured output on the ${family} fixture: ${seedRange} at T 1 validate against the schema`, { timeout: 600_000 }, async () => {
    const model = loadModel(`${FIXTURES}${family}`);
    const engine = new Engine(new JsDevice({}), { compile: compileGraph });
    const driver = await Driver.open(model, engine, { ctx: 192, prefill: [8] });
    try {
      for (let seed = FROM; seed < TO; seed++) {
        const r = await driver.generate("Hello", { maxTokens: 160, sampler: { temperature: 1, seed }, format: { type: "json_schema", schema: FIXTURE_SCHEMA } });
        assert.equal(r.finish, "eos", `seed ${seed}: ended by ${r.finish}: ${JSON.stringify(r.text)}`);
        validates(r.text, `${family} seed ${seed}`, false);
      }
    } finally {
      await driver.close();
    }
  });
}
