// Runs one phase of fault_child.ts in a child process of the same runtime and returns its RESULT record.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import process from "node:process";
import { fileURLToPath } from "node:url";

const CHILD = fileURLToPath(new URL("./fault_child.ts", import.meta.url));

export function child(phase: string, env: Record<string, string> = {}): Record<string, unknown> {
  const isDeno = "Deno" in globalThis;
  const args = isDeno ? ["run", "-A", CHILD, phase] : [CHILD, phase];
  const r = spawnSync(process.execPath, args, { encoding: "utf8", timeout: 120_000, env: { ...process.env, ...env } });
  const line = (r.stdout ?? "").split("\n").find((l) => l.startsWith("RESULT "));
  if (!line) throw new Error(`child ${phase} printed no result (status ${r.status}):\n${r.stdout}\n${r.stderr}`);
  return JSON.parse(line.slice(7));
}

// What each phase must report (shared by the GPU test and the FakeCuda protocol test).
export const expectPhase = {
  eager(r: Record<string, unknown>): void {
    assert.deepEqual(r.fault, { name: "KernelFault", kernel: "checked", code: 7 });
    assert.match(String(r.poisoned), /checked/);
    assert.deepEqual(r.after, { alloc: "Poisoned", write: "Poisoned", compile: "Poisoned", run: "Poisoned", replay: "Poisoned", synchronize: "Poisoned", read: "Poisoned" });
    assert.equal(r.processAlive, true);
  },
  graph(r: Record<string, unknown>): void {
    assert.deepEqual(r.fault, { name: "KernelFault", kernel: "guard_b", code: 9 });
    assert.equal(r.refused, "Poisoned");
  },
  engine(r: Record<string, unknown>): void {
    assert.equal(r.first, "KernelFault");
    assert.equal(r.second, "Poisoned");
  },
  library(r: Record<string, unknown>): void {
    assert.equal(r.got, `KernelFault ${r.want}`, String(r.name));
  },
  timeout(r: Record<string, unknown>): void {
    assert.equal(r.sync, "DeviceTimeout");
    // gave up at its 200 ms bound, not at the end of the fake's 5 s spin (fault_child.ts): 4 s leaves a late
    // timer on a loaded machine its margin (2 s was near a stall there)
    assert.ok(Number(r.waitedMs) < 4000, `waited ${r.waitedMs} ms`);
    assert.equal(r.after, "Poisoned");
  },
};
