// Runs the command-line fuzz cases (tests/fuzz/cli_cases.ts) under the runtime running this test: exit code,
// exactly one stderr line starting "poot:" that matches the case, nothing on stdout, nothing written outside
// the case's temp dir (its XDG runtime dir included), within a time bound. The shared runner of tests/fuzz/
// runs the same cases with RSS bounds too; this file keeps them checked until it exists, and is cheap.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { cases } from "../fuzz/cli_cases.ts";
import { poot } from "./poot.ts";

/** A seeded uniform [0,1) generator (mulberry32), so a failing case reproduces. */
function rng(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}

const SEED = 20261201;

for (const [i, c] of cases.entries()) {
  test(`cli case ${c.name} (${c.cls})`, async () => {
    const dir = mkdtempSync(join(tmpdir(), "poot-case-"));
    const tmp = mkdtempSync(join(tmpdir(), "poot-tmp-"));
    try {
      const args = await c.setup(dir, rng(SEED + i));
      const before = readdirSync(dir).sort();
      // TMPDIR is private and XDG_RUNTIME_DIR unset: a command that made its runtime dir would show up there.
      const r = poot(args, { stdin: c.stdin ?? "", env: { TMPDIR: tmp, XDG_RUNTIME_DIR: undefined }, timeoutMs: 60_000 });
      const lines = r.stderr.split("\n").filter((l) => l !== "");
      assert.equal(r.stdout, "", "nothing on stdout");
      assert.equal(lines.length, 1, `one stderr line, got:\n${r.stderr}`);
      assert.match(lines[0], /^poot: /);
      assert.match(lines[0], c.message);
      assert.equal(r.code, c.exit, `exit code (stderr: ${lines[0]})`);
      assert.deepEqual(readdirSync(dir).sort(), before, "nothing written in the case dir");
      assert.deepEqual(readdirSync(tmp), [], "nothing written in TMPDIR (no XDG runtime dir for a bad command line)");
    } finally {
      rmSync(dir, { recursive: true, force: true });
      rmSync(tmp, { recursive: true, force: true });
    }
  });
}
