// Bad Hugging Face folders and chat inputs (tests/fuzz/hf_cases.ts), run in-process: every case ends in an
// LlmError whose message is one line matching the case, thrown while loading or rendering, before any device
// is opened (so nothing can be left half-loaded on one). Then the same cases through `deno run cli/main.ts`
// (a few seeds of each is the fuzz runner's job): exit 1, nothing on stdout, one `poot:` line on stderr.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { loadModel } from "../../llm/model.ts";
import { LlmError } from "../../llm/errors.ts";
import { messagesPrompt } from "../../cli/chat.ts";
import { cases } from "../fuzz/hf_cases.ts";

function seeded(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => ((s = (Math.imul(s ^ (s >>> 15), 0x2c1b3c6d) + 0x6d2b79f5) >>> 0) / 2 ** 32);
}

/** What `poot run` does with these args before it opens a backend. */
function load(args: string[]): void {
  const at = (flag: string) => (args.includes(flag) ? args[args.indexOf(flag) + 1] : undefined);
  const model = loadModel(at("--model")!);
  try {
    const messages = at("--messages");
    if (messages) messagesPrompt(model, messages);
  } finally {
    model.close();
  }
}

for (const c of cases) {
  test(`${c.name} (${c.cls}): a typed one-line error, seeds 1..4`, async () => {
    for (let seed = 1; seed <= 4; seed++) {
      const dir = mkdtempSync(join(tmpdir(), "poot-hf-"));
      try {
        const args = await c.setup(dir, seeded(seed));
        let err: unknown;
        try {
          load(args);
        } catch (e) {
          err = e;
        }
        assert.ok(err instanceof LlmError, `seed ${seed}: expected an LlmError, got ${err === undefined ? "no error" : String(err)}`);
        assert.doesNotMatch(err.message, /\n/, "one line");
        assert.match(err.message, c.message, `seed ${seed}`);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }
  });
}

const deno = (globalThis as unknown as { Deno?: { execPath(): string } }).Deno;
const main = fileURLToPath(new URL("../../cli/main.ts", import.meta.url));
test("the same cases through the CLI: exit 1, one 'poot:' line on stderr, nothing on stdout", { skip: deno ? false : "runs the CLI under deno (the fuzz runner covers bun)", timeout: 600_000 }, async () => {
  for (const c of cases) {
    const dir = mkdtempSync(join(tmpdir(), "poot-hf-"));
    try {
      const args = await c.setup(dir, seeded(7));
      const r = spawnSync(deno!.execPath(), ["run", "-A", main, ...args], { encoding: "utf8", env: { ...process.env, VK_DRIVER_FILES: "/nonexistent", NO_COLOR: "1" } });
      const lines = r.stderr.split("\n").filter((l) => l && !/XDG_RUNTIME_DIR/.test(l));
      assert.equal(r.status, c.exit, `${c.name}: exit ${r.status}, stderr ${r.stderr}`);
      assert.equal(r.stdout, "", `${c.name}: stdout`);
      assert.equal(lines.length, 1, `${c.name}: stderr ${r.stderr}`);
      assert.match(lines[0], /^poot: /);
      assert.match(lines[0], c.message, c.name);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
});
