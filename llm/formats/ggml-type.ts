// ggml tensor type ids as GGUF stores them, and which of them map to a graph dtype.
import type { DType } from "../../graph/dtype.ts";

/** ggml type id → our dtype, for the types this runtime reads. */
export const GGML_TO_DTYPE: ReadonlyMap<number, DType> = new Map<number, DType>([
  [0, "f32"],
  [1, "f16"],
  [2, "q4_0"],
  [3, "q4_1"],
  [6, "q5_0"],
  [7, "q5_1"],
  [8, "q8_0"],
  [12, "q4_k"],
  [13, "q5_k"],
  [14, "q6_k"],
  [24, "i8"],
  [26, "i32"],
  [30, "bf16"],
]);

/** dtype → ggml type id (the inverse of GGML_TO_DTYPE), for writers. */
export const DTYPE_TO_GGML: ReadonlyMap<DType, number> = new Map([...GGML_TO_DTYPE].map(([id, d]) => [d, id]));

/** Names of every ggml type id, supported or not, so an error can say "Q5_K (id 13)". */
export const GGML_TYPE_NAMES: readonly (string | undefined)[] = [
  "F32", "F16", "Q4_0", "Q4_1", undefined, undefined, "Q5_0", "Q5_1", "Q8_0", "Q8_1",
  "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
  "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M",
  "BF16", undefined, undefined, undefined, "TQ1_0", "TQ2_0", undefined, undefined, undefined, "MXFP4",
];

export function ggmlTypeName(id: number): string | undefined {
  return GGML_TYPE_NAMES[id];
}
