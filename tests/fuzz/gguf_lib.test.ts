// The GGUF fuzz cases in-process, through the library: loadModel (or Driver.open for a --ctx case) must throw
// the case's typed LlmError with a one-line message matching the case, and leave no file handle open. Plus the
// pieces the cases rely on: control-character escaping, checkTensors on what GGUF cannot express (a byte
// length that disagrees with dtype and shape), and checkContext's arithmetic.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readdirSync, readlinkSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ContextLengthError, escapeControls, LlmError, shown, TensorMismatchError } from "../../llm/errors.ts";
import { loadModel } from "../../llm/model.ts";
import { Driver } from "../../llm/driver.ts";
import { Engine } from "../../backends/executor.ts";
import { openBackend } from "../../backends/open.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { checkContext, checkTensors } from "../../llm/validate.ts";
import { caseRng, fuzzSeed } from "./case.ts";
import { cases } from "./gguf_cases.ts";

const seed = fuzzSeed();
const FD = "/proc/self/fd";
/** Open descriptors of this process that point into `dir` (none known without /proc). */
function openUnder(dir: string): string[] {
  if (!existsSync(FD)) return [];
  return readdirSync(FD).map((f) => {
    try {
      return readlinkSync(join(FD, f));
    } catch {
      return "";
    }
  }).filter((t) => t.startsWith(dir));
}

async function thrownBy(args: string[]): Promise<unknown> {
  const flag = (f: string) => args[args.indexOf(f) + 1];
  try {
    const model = loadModel(flag("--model"));
    if (!args.includes("--ctx")) return undefined;
    const engine = new Engine(await openBackend("js"), { compile: compileGraph });
    try {
      await Driver.open(model, engine, { ctx: Number(flag("--ctx")), allowLongContext: args.includes("--allow-long-context") });
    } finally {
      await engine.unload();
      model.close();
    }
  } catch (e) {
    return e;
  }
  return undefined;
}

test(`library: every GGUF fuzz case throws its typed LlmError, one line, no handle left open (${cases.length} cases, seed ${seed})`, async () => {
  const failures: string[] = [];
  for (const c of cases) {
    const dir = mkdtempSync(join(tmpdir(), "poot-fuzz-lib-"));
    try {
      const e = await thrownBy(await c.setup(dir, caseRng(seed, c.name)));
      if (!(e instanceof LlmError)) {
        failures.push(`${c.name}: ${e === undefined ? "no error" : `not an LlmError: ${(e as Error)?.name}: ${(e as Error)?.message}`}`);
        continue;
      }
      const line = `${e.name}: ${e.message}`;
      if (c.error && e.name !== c.error) failures.push(`${c.name}: ${e.name}, expected ${c.error}`);
      if (!c.message.test(line)) failures.push(`${c.name}: "${line.slice(0, 300)}" does not match ${c.message}`);
      // deno-lint-ignore no-control-regex
      if (/[\x00-\x1f\x7f]/.test(e.message)) failures.push(`${c.name}: a raw control character in the message`);
    } finally {
      const open = openUnder(dir);
      if (open.length) failures.push(`${c.name}: left open: ${open.join(", ")}`);
      rmSync(dir, { recursive: true, force: true });
    }
  }
  assert.deepEqual(failures, [], `POOT_FUZZ_SEED=${seed} reproduces:\n${failures.join("\n")}`);
});

test("escapeControls / shown: no control character survives, long strings are cut with a count", () => {
  assert.equal(escapeControls("a\nb\r\t\x1b[2J\x07\x7f\x9b\u2028\u202e"), "a\\nb\\r\\t\\x1b[2J\\x07\\x7f\\x9b\\u2028\\u202e");
  assert.equal(escapeControls("héllo ▁ 🦙"), "héllo ▁ 🦙");
  assert.equal(shown("x".repeat(130)), `${"x".repeat(120)}... (10 more)`);
  assert.equal(shown("\n".repeat(3), 2), "\\n\\n... (1 more)");
  const e = new LlmError("line one\nline two \x1b[31m");
  assert.equal(e.message, "line one\\nline two \\x1b[31m");
});

test("checkTensors: a byte length that disagrees with dtype and shape, and a block type cut mid-block", () => {
  const store = (info: { name: string; dtype: "f32" | "q8_0"; shape: number[]; byteLength: number }) => ({ info: (n: string) => (n === info.name ? info : undefined) });
  checkTensors("f", [{ name: "w", shape: [2, 3], dtypes: ["f32"] }], store({ name: "w", dtype: "f32", shape: [2, 3], byteLength: 24 }));
  assert.throws(
    () => checkTensors("f", [{ name: "w", shape: [2, 3], dtypes: ["f32"] }], store({ name: "w", dtype: "f32", shape: [2, 3], byteLength: 20 })),
    (e: Error) => e instanceof TensorMismatchError && /tensor 'w': 20 bytes, but f32 \[2, 3\] takes 24/.test(e.message),
  );
  assert.throws(
    () => checkTensors("f", [{ name: "w", shape: [2, 48], dtypes: ["q8_0"] }], store({ name: "w", dtype: "q8_0", shape: [2, 48], byteLength: 102 })),
    (e: Error) => e instanceof TensorMismatchError && /innermost dim 48 is not a whole number of q8_0 blocks/.test(e.message),
  );
});

test("checkContext: default, trained limit and its override, device memory and the binding limit", () => {
  const target = { backend: "js" as const, device: "test", memory: { totalBytes: 2 ** 30 }, caps: { maxBindingBytes: 2 ** 27 } as never };
  const base = { trained: 4096, trainedKey: "llama.context_length", bytesPerPosition: 2 ** 16, bufferBytesPerPosition: 2 ** 10, fixedBytes: 2 ** 28, target };
  assert.equal(checkContext(base), 2048);
  assert.equal(checkContext({ ...base, trained: 512 }), 512);
  assert.equal(checkContext({ ...base, requested: 4096 }), 4096);
  assert.throws(() => checkContext({ ...base, requested: 8192 }), (e: Error) => e instanceof ContextLengthError && /more than the 4096 .*llama\.context_length.*--allow-long-context/.test(e.message));
  // (2^30 - 2^28) / 2^16 = 12288 positions fit.
  assert.equal(checkContext({ ...base, requested: 12288, allowLonger: true }), 12288);
  assert.throws(() => checkContext({ ...base, requested: 12289, allowLonger: true }), (e: Error) => e instanceof ContextLengthError && /at most 12288 positions fit/.test(e.message));
  assert.throws(() => checkContext({ ...base, requested: 2 ** 17 + 1, allowLonger: true, bytesPerPosition: 1 }), /one layer's K cache .* at most 131072 positions fit/);
  for (const bad of [16.5, 1, 0, -5, NaN, 2 ** 31]) assert.throws(() => checkContext({ ...base, requested: bad, allowLonger: true }), ContextLengthError, String(bad));
});
