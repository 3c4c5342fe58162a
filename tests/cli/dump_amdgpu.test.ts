// `poot info --dump-kernels DIR --target amdgpu` (no AMD device here: a typical gfx942): each kernel of the
// decode plan as LLVM IR (.ll), its assembly from comgr (.s) and its launch metadata (.json, meta.ts's
// AmdKernelMeta). Skips when libamd_comgr is not installed.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { comgr } from "../../kernels/render/amdgpu/compile.ts";
import { poot } from "./poot.ts";

const cg = comgr();
const skip = typeof cg === "string" ? cg : false;

test("cli: info --dump-kernels --target amdgpu writes .ll, assembly and launch metadata per kernel", { skip, timeout: 300_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), "poot-amdgpu-"));
  try {
    const r = poot(["info", "--dump-kernels", dir, "--target", "amdgpu"]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /amdgpu for typical gfx942: subgroups 64/);
    const files = readdirSync(dir);
    const lls = files.filter((f) => f.endsWith(".ll"));
    assert.ok(lls.length >= 5, files.join());
    for (const ll of lls) {
      const stem = ll.slice(0, -3);
      assert.match(readFileSync(join(dir, ll), "utf8"), /^define amdgpu_kernel void @/m);
      const s = readFileSync(join(dir, `${stem}.s`), "utf8");
      assert.match(s, /s_endpgm/, `${stem}.s has no s_endpgm`);
      const meta = JSON.parse(readFileSync(join(dir, `${stem}.json`), "utf8"));
      assert.equal(meta.target, "gfx942");
      assert.equal(meta.wavefrontSize, 64);
      assert.match(meta.symbol, /\.kd$/);
      assert.ok(meta.args.length >= 1 && meta.kernargSize >= 8 * meta.args.filter((a: { kind: string }) => !a.kind.startsWith("hidden_")).length);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("cli: POOT_AMDGPU_TARGET=gfx1100 dumps wave32 kernels lowered for its caps", { skip, timeout: 300_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), "poot-amdgpu-"));
  try {
    const r = poot(["info", "--dump-kernels", dir, "--target", "amdgpu"], { env: { POOT_AMDGPU_TARGET: "gfx1100" } });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /amdgpu for typical gfx1100: subgroups 32/);
    const metas = readdirSync(dir).filter((f) => f.endsWith(".json")).map((f) => JSON.parse(readFileSync(join(dir, f), "utf8")));
    assert.ok(metas.length >= 5);
    for (const m of metas) assert.deepEqual([m.target, m.wavefrontSize], ["gfx1100", 32]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
