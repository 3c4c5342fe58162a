// Runs the poot command line in a child process of the runtime running the test (deno run -A cli/main.ts, or
// bun cli/main.ts), with stdin given and stdout/stderr captured.
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import process from "node:process";

export const MAIN = fileURLToPath(new URL("../../cli/main.ts", import.meta.url));
const isDeno = "Deno" in globalThis;

export interface PootResult {
  code: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
}

export function poot(
  args: string[],
  opts: { stdin?: string; env?: Record<string, string | undefined>; timeoutMs?: number; stdout?: number | "pipe" } = {},
): PootResult {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries({ ...process.env, NO_COLOR: "1", DENO_NO_UPDATE_CHECK: "1", ...opts.env })) if (v !== undefined) env[k] = v;
  const argv = isDeno ? ["run", "-A", "--no-check", MAIN, ...args] : [MAIN, ...args];
  const r = spawnSync(process.execPath, argv, {
    input: opts.stdin ?? "", env, encoding: "utf8", timeout: opts.timeoutMs ?? 120_000,
    stdio: ["pipe", opts.stdout ?? "pipe", "pipe"],
  });
  if (r.error) throw r.error;
  return { code: r.status, signal: r.signal, stdout: r.stdout ?? "", stderr: r.stderr ?? "" };
}
