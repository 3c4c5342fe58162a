// Per-class pass counts of the fuzz suite, for a before/after table (not a test):
//   POOT_FUZZ_CLI=/path/to/other/tree deno run -A tests/fuzz/summary.ts [deno|bun] [--failures]
// "pass" is the suite's verdict; "clean" also counts a case that ended right (exit code, one "poot:" line,
// nothing written, in bounds) with a message other than the one the case names (an untyped or vaguer error).
import { pathToFileURL } from "node:url";
import { type FuzzCase, fuzzSeed } from "./case.ts";
import { caseFiles, cliPath, report, runAll, type Runtime, runtimeBinary, selected } from "./runner.ts";

const args = (globalThis as unknown as { Deno?: { args: string[] } }).Deno?.args ??
  (globalThis as unknown as { process: { argv: string[] } }).process.argv.slice(2);
const rt = (args.find((a) => a === "deno" || a === "bun") ?? "deno") as Runtime;
const bin = runtimeBinary(rt);
if (!bin) throw new Error(`${rt} is not installed`);
const seed = fuzzSeed();
const cases: FuzzCase[] = [];
for (const f of caseFiles()) cases.push(...selected(((await import(pathToFileURL(f).href)) as { cases: FuzzCase[] }).cases));
const t0 = performance.now();
const results = await runAll(cases, rt, bin, seed);
const byClass = new Map<string, { pass: number; clean: number; all: number }>();
const total = { pass: 0, clean: 0, all: 0 };
cases.forEach((c, i) => {
  const k = byClass.get(c.cls) ?? { pass: 0, clean: 0, all: 0 };
  const p = results[i].problems;
  for (const x of [k, total]) {
    x.all++;
    if (!p.length) x.pass++;
    if (p.every((s) => s.startsWith("stderr does not match"))) x.clean++;
  }
  byClass.set(c.cls, k);
});
console.log(`${cliPath()} under ${rt}, seed ${seed}, ${((performance.now() - t0) / 1000).toFixed(1)} s`);
console.log(`  ${"class".padEnd(45)} pass  clean  of`);
for (const [cls, k] of [...byClass, ["total", total] as const]) {
  console.log(`  ${cls.padEnd(45)} ${String(k.pass).padStart(4)}  ${String(k.clean).padStart(5)}  ${k.all}`);
}
if (args.includes("--failures")) console.log(report(results, seed));
