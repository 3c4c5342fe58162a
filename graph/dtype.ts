// Element types of the graph. Packed block types (q8_0 ...) are GGUF's; only a dequantizing consumer reads them.

/** Plain element types a kernel can compute with or store. */
export type ScalarDType = "f32" | "f16" | "bf16" | "i32" | "u32" | "i8" | "u8" | "bool";
/** GGUF block-quantized types: bytes laid out in blocks along the innermost dimension. */
export type BlockDType = "q8_0" | "q4_0" | "q4_k" | "q6_k";
export type DType = ScalarDType | BlockDType;

/** Block geometry of each packed type: elements per block and bytes per block (GGUF's definitions). */
export const BLOCK: Record<BlockDType, { elems: number; bytes: number }> = {
  q8_0: { elems: 32, bytes: 34 },
  q4_0: { elems: 32, bytes: 18 },
  q4_k: { elems: 256, bytes: 144 },
  q6_k: { elems: 256, bytes: 210 },
};

/** Bytes per element of a scalar type (bool is stored as one byte). */
export const SIZE: Record<ScalarDType, number> = {
  f32: 4, f16: 2, bf16: 2, i32: 4, u32: 4, i8: 1, u8: 1, bool: 1,
};

export function isBlock(d: DType): d is BlockDType {
  return d in BLOCK;
}

/** Bytes taken by `count` elements of `d` (count must be a whole number of blocks for block types). */
export function byteSize(d: DType, count: number): number {
  if (isBlock(d)) {
    const b = BLOCK[d];
    if (count % b.elems !== 0) throw new RangeError(`${count} elements is not a whole number of ${d} blocks`);
    return (count / b.elems) * b.bytes;
  }
  return count * SIZE[d];
}
