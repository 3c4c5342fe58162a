// Finds NVIDIA's ptxas and assembles PTX text with it (no GPU needed): the CI check that rendered PTX is valid.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** The ptxas binary: $PTXAS, then the CUDA install, then PATH; undefined when there is none. */
export function findPtxas(): string | undefined {
  const env = process.env.PTXAS;
  const candidates = [env, process.env.CUDA_HOME && join(process.env.CUDA_HOME, "bin/ptxas"), "/usr/local/cuda/bin/ptxas"];
  for (const c of candidates) if (c && existsSync(c)) return c;
  const which = spawnSync("sh", ["-c", "command -v ptxas"], { encoding: "utf8" });
  const p = which.stdout?.trim();
  return which.status === 0 && p ? p : undefined;
}

export interface Assembled {
  ok: boolean;
  /** ptxas's diagnostics (warnings included) and, with verbose, its resource usage lines. */
  log: string;
}

/** Assembles `ptx` for `arch` (e.g. "sm_90"). Several modules share one temporary directory per call. */
export function assemble(ptxas: string, ptx: string, arch = "sm_90", verbose = false): Assembled {
  const dir = mkdtempSync(join(tmpdir(), "poot-ptxas-"));
  try {
    const src = join(dir, "k.ptx");
    writeFileSync(src, ptx);
    const args = [`-arch=${arch}`, src, "-o", join(dir, "k.cubin")];
    if (verbose) args.unshift("-v");
    const r = spawnSync(ptxas, args, { encoding: "utf8" });
    return { ok: r.status === 0, log: `${r.stdout ?? ""}${r.stderr ?? ""}${r.error ? String(r.error) : ""}` };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Assembles many modules with one ptxas run (one process per module costs ~0.2 s): their entries are renamed
 * apart and joined into one module. When that fails, each module is assembled alone to name the culprits.
 * Returns one Assembled per module.
 */
export function assembleMany(ptxas: string, modules: { ptx: string; entry: string }[], arch = "sm_90"): Assembled[] {
  if (modules.length === 0) return [];
  const header = (p: string) => /^\.(version|target|address_size)\b/.test(p);
  let extern = false;
  const bodies = modules.map((m, i) => {
    const lines = m.ptx.split("\n").filter((l) => {
      if (header(l)) return false;
      if (l.startsWith(".extern .shared")) {
        extern = true;
        return false;
      }
      return true;
    });
    const re = new RegExp(`\\b${m.entry}\\b`, "g");
    return lines.join("\n").replace(re, `${m.entry}__m${i}`);
  });
  const head = modules[0].ptx.split("\n").filter(header);
  const joined = [...head, extern ? ".extern .shared .align 16 .b8 smem[];" : "", ...bodies].join("\n");
  const all = assemble(ptxas, joined, arch);
  if (all.ok) return modules.map(() => ({ ok: true, log: "" }));
  return modules.map((m) => assemble(ptxas, m.ptx, arch));
}
