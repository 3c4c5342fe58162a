// `poot serve` as a process: bad flags exit 2 and a bad model 1, each with one `poot:` line; a real server
// answers on loopback (127.0.0.1 by default) under its --served-model-name, reads tool calls in the syntax of its
// --chat-template (with --chat-template-kwargs and --reasoning-format taken), and SIGTERM drains it and exits 0
// within a bound.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { scratchDir } from "../scratch.ts";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const isBun = "Bun" in globalThis;
const runtime = isBun ? process.execPath : (globalThis as unknown as { Deno?: { execPath(): string } }).Deno!.execPath();
const cmd = (args: string[]) => isBun ? ["cli/main.ts", ...args] : ["run", "-A", "--no-check", "cli/main.ts", ...args];

test("poot serve: bad flags exit 2, a bad model exits 1, one poot: line each", { timeout: 120_000 }, () => {
  const broken = join(scratchDir("poot-serve-cli-"), "broken.jinja");
  writeFileSync(broken, "{% for m in messages %}{{ m.content }");
  const cases: [string[], number, RegExp][] = [
    [["serve", "--chat-template", "/nonexistent/t.jinja"], 2, /--chat-template: .*nonexistent/],
    [["serve", "--chat-template", broken], 2, /--chat-template: .*broken\.jinja: chat template does not parse/],
    [["serve", "--chat-template-kwargs", "{enable_thinking: false}"], 2, /--chat-template-kwargs must be a JSON object/],
    [["serve", "--chat-template-kwargs", "[1]"], 2, /--chat-template-kwargs must be a JSON object/],
    [["serve", "--chat-template-kwargs", '{"messages": []}'], 2, /--chat-template-kwargs may not set messages/],
    [["serve", "--reasoning-format", "hidden"], 2, /reasoning-format/],
    [["serve", "--served-model-name", ""], 2, /--served-model-name must not be empty/],
    [["serve", "--port", "http"], 2, /--port must be an integer/],
    [["serve", "--slots", "0"], 2, /--slots must be >= 1/],
    [["serve", "--kv-memory", "2"], 2, /--kv-memory must be in \(0, 1\]/],
    [["serve", "--backend", "tpu"], 2, /backend/],
    [["serve", "--kv-type", "f8"], 2, /kv-type/],
    [["serve", "--bogus"], 2, /bogus/],
    [["serve", "--model", "/nonexistent/model.gguf", "--backend", "js"], 1, /nonexistent/],
    // -m as run, chat and llama-server take it: the path reaches the loader
    [["serve", "-m", "/nonexistent/short.gguf", "--backend", "js"], 1, /short\.gguf/],
  ];
  for (const [args, code, msg] of cases) {
    const r = spawnSync(runtime, cmd(args), { cwd: ROOT, encoding: "utf8", timeout: 60_000, env: { ...process.env, NO_COLOR: "1" } });
    const lines = r.stderr.trim().split("\n").filter((l) => l && !l.startsWith("Deno.serve"));
    assert.equal(r.status, code, `${args.join(" ")}: ${r.stderr}`);
    assert.equal(lines.length, 1, `${args.join(" ")}: ${r.stderr}`);
    assert.match(lines[0], /^poot: /);
    assert.match(lines[0], msg);
    assert.equal(r.stdout, "");
  }
});

test("poot serve: answers on 127.0.0.1, SIGTERM drains and exits 0", { timeout: 120_000 }, async () => {
  const p = spawn(runtime, cmd(["serve", "--backend", "js", "--port", "0", "--ctx", "512", "--slots", "4", "--drain", "5", "--chat-template", "tests/serve/templates/hermes.jinja",
    "--served-model-name", "claude-test", "--served-model-name", "claude-fast", "--chat-template-kwargs", '{"enable_thinking": false}', "--reasoning-format", "none"]), {
    cwd: ROOT, env: { ...process.env, NO_COLOR: "1" },
  });
  let err = "";
  const exited = new Promise<string>((res) => p.on("exit", (c, s) => res(`${c}/${s}`)));
  try {
    const url = await new Promise<string>((res, rej) => {
      const t = setTimeout(() => rej(new Error(`no listen line: ${err}`)), 60_000);
      p.stderr.on("data", (d: Uint8Array) => {
        err += new TextDecoder().decode(d);
        const m = err.match(/(http:\/\/127\.0\.0\.1:\d+)\/v1/);
        if (m) {
          clearTimeout(t);
          res(m[1]);
        }
      });
    });
    // --served-model-name, twice: the ids listed, the ones requests may name (Anthropic's route included), each
    // answered under the name it asked for, none under another
    assert.deepEqual((await (await fetch(`${url}/v1/models`)).json() as { data: { id: string }[] }).data.map((m) => m.id), ["claude-test", "claude-fast"]);
    const msg = await fetch(`${url}/v1/messages`, { method: "POST", body: JSON.stringify({ model: "claude-fast", max_tokens: 4, messages: [{ role: "user", content: "Hi" }] }) });
    assert.deepEqual([msg.status, (await msg.json() as { model: string }).model], [200, "claude-fast"]);
    const r = await fetch(`${url}/v1/completions`, { method: "POST", body: JSON.stringify({ model: "claude-test", prompt: "Once upon a time", max_tokens: 8, temperature: 0 }) });
    assert.equal(r.status, 200);
    const rb = await r.json() as { model: string; usage: { completion_tokens: number } };
    assert.deepEqual([rb.model, rb.usage.completion_tokens], ["claude-test", 8]);
    const other = await fetch(`${url}/v1/completions`, { method: "POST", body: JSON.stringify({ model: "gpt-4o", prompt: "Once", max_tokens: 1 }) });
    assert.equal(other.status, 404);
    assert.match((await other.json() as { error: { message: string } }).error.message, /'gpt-4o' does not exist \(this server serves 'claude-test', 'claude-fast'\)/);
    // --chat-template replaced the model's (it has none): its Hermes syntax is read back as a call
    const tools = [{ type: "function", function: { name: "now" } }];
    const c = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      body: JSON.stringify({ messages: [{ role: "user", content: "Time?" }], tools, tool_choice: "required", parallel_tool_calls: false, max_tokens: 60, temperature: 0 }),
    });
    const choice = (await c.json() as { choices: { finish_reason: string; message: { tool_calls: { function: unknown }[] } }[] }).choices[0];
    assert.equal(choice.finish_reason, "tool_calls");
    assert.deepEqual(choice.message.tool_calls.map((t) => t.function), [{ name: "now", arguments: "{}" }]);
    const t0 = performance.now();
    process.kill(p.pid!, "SIGTERM"); // not p.kill: Deno's node:child_process then reports the signal, not the exit code
    assert.equal(await exited, "0/null", err);
    assert.ok(performance.now() - t0 < 30_000);
    assert.match(err, /stopped/);
    assert.match(err, /blocks of 16, f32 \(/, "--kv-type auto keeps stories260K's f32 matrices' K/V in f32");
  } finally {
    p.kill("SIGKILL");
  }
});
