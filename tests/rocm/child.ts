// Runs one phase of fault_child.ts in a child process of the same runtime and returns its RESULT record.
import { spawnSync } from "node:child_process";
import process from "node:process";
import { fileURLToPath } from "node:url";

const CHILD = fileURLToPath(new URL("./fault_child.ts", import.meta.url));

export function child(phase: string, env: Record<string, string> = {}): Record<string, unknown> {
  const args = "Deno" in globalThis ? ["run", "-A", CHILD, phase] : [CHILD, phase];
  const r = spawnSync(process.execPath, args, { encoding: "utf8", timeout: 120_000, env: { ...process.env, ...env } });
  const line = (r.stdout ?? "").split("\n").find((l) => l.startsWith("RESULT "));
  if (!line) throw new Error(`child ${phase} printed no result (status ${r.status}):\n${r.stdout}\n${r.stderr}`);
  return JSON.parse(line.slice(7));
}
