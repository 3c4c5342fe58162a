// Fault codes of the kernel library's checks: one table, one code per kernel and condition, so a KernelFault
// names what went wrong. Codes are in 1..0xffff (kernels/ir.ts); 0 is the JS renderer's debug-mode
// out-of-bounds fault, never a library check.
//
// | code   | kernel        | fails when                                                         |
// |--------|---------------|--------------------------------------------------------------------|
// | 0x0101 | gather        | a token id ids[r] is >= the table's row count (or negative, i32)   |
// | 0x0201 | update_slice  | pos + rows > cap (or pos negative, i32)                            |
// | 0x0301 | scatter       | an index idx[r] is >= cap (or negative, i32)                       |
// | 0x0401 | attention     | pos + rows > cap (or pos negative, i32)                            |
// | 0x0402 | attention     | a paged row's block table entry is >= the pool's blocks (or negative) |
// | 0x0501 | rope          | a position is negative (i32 positions)                             |
export const FAULT = {
  GATHER_ID: 0x0101,
  UPDATE_POS: 0x0201,
  SCATTER_INDEX: 0x0301,
  ATTENTION_POS: 0x0401,
  PAGED_BLOCK: 0x0402,
  ROPE_POS: 0x0501,
} as const;
export type FaultCode = (typeof FAULT)[keyof typeof FAULT];
