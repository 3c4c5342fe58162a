import { SM90_CAPS } from "../backends/ptx/caps.ts";
import { flashStaged } from "../kernels/lib/flash_staged.ts";
import { renderPtx } from "../kernels/render/ptx.ts";
import { assemble, findPtxas } from "../tests/ptx/ptxas.ts";
const p = findPtxas()!;
for (const [hd, kvh, extra] of [[64, 8, {}], [128, 8, {}], [128, 8, { warps: 8 }], [128, 8, { bkv: 32 }], [128, 8, { split: false }]] as const) {
  const s = { rows: 512, heads: 32, kvHeads: kvh, hd, cap: 2064, pos: "u32" as const, ...extra };
  for (const k of [flashStaged(SM90_CAPS, s)]) {
    const r = assemble(p, renderPtx(k, { sm: 90 }).ptx, "sm_90", true);
    console.log(k.name, r.ok, r.log.split("\n").filter((x) => /Used|spill st|error/.test(x)).map((x) => x.replace(/ptxas info\s*:/, "").trim()).join(" ; "));
  }
}
