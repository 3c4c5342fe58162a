// The kernel library: every op of a Llama decode/prefill step, each written once in the kernel IR as a
// function of its shape and the target's Caps. Each factory's doc comment lists its bindings (order, element
// type, shape); fault codes of its checks are in codes.ts.
export { FAULT, type FaultCode } from "./codes.ts";
export { bytesOf, elemOf, type FType, gridFor, type IType, type Team, team, type WType } from "./common.ts";
export { gemv, type GemvPart, type GemvShape, gemvTeam, type GemvTune, gemvTune } from "./gemv.ts";
export { xqLayout, type XqLayout, xqPrep, xqPrepCombines, type XqPrepShape } from "./xq_prep.ts";
export { matmul, MATMUL_BATCH_TILE, type MatmulShape, matmulWide } from "./matmul.ts";
export { coopFlash, coopFlashFits, type CoopFlashLayout } from "./coop_flash.ts";
export { type CoopLayout, coopLayout, coopMatmul, coopMatmulFits, type CoopMatmulShape } from "./coop_matmul.ts";
export { coopServing, coopServingEights, coopServingFits, type CoopServingLayout, type CoopServingShape, xWordsBytes } from "./coop_serving.ts";
export { tiledFits, tiledLayout, type TiledLayout, tiledMatmul, type TiledMatmulShape, tiledSlice } from "./tiled_matmul.ts";
export { flashAttention, flashFits } from "./flash.ts";
export { zeroFill } from "./fill.ts";
export {
  mmaKSplit, mmaKSplitWide, mmaMatmul, type MmaMatmulShape, mmaMatmulFits, type MmaOperands, mmaPrepX, mmaServingKSplit, mmaServingLayout, type MmaServingTune,
  mmaServingTiles, mmaSharedBytes, type MmaWarpTiles,
} from "./mma_matmul.ts";
export { flashPrepBytes, flashPrepKV, flashStaged, type FlashStagedShape, flashStagedFits } from "./flash_staged.ts";
export { stagedBlockLayout, stagedCombine, type StagedLayout, stagedLayout, stagedMatmul, stagedMatmulFits, type StagedMatmulShape } from "./mma_staged.ts";
export {
  attention, attentionFusable, attentionFused, attentionFusedBytes, attentionPartial, attentionPreps, type AttentionShape, type FusedCount, type FusedPrep, attentionSplits,
  attentionChunking, attentionLocalReach, type Chunking, liveChunks, pagedAttention, pagedAttentionPartial, type PagedAttentionShape,
} from "./attention.ts";
export { attentionCombine } from "./attention_combine.ts";
export { flashDecodeFits, flashDecodePartial, pagedFlashPartial } from "./flash_decode.ts";
export { argmaxChunks, argmaxCombine, argmaxFusable, argmaxFused, argmaxFusedBytes, argmaxPartial } from "./argmax.ts";
export { argmax, layernorm, type NormShape, rmsnorm, softmax } from "./rows.ts";
export { rope, type RopeShape } from "./rope.ts";
export { normRope, type NormRopePart, type NormRopeShape } from "./norm_rope.ts";
export {
  add, elementwise, type ElementwiseShape, evalEw, type EwExpr, type EwFn, type EwInput, gelu, mul, silu, siluMul,
} from "./elementwise.ts";
export { gather, type GatherShape, scatter, type ScatterShape, updateSlice, type UpdateSliceShape } from "./movement.ts";
export { sample, sampleLayout, sampleListed, type SampleLayout, type SampleShape } from "./sample.ts";
export { MASS_WORDS, sampleMass, sampleParts, sampleSplit, sampleStats, STATS_WORDS } from "./sample_split.ts";
export { listWords, sampleList } from "./sample_list.ts";
export { logprobsCombine, logprobsPart, logprobsParts, partWords as logprobsPartWords } from "./logprobs_split.ts";
export { logitsProcess, logprobs, type LogprobsShape, type ProcessShape } from "./logits.ts";
export { chunkDot, chunkValues, dequantChunk, isQType, QLAYOUT, type QType, qWords } from "./dequant.ts";
