// `poot info --dump-kernels DIR --target wgsl` renders for the present WebGPU adapter's capabilities: every
// dumped shader must compile on that adapter (rendered for typical caps, 7 of 9 failed on lavapipe before).
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { probe } from "../wgpu/util.ts";
import { poot } from "./poot.ts";

const dev = await probe();
const skip = typeof dev === "string" ? dev : false;

test("cli: info --dump-kernels --target wgsl writes shaders that compile on the present adapter", { skip }, async () => {
  if (typeof dev === "string") return;
  const dir = mkdtempSync(join(tmpdir(), "poot-wgsl-"));
  try {
    const r = poot(["info", "--dump-kernels", dir, "--target", "wgsl"]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, new RegExp(`wgsl for ${dev.target.device.replace(/[()]/g, ".")}: subgroups ${dev.target.caps.subgroups ? dev.target.caps.subgroupSize : "no"}`));
    const files = readdirSync(dir).filter((f) => f.endsWith(".wgsl"));
    assert.ok(files.length >= 5, files.join());
    const bad: string[] = [];
    for (const f of files) {
      dev.gpu.pushErrorScope("validation");
      const m = dev.gpu.createShaderModule({ code: readFileSync(join(dir, f), "utf8") });
      const info = await m.getCompilationInfo();
      const e = await dev.gpu.popErrorScope();
      const errs = info.messages.filter((x) => x.type === "error").map((x) => x.message);
      if (e || errs.length) bad.push(`${f}: ${e?.message ?? errs[0]}`);
    }
    assert.deepEqual(bad, []);
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await dev.destroy();
  }
});
