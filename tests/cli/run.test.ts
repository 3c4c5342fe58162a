// The command line as a user meets it, run in a child process of this runtime: prompts from -p, an argument,
// stdin and `-`; --version; --help stating the shared default; `run --json` as JSON lines whose tokens join
// to the summary's text; a closed stdout ends with 0; a full disk is one error line and exit 1; `info --json`
// and `info --dump-kernels` on the JS target. stories260K on the JS backend.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawnSync } from "node:child_process";
import process from "node:process";
import { DEFAULT_MAX_TOKENS, VERSION } from "../../mod.ts";
import { MAIN, poot } from "./poot.ts";

const JS = ["--backend", "js"];
const STORY = ", there was a little girl named Lily. She loved to play";

test("cli: the prompt from -p, a positional argument, piped stdin and `-` give the same text", () => {
  const want = `Once upon a time${STORY}\n`;
  for (const [args, stdin] of [
    [["run", "-p", "Once upon a time", "-n", "16", ...JS], ""],
    [["run", "Once", "upon", "a", "time", "-n", "16", ...JS], ""],
    [["run", "-n", "16", ...JS], "Once upon a time\n"],
    [["run", "-", "-n", "16", ...JS], "Once upon a time"],
    [["-n", "16", "-p", "Once upon a time", ...JS], ""],
  ] as const) {
    const r = poot([...args], { stdin });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, want, args.join(" "));
    assert.match(r.stderr, /16 tokens/);
  }
});

test("cli: --version, and --help states the defaults (max tokens is the library's constant)", () => {
  const v = poot(["--version"]);
  assert.deepEqual([v.code, v.stdout], [0, `poot ${VERSION}\n`]);
  const h = poot(["run", "--help"]);
  assert.equal(h.code, 0);
  assert.match(h.stdout, new RegExp(`-n, --max-tokens N\\s+tokens to generate at most \\(default ${DEFAULT_MAX_TOKENS}\\)`));
  for (const f of ["--model", "--ctx", "--seed", "--backend", "--temperature", "--top-k", "--top-p", "--min-p", "--json"]) {
    assert.match(h.stdout, new RegExp(`${f} .*default`), `${f} states its default`);
  }
  assert.equal(poot(["info", "--help"]).code, 0);
  assert.equal(poot(["--help"]).code, 0);
});

test("cli: run --json prints one JSON line per token, then the summary; tokens join to its text", () => {
  const r = poot(["run", "-p", "Once upon a time", "-n", "12", "--json", "--stop", "Lily", ...JS]);
  assert.equal(r.code, 0, r.stderr);
  const lines = r.stdout.trim().split("\n").map((l) => JSON.parse(l));
  const sum = lines.at(-1);
  const tokens = lines.slice(0, -1);
  assert.equal(sum.text, tokens.map((t) => t.text).join(""));
  assert.deepEqual(sum.generated_token_ids.slice(0, tokens.length), tokens.map((t) => t.token).slice(0, sum.generated_token_ids.length));
  assert.equal(sum.finish_reason, "stop");
  assert.equal(sum.text, ", there was a little girl named ");
  assert.deepEqual(sum.prompt_token_ids.slice(0, 1), [1], "BOS first");
  for (const k of ["backend", "device", "timings"]) assert.ok(k in sum, k);
});

test("cli: a closed stdout ends quietly with exit 0; a full disk is one error line and exit 1", () => {
  const sh = (cmd: string) => spawnSync("bash", ["-c", cmd], { encoding: "utf8", env: { ...process.env, NO_COLOR: "1" } });
  const isDeno = "Deno" in globalThis;
  const run = `${JSON.stringify(process.execPath)} ${isDeno ? "run -A --no-check " : ""}${JSON.stringify(MAIN)} run -n 60 -p "Once upon a time" --backend js`;
  const piped = sh(`${run} 2>/tmp/poot-pipe-$$.err | head -c 20; code=\${PIPESTATUS[0]}; cat /tmp/poot-pipe-$$.err | grep -v '^\\[' ; rm -f /tmp/poot-pipe-$$.err; exit $code`);
  assert.equal(piped.status, 0, piped.stdout + piped.stderr);
  assert.equal(piped.stdout, "Once upon a time, th", "no error text after the 20 bytes");
  if (!existsSync("/dev/full")) return;
  const full = sh(`${run} >/dev/full`);
  assert.equal(full.status, 1);
  const lines = full.stderr.split("\n").filter((l) => l && !l.startsWith("["));
  assert.equal(lines.length, 1, full.stderr);
  assert.match(lines[0], /^poot: cannot write to stdout: .*(ENOSPC|No space left)/);
});

test("cli: info --json describes the model and every backend; --dump-kernels writes the js kernels", () => {
  const r = poot(["info", "--json", ...JS]);
  assert.equal(r.code, 0, r.stderr);
  const o = JSON.parse(r.stdout);
  assert.equal(o.model.arch, "llama");
  assert.equal(o.model.config.vocab, 512);
  assert.deepEqual(o.backends.map((b: { backend: string }) => b.backend), ["js"]);
  assert.equal(o.backends[0].status, "present");
  assert.equal(o.backends[0].caps.int8Dot, false); // the JS device does not default the integer gemv
  const dir = mkdtempSync(join(tmpdir(), "poot-dump-"));
  try {
    const d = poot(["info", "--dump-kernels", join(dir, "k"), "--target", "js"]);
    assert.equal(d.code, 0, d.stderr);
    const files = readdirSync(join(dir, "k"));
    assert.ok(files.length > 3 && files.every((f) => f.endsWith(".js")), files.join());
    assert.match(d.stdout, new RegExp(`wrote ${files.length} kernels .*\\(js for JavaScript CPU: subgroups`));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

const isDeno = "Deno" in globalThis;
test("cli: without -A, one line names the missing permission (Deno); a missing --allow-ffi refuses the backend", { skip: isDeno ? false : "Deno permissions only" }, () => {
  // Deno adds its own permissions (-A) to a child command line that runs its own binary; named through an
  // environment variable, the binary is out of its sight.
  // (It rewrites `bash -c` command strings too, so the command is a script file.)
  const dir = mkdtempSync(join(tmpdir(), "poot-perm-"));
  const script = join(dir, "deno.sh");
  writeFileSync(script, 'exec "$POOT_TEST_DENO" run --no-check "$@"\n');
  const run = (perms: string[], args: string[]) =>
    spawnSync("bash", [script, ...perms, MAIN, ...args], { encoding: "utf8", input: "", env: { ...process.env, POOT_TEST_DENO: process.execPath } });
  const noEnv = run(["--allow-read"], ["run", "-p", "x", "-n", "1"]);
  assert.equal(noEnv.status, 1);
  assert.deepEqual(noEnv.stdout, "");
  const lines = noEnv.stderr.trim().split("\n");
  assert.equal(lines.length, 1, noEnv.stderr);
  assert.match(lines[0], /^poot: .*--allow-env/);
  const noRead = run([], ["info"]);
  assert.equal(noRead.stderr.trim().split("\n").length, 1, noRead.stderr);
  assert.match(noRead.stderr, /^poot: .*--allow-read/);
  const noFfi = run(["--allow-read", "--allow-env", "--allow-sys"], ["run", "-p", "x", "-n", "1", "--backend", "ptx"]);
  assert.equal(noFfi.status, 1);
  assert.match(noFfi.stderr.trim(), /^poot: .*ptx: refused: no permission \(run with --allow-ffi, or -A\)$/);
  rmSync(dir, { recursive: true, force: true });
});

test("cli: Ctrl-C stops the generation, keeps what was printed, and exits 130", async () => {
  const { spawn } = await import("node:child_process");
  const args = ["run", "-n", "2000", "-c", "2048", "-p", "Once upon a time", "--backend", "js"];
  const child = spawn(process.execPath, isDeno ? ["run", "-A", "--no-check", MAIN, ...args] : [MAIN, ...args], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "", errs = "", sent = false;
  child.stdout!.on("data", (d) => {
    out += d;
    if (!sent && out.length > 60) {
      sent = true;
      child.kill("SIGINT");
    }
  });
  child.stderr!.on("data", (d) => (errs += d));
  const code = await new Promise((r) => child.on("close", (c, sig) => r(c ?? sig)));
  // Deno's node:child_process reports the signal it sent rather than the exit status (130 from a shell).
  assert.ok(code === 130 || (isDeno && code === "SIGINT"), `exit ${String(code)}: ${errs}`);
  assert.ok(sent, "output came before the end");
  assert.match(errs, /\[interrupted after \d+ tokens\]/);
  assert.ok(out.startsWith("Once upon a time, there was"), out.slice(0, 80));
  assert.doesNotMatch(errs, /^poot: /m);
});

test("cli: --top-logprobs with --json, --grammar and --json-schema constrain the output, --logit-bias steers it", () => {
  const dir = mkdtempSync(join(tmpdir(), "poot-sampler-"));
  try {
    const lp = poot(["run", "-p", "Once upon a time", "-n", "4", "--json", "--top-logprobs", "3", ...JS]);
    assert.equal(lp.code, 0, lp.stderr);
    const lines = lp.stdout.trim().split("\n").map((l) => JSON.parse(l));
    const tokens = lines.slice(0, -1);
    assert.equal(tokens.length, 4);
    for (const t of tokens) {
      assert.equal(t.top_logprobs.length, 3);
      assert.equal(t.top_logprobs[0].token, t.token, "greedy: the token is the most likely");
      assert.equal(t.top_logprobs[0].logprob, t.logprob);
      assert.ok(t.logprob <= 0 && t.top_logprobs[1].logprob <= t.logprob);
    }
    assert.equal(tokens.map((t: { text: string }) => t.text).join(""), STORY.slice(0, tokens.map((t: { text: string }) => t.text).join("").length));
    writeFileSync(join(dir, "g.gbnf"), 'root ::= "The end."\n');
    const g = poot(["run", "-p", "Once", "-n", "30", "--temperature", "1", "--grammar", join(dir, "g.gbnf"), ...JS]);
    assert.equal(g.code, 0, g.stderr);
    assert.equal(g.stdout, "OnceThe end.\n");
    writeFileSync(join(dir, "s.json"), JSON.stringify({ type: "object", properties: { n: { type: "integer", minimum: 1, maximum: 9 } }, required: ["n"], additionalProperties: false }));
    const s = poot(["run", "-p", "Once", "-n", "40", "--temperature", "1", "--seed", "4", "--json-schema", join(dir, "s.json"), "--json", ...JS]);
    assert.equal(s.code, 0, s.stderr);
    const v = JSON.parse(JSON.parse(s.stdout.trim().split("\n").at(-1)!).text);
    assert.ok(Number.isInteger(v.n) && v.n >= 1 && v.n <= 9 && Object.keys(v).length === 1, JSON.stringify(v));
    const first = JSON.parse(lp.stdout.split("\n")[0]).token;
    const b = poot(["run", "-p", "Once upon a time", "-n", "4", "--logit-bias", `${first}=-100`, "--json", ...JS]);
    assert.notEqual(JSON.parse(b.stdout.split("\n")[0]).token, first);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
