// The fuzz suite: every case of every tests/fuzz/*_cases.ts run through `poot` as a child process under Deno
// and Bun (POOT_FUZZ_RUNTIMES restricts them), two at a time. Each must exit with its code and one "poot:"
// line naming the problem, print nothing on stdout, write nothing, and stay within 30 s and 512 MiB peak RSS
// (runner.ts says how RSS is bounded). Seeded: POOT_FUZZ_SEED=N (or "random") picks other bytes of the same
// classes; a failure prints the seed that reproduces it, and POOT_FUZZ_ONLY=<regexp> runs just the cases it
// names. POOT_FUZZ_CLI points the suite at another tree's cli/main.ts (to measure a before/after). A runtime
// that is not installed is a skip with the reason. Where .ci/test runs both runtimes (POOT_RUNTIME_SPLIT=1), they
// deal gguf_cases.ts's cases between them, every class reached by both (runner.ts forRuntime).
import { test } from "node:test";
import assert from "node:assert/strict";
import { basename } from "node:path";
import { pathToFileURL } from "node:url";
import type { FuzzCase } from "./case.ts";
import { fuzzSeed } from "./case.ts";
import { BOUNDS, caseFiles, forRuntime, repoChanges, repoSnapshot, report, runAll, runtimeBinary, runtimes, selected } from "./runner.ts";

const seed = fuzzSeed();
const files: [string, FuzzCase[]][] = [];
for (const f of caseFiles()) {
  const mod = await import(pathToFileURL(f).href) as { cases?: FuzzCase[] };
  files.push([basename(f), mod.cases ?? []]);
}

test("fuzz case names are unique and every case has a class, an exit code and a message", () => {
  const seen = new Set<string>();
  for (const [file, cases] of files) {
    assert.ok(cases.length > 0, `${file} exports no cases`);
    for (const c of cases) {
      assert.ok(!seen.has(c.name), `duplicate case name ${c.name}`);
      seen.add(c.name);
      assert.ok(c.cls && c.message instanceof RegExp && Number.isInteger(c.exit) && c.exit > 0, c.name);
    }
    // forRuntime deals these between the runtimes: a class of one case would reach only one of them
    if (file === "gguf_cases.ts") {
      for (const cls of new Set(cases.map((c) => c.cls))) assert.ok(cases.filter((c) => c.cls === cls).length >= 2, `${file}: class ${cls} has one case`);
    }
  }
});

for (const rt of runtimes()) {
  const bin = runtimeBinary(rt);
  for (const [file, all] of files) {
    const cases = forRuntime(file, selected(all), rt);
    if (!cases.length) continue;
    test(`fuzz ${file} under ${rt}: ${cases.length} cases, one line each, right exit, nothing written, ` +
      `under ${BOUNDS.wallMs / 1000} s and ${BOUNDS.rssMiB} MiB (seed ${seed})`, {
      skip: bin ? false : `${rt} is not installed (not in node_modules/.bin or on PATH)`,
      timeout: 600_000,
    }, async () => {
      const repo = repoSnapshot();
      const results = await runAll(cases, rt, bin!, seed);
      assert.deepEqual(repoChanges(repo, repoSnapshot()), [], "the cases wrote into the repository");
      const slowest = results.reduce((a, b) => (b.wallMs > a.wallMs ? b : a));
      const biggest = results.reduce((a, b) => ((b.rssMiB ?? 0) > (a.rssMiB ?? 0) ? b : a));
      console.log(`${rt} ${file}: ${results.filter((r) => !r.problems.length).length}/${results.length} pass; ` +
        `slowest ${slowest.name} ${Math.round(slowest.wallMs)} ms; peak RSS ${biggest.rssMiB?.toFixed(0) ?? "?"} MiB (${biggest.name})`);
      const failed = results.filter((r) => r.problems.length);
      assert.equal(failed.length, 0, report(results, seed));
    });
  }
}
