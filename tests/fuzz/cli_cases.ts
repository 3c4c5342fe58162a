// Command-line cases of the fuzz suite (issue 12 items 6-9, 14, 16 and issue 11's flag conventions): each is
// a bad command line or a bad input named on it, with the exit code and the one stderr line it must give.
// The shared runner (tests/fuzz/, badinput's) runs every case under Deno and Bun and checks exit code, one
// `poot:` line matching `message`, nothing on stdout, nothing written outside `dir`, time and RSS bounds.
// Flags are checked before the model is read, so most cases name a model that does not exist: the flag's
// error must win.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import type { FuzzCase } from "./case.ts";

/** A model path that does not exist: reaching it would be a different (exit 1) error. */
const NONE = (dir: string) => join(dir, "no-such-model.gguf");

function flag(name: string, cls: string, args: string[], message: RegExp, exit = 2): FuzzCase {
  return { name, cls, setup: (dir) => ["run", "-m", NONE(dir), "-p", "Once upon a time", ...args], exit, message };
}

/** Random bytes of a random length (a file that is not a model). */
function junk(rng: () => number, n: number): Uint8Array {
  const b = new Uint8Array(n);
  for (let i = 0; i < n; i++) b[i] = Math.floor(rng() * 256);
  return b;
}

const list: FuzzCase[] = [
  // 12.6 empty values are errors, not 0
  flag("cli/empty/max-tokens", "12.6 empty values", ["--max-tokens", ""], /--max-tokens: "" is not an integer/),
  flag("cli/empty/max-tokens-blank", "12.6 empty values", ["--max-tokens", "  "], /--max-tokens: " {2}" is not an integer/),
  flag("cli/empty/temperature", "12.6 empty values", ["--temperature", ""], /--temperature: "" is not a number/),
  flag("cli/empty/seed", "12.6 empty values", ["--seed", ""], /--seed: "" is not an integer/),
  flag("cli/empty/max-tokens-negative", "12.6 empty values", ["--max-tokens=-1"], /--max-tokens: "-1" is not an integer from 0/),
  flag("cli/empty/n-short", "12.6 empty values", ["-n", ""], /--max-tokens: "" is not an integer/),
  flag("cli/empty/stop", "12.6 empty values", ["--stop", ""], /--stop: is empty/),
  flag("cli/empty/model", "12.6 empty values", ["--model", ""], /--model: is empty/),
  // 12.7 --dump-kernels with an empty directory
  {
    name: "cli/dump-kernels/empty", cls: "12.7 dump-kernels empty", exit: 2, message: /--dump-kernels: is empty/,
    setup: (dir) => ["info", "-m", NONE(dir), "--dump-kernels", "", "--target", "js"],
  },
  { name: "cli/dump-kernels/no-target", cls: "12.7 dump-kernels empty", exit: 2, message: /--dump-kernels needs --target/, setup: (dir) => ["info", "--dump-kernels", join(dir, "k")] },
  { name: "cli/dump-kernels/bad-target", cls: "12.7 dump-kernels empty", exit: 2, message: /--target: unknown target "cuda"/, setup: (dir) => ["info", "--dump-kernels", join(dir, "k"), "--target", "cuda"] },
  { name: "cli/dump-kernels/target-alone", cls: "12.7 dump-kernels empty", exit: 2, message: /--target goes with --dump-kernels/, setup: () => ["info", "--target", "js"] },
  // 12.8 bench: empty shape lists, one prefixed line, no advertised-but-refused flags
  { name: "cli/bench/shape-empty", cls: "12.8 bench errors", exit: 2, message: /^poot: bench: --shape "" names no shape/, setup: () => ["bench", "--shape", ""] },
  { name: "cli/bench/shape-commas", cls: "12.8 bench errors", exit: 2, message: /^poot: bench: --shape ",,," names no shape/, setup: () => ["bench", "--shape", ",,,"] },
  { name: "cli/bench/unknown-flag", cls: "12.8 bench errors", exit: 2, message: /^poot: bench: Unknown option '--bogus'/, setup: () => ["bench", "--bogus"] },
  { name: "cli/bench/bad-int", cls: "12.8 bench errors", exit: 2, message: /^poot: bench: --tokens must be an integer/, setup: () => ["bench", "--tokens", "x"] },
  { name: "cli/bench/negative", cls: "12.8 bench errors", exit: 2, message: /^poot: bench: --tokens must be an integer >= 1, got -3/, setup: () => ["bench", "--tokens", "-3"] },
  { name: "cli/bench/backend", cls: "12.8 bench errors", exit: 2, message: /^poot: bench: --backend: unknown backend "nope"/, setup: () => ["bench", "--backend", "nope"] },
  { name: "cli/bench/unknown-shape", cls: "12.8 bench errors", exit: 2, message: /^poot: bench: unknown shape foo/, setup: () => ["bench", "--shape", "foo", "--backend", "js"] },
  // 12.9 control characters from arguments and paths are escaped on the one line
  flag("cli/escape/backend", "12.9 terminal injection", ["--backend", "x\x1b[2Jy\nz"], /--backend: unknown backend "x\\u001b\[2Jy\\nz"/),
  {
    name: "cli/escape/model-path", cls: "12.9 terminal injection", exit: 1, message: /no\\x1b\[2Jsuch\\nmodel\.gguf: cannot read model file/,
    setup: (dir) => ["run", "-m", join(dir, "no\x1b[2Jsuch\nmodel.gguf"), "-p", "x"],
  },
  {
    name: "cli/escape/command", cls: "12.9 terminal injection", exit: 2, message: /unknown command "\\u001b\]0;pwned\\u0007"/,
    setup: () => ["\x1b]0;pwned\x07"],
  },
  // 12.14 every flag checked before loading anything (the model here does not exist)
  flag("cli/range/top-p", "12.14 sampler ranges", ["--top-p", "2"], /--top-p: "2" is not a number from 0 to 1/),
  flag("cli/range/min-p", "12.14 sampler ranges", ["--min-p", "1.5"], /--min-p: "1.5" is not a number from 0 to 1/),
  // issue 17: the sampler's other flags, checked before loading (files read and parsed too)
  flag("cli/range/logit-bias-range", "17 sampler flags", ["--logit-bias", "5=300"], /--logit-bias: bias 300 of token 5 is not in \[-100, 100\]/),
  flag("cli/range/logit-bias-form", "17 sampler flags", ["--logit-bias", "5:3"], /--logit-bias: "5:3" is not ID=BIAS/),
  flag("cli/range/logit-bias-empty", "17 sampler flags", ["--logit-bias", ","], /--logit-bias: "," has no ID=BIAS pair/),
  flag("cli/range/repeat-penalty", "17 sampler flags", ["--repeat-penalty", "0"], /--repeat-penalty: "0" is not a number in \(0, 10\]/),
  flag("cli/range/frequency-penalty", "17 sampler flags", ["--frequency-penalty", "3"], /--frequency-penalty: "3" is not a number from -2 to 2/),
  flag("cli/range/presence-penalty", "17 sampler flags", ["--presence-penalty", "-2.5"], /--presence-penalty: "-2.5" is not a number from -2 to 2/),
  flag("cli/range/min-tokens", "17 sampler flags", ["--min-tokens", "-1"], /--min-tokens: "-1" is not an integer >= 0/),
  flag("cli/range/top-logprobs", "17 sampler flags", ["--top-logprobs", "21", "--json"], /--top-logprobs: "21" is not an integer from 0 to 20/),
  flag("cli/range/top-logprobs-no-json", "17 sampler flags", ["--top-logprobs", "2"], /--top-logprobs: needs --json/),
  { name: "cli/format/schema-missing", cls: "17 sampler flags", exit: 2, message: /--json-schema: cannot read .*nope\.json/, setup: (dir) => ["run", "-m", NONE(dir), "-p", "x", "--json-schema", join(dir, "nope.json")] },
  {
    name: "cli/format/schema-not-json", cls: "17 sampler flags", exit: 2, message: /--json-schema: .*s\.json is not JSON/,
    setup: (dir) => (writeFileSync(join(dir, "s.json"), "{type: object"), ["run", "-m", NONE(dir), "-p", "x", "--json-schema", join(dir, "s.json")]),
  },
  { name: "cli/format/both", cls: "17 sampler flags", exit: 2, message: /--json-schema and --grammar: give one/, setup: (dir) => ["run", "-m", NONE(dir), "-p", "x", "--json-schema", "a", "--grammar", "b"] },
  flag("cli/range/top-k", "12.14 sampler ranges", ["--top-k", "99999999999"], /--top-k: "99999999999" is not an integer/),
  flag("cli/range/top-k-fraction", "12.14 sampler ranges", ["--top-k", "2.5"], /--top-k: "2.5" is not an integer/),
  flag("cli/range/temperature-nan", "12.14 sampler ranges", ["--temperature", "NaN"], /--temperature: "NaN" is not a number/),
  flag("cli/range/temperature-inf", "12.14 sampler ranges", ["--temperature", "Infinity"], /--temperature: "Infinity" is not a number/),
  flag("cli/range/seed-2^64", "12.14 sampler ranges", ["--seed", "18446744073709551616"], /--seed: "18446744073709551616" is not an integer from 0 to 2\^64-1/),
  flag("cli/range/seed-negative", "12.14 sampler ranges", ["-s", "-1"], /--seed: "-1" is not an integer from 0 to 2\^64-1/),
  flag("cli/range/ctx-one", "12.14 sampler ranges", ["--ctx", "1"], /--ctx: "1" is not an integer >= 2/),
  flag("cli/range/ctx-fraction", "12.14 sampler ranges", ["-c", "16.5"], /--ctx: "16.5" is not an integer >= 2/),
  flag("cli/range/ctx-1e9", "12.14 sampler ranges", ["--ctx", "1e9"], /--ctx: "1e9" is not an integer >= 2/),
  flag("cli/range/backend", "12.14 sampler ranges", ["--backend", "cuda"], /--backend: unknown backend "cuda"/),
  // --ctx above what the model was trained for: the model is read (the shipped one), nothing is allocated.
  { name: "cli/range/ctx-above-model", cls: "12.3 ctx beyond reason", exit: 1, message: /ContextLengthError: context of 5000000 positions: more than the 2048 the model was trained for .*--allow-long-context/, setup: () => ["run", "--ctx", "5000000", "-p", "x", "--backend", "js"] },
  // 11: flag conventions
  flag("cli/flags/negative-temperature", "11 flags", ["--temperature", "-1"], /--temperature: "-1" is not a number >= 0/),
  flag("cli/flags/run-dump-kernels", "11 flags", ["--dump-kernels", "x"], /run: Unknown option '--dump-kernels'/),
  flag("cli/flags/missing-value", "11 flags", ["-n"], /run: Option '-n, --max-tokens <value>' argument missing/),
  flag("cli/flags/kv-type", "11 flags", ["--kv-type", "bf16"], /--kv-type: unknown kv-type "bf16" \(expected auto, f32, f16\)/),
  { name: "cli/flags/prompt-twice", cls: "11 flags", exit: 2, message: /either with -p or as an argument/, setup: (dir) => ["run", "-m", NONE(dir), "-p", "a", "b"] },
  { name: "cli/flags/info-positional", cls: "11 flags", exit: 2, message: /info: unexpected argument "model\.gguf"/, setup: () => ["info", "model.gguf"] },
  { name: "cli/flags/info-prompt", cls: "11 flags", exit: 2, message: /info: Unknown option '-p'/, setup: () => ["info", "-p", "x"] },
  { name: "cli/flags/unknown-command", cls: "11 flags", exit: 2, message: /unknown command "runn"/, setup: () => ["runn"] },
  { name: "cli/flags/serve-port", cls: "11 flags", exit: 2, message: /serve: --port must be <= 65535/, setup: () => ["serve", "--port", "99999"] },
  // Bad inputs named on the command line: exit 1, one line naming the file.
  { name: "cli/model/missing", cls: "11 model path", exit: 1, message: /no-such-model\.gguf: cannot read model file: no such file/, setup: (dir) => ["run", "-m", NONE(dir), "-p", "x"] },
  {
    name: "cli/model/directory", cls: "11 model path", exit: 1, message: /cannot read model file: a Hugging Face folder needs config\.json/,
    setup: (dir) => (mkdirSync(join(dir, "m.gguf")), ["run", "-m", join(dir, "m.gguf"), "-p", "x"]),
  },
  {
    name: "cli/model/junk", cls: "11 model path", exit: 1, message: /junk\.gguf: .*magic/i,
    setup: (dir, rng) => {
      const b = junk(rng, 64 + Math.floor(rng() * 4096));
      b[0] = 0x4e; // never "G": not a GGUF magic
      writeFileSync(join(dir, "junk.gguf"), b);
      return ["info", "-m", join(dir, "junk.gguf")];
    },
  },
];

/**
 * Every case runs with XDG_RUNTIME_DIR unset (runner.ts): a bad command line is refused before any backend opens,
 * so poot must not have made its private runtime dir in TMPDIR either (tests/cli/cases.test.ts checked that
 * separately, running these cases a second time under Deno, until the runner did).
 */
export const cases: FuzzCase[] = list.map((c) => ({ ...c, noRuntimeDir: true }));
