// Runs the mutants of mutants.ts: for each, a copy of the working tree under a temp dir (tracked and untracked
// files git does not ignore; node_modules symlinked), the mutation applied, and its test files run with a time
// bound. Prints one line per mutant: caught (the tests failed), missed (they passed), stale (the code to
// mutate is gone) or baseline-fails (the tests fail without the mutation, so they prove nothing), and exits 1
// unless every mutant is caught.
//   deno run -A --no-check tests/mutants/run.ts [--only NAME,...] [--no-baseline] [--keep]
import { spawnSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { MUTANTS, type Mutant } from "./mutants.ts";

const root = fileURLToPath(new URL("../../", import.meta.url));
const { values: opt } = parseArgs({
  args: Deno.args,
  options: { only: { type: "string" }, "no-baseline": { type: "boolean" }, keep: { type: "boolean" }, timeout: { type: "string" } },
});
const limitS = Number(opt.timeout ?? 400);
const LAVAPIPE = "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json";

/** A copy of the working tree (as git sees it, with uncommitted changes) at a fresh temp dir. */
function copyTree(): string {
  const dir = mkdtempSync(join(tmpdir(), "poot-mutant-"));
  const ls = spawnSync("git", ["ls-files", "-z", "--cached", "--others", "--exclude-standard"], { cwd: root, encoding: "utf8" });
  if (ls.status !== 0) throw new Error(`git ls-files failed: ${ls.stderr}`);
  for (const f of ls.stdout.split("\0")) {
    if (!f || f === "node_modules" || f.startsWith("node_modules/")) continue;
    mkdirSync(join(dir, dirname(f)), { recursive: true });
    try {
      cpSync(join(root, f), join(dir, f));
    } catch { /* deleted in the working tree */ }
  }
  symlinkSync(join(root, "node_modules"), join(dir, "node_modules"));
  return dir;
}

function runTests(dir: string, m: Mutant): { ok: boolean; seconds: number; tail: string } {
  const t0 = performance.now();
  const r = spawnSync("timeout", [String(limitS), Deno.execPath(), "test", "-A", "--no-check", ...m.tests], {
    cwd: dir,
    encoding: "utf8",
    maxBuffer: 1 << 26,
    env: { ...Deno.env.toObject(), POOT_BACKENDS: m.backends, VK_DRIVER_FILES: LAVAPIPE, NO_COLOR: "1", DENO_NO_UPDATE_CHECK: "1" },
  });
  const out = `${r.stdout}\n${r.stderr}`;
  const failed = out.split("\n").filter((l) => /\.\.\. FAILED/.test(l)).map((l) => l.trim());
  const tail = r.status === 124 ? `timed out after ${limitS} s` : failed.length ? failed.slice(0, 3).join("; ") : out.trim().split("\n").slice(-1)[0];
  return { ok: r.status === 0, seconds: (performance.now() - t0) / 1000, tail };
}

const only = opt.only?.split(",");
const chosen = MUTANTS.filter((m) => !only || only.includes(m.name));
let caught = 0;
for (const m of chosen) {
  const dir = copyTree();
  let verdict: string, detail = "";
  try {
    const file = join(dir, m.file);
    const src = readFileSync(file, "utf8");
    const count = src.split(m.find).length - 1;
    if (count !== 1) {
      verdict = "stale";
      detail = `${m.file}: the code to mutate occurs ${count} times`;
    } else {
      const base = opt["no-baseline"] ? undefined : runTests(dir, m);
      if (base && !base.ok) {
        verdict = "baseline-fails";
        detail = base.tail;
      } else {
        writeFileSync(file, src.replace(m.find, m.replace));
        const r = runTests(dir, m);
        verdict = r.ok ? "missed" : "caught";
        detail = `${r.seconds.toFixed(0)} s${base ? ` (baseline passed in ${base.seconds.toFixed(0)} s)` : ""}: ${r.tail}`;
        if (!r.ok) caught++;
      }
    }
  } finally {
    if (!opt.keep) rmSync(dir, { recursive: true, force: true });
  }
  console.log(`${verdict.padEnd(14)} ${m.name.padEnd(26)} ${m.tests.join(" ")} [${m.backends}] — ${m.what}\n${" ".repeat(15)}${detail}`);
}
console.log(`${caught} of ${chosen.length} mutants caught`);
if (caught !== chosen.length) Deno.exit(1);
