// PTX renderer: kernel IR -> PTX text for sm_80+ (the H200 is sm_90), JIT-compiled by the driver
// (cuModuleLoadData). The lowering lives in ptx/kernel.ts, accurate f32 math in ptx/math.ts.
export { entryName, type PtxModule, type PtxOptions, renderPtx } from "./ptx/kernel.ts";
