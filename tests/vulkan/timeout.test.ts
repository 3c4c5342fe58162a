// A kernel that spins past a 2 s wait bound raises DeviceTimeout, poisons the device, later calls are
// refused as Poisoned, and the process lives on. Run in a child process (spin_child.ts): lavapipe keeps
// executing the kernel on its CPU threads, which must not hold up this test runner. The child reports one
// RESULT line; we kill it afterwards whether or not it exits by itself.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import process from "node:process";
import { openVulkanDevice } from "../../backends/vulkan/mod.ts";

let skip: string | false = false;
try {
  await openVulkanDevice().destroy();
} catch (e) {
  skip = `no usable Vulkan device: ${(e as Error).message}`;
}

const child = fileURLToPath(new URL("./spin_child.ts", import.meta.url));
const isBun = "Bun" in globalThis;

function runChild(limitMs: number): Promise<{ result?: Record<string, unknown>; output: string; killed: boolean }> {
  return new Promise((resolve) => {
    const args = isBun ? [child] : ["run", "-A", "--no-check", child];
    const p = spawn(process.execPath, args, { stdio: ["ignore", "pipe", "pipe"], env: process.env });
    let output = "", done = false, killed = false;
    const finish = (result?: Record<string, unknown>) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      if (p.exitCode === null && p.signalCode === null) {
        killed = true;
        p.kill("SIGKILL");
      }
      resolve({ result, output, killed });
    };
    const timer = setTimeout(() => finish(), limitMs);
    const onData = (d: Uint8Array) => {
      output += new TextDecoder().decode(d);
      const line = output.split("\n").find((l) => l.startsWith("RESULT "));
      if (line) finish(JSON.parse(line.slice(7)));
    };
    p.stdout.on("data", onData);
    p.stderr.on("data", (d: Uint8Array) => output += new TextDecoder().decode(d));
    p.on("exit", () => setTimeout(() => finish(), 100)); // let the last stdout chunk arrive
  });
}

test("vulkan: a spinning kernel under a 2 s bound raises DeviceTimeout, poisons, refuses later calls, process lives", { skip, timeout: 120_000 }, async () => {
  const { result, output } = await runChild(60_000);
  assert.ok(result, `the child reported nothing:\n${output}`);
  assert.equal(result.short, "ok", "the same recording completes when its work is short");
  assert.equal(result.spin, "DeviceTimeout");
  assert.ok((result.ms as number) >= 1900 && (result.ms as number) < 15_000, `timed out after ${result.ms} ms`);
  assert.match(String(result.poisoned), /did not finish within 2000 ms/);
  for (const k of ["step", "alloc", "compile", "synchronize", "reset"]) assert.equal(result[k], "Poisoned", k);
  assert.equal(result.free, "ok", "removing an entry on a poisoned device leaks quietly");
  assert.equal(result.alive, true);
});
