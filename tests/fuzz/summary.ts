// Per-class pass counts of the fuzz suite, for a before/after table (not a test):
//   POOT_FUZZ_CLI=/path/to/other/tree deno run -A tests/fuzz/summary.ts [deno|bun] [--failures]
import { pathToFileURL } from "node:url";
import { type FuzzCase, fuzzSeed } from "./case.ts";
import { caseFiles, cliPath, report, runAll, type Runtime, runtimeBinary } from "./runner.ts";

const args = (globalThis as { Deno?: { args: string[] } }).Deno?.args ??
  (globalThis as unknown as { process: { argv: string[] } }).process.argv.slice(2);
const rt = (args.find((a) => a === "deno" || a === "bun") ?? "deno") as Runtime;
const bin = runtimeBinary(rt);
if (!bin) throw new Error(`${rt} is not installed`);
const seed = fuzzSeed();
const cases: FuzzCase[] = [];
for (const f of caseFiles()) cases.push(...((await import(pathToFileURL(f).href)) as { cases: FuzzCase[] }).cases);
const t0 = performance.now();
const results = await runAll(cases, rt, bin, seed);
const byClass = new Map<string, { pass: number; all: number }>();
cases.forEach((c, i) => {
  const k = byClass.get(c.cls) ?? { pass: 0, all: 0 };
  k.all++;
  if (!results[i].problems.length) k.pass++;
  byClass.set(c.cls, k);
});
console.log(`${cliPath()} under ${rt}, seed ${seed}, ${((performance.now() - t0) / 1000).toFixed(1)} s`);
for (const [cls, k] of byClass) console.log(`  ${cls.padEnd(45)} ${k.pass}/${k.all}`);
const pass = results.filter((r) => !r.problems.length).length;
console.log(`  ${"total".padEnd(45)} ${pass}/${results.length}`);
if (args.includes("--failures")) console.log(report(results, seed));
