// PTX renderer: kernel IR -> PTX text for sm_80+ (the H200 is sm_90), JIT-compiled by the driver
// (cuModuleLoadData). The lowering lives in ptx/kernel.ts, accurate f32 math in decomp/math.ts (ptx/math.ts emits its vocabulary).
export { entryName, type PtxModule, type PtxOptions, renderPtx } from "./ptx/kernel.ts";
