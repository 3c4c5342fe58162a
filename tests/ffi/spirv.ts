// A tiny SPIR-V word assembler for hand-written test shaders (the real emitter lives in kernels/render).

/** One instruction: the opcode and its operands (numbers are words; strings become NUL-padded literals). */
export function op(opcode: number, ...operands: (number | string)[]): number[] {
  const words: number[] = [];
  for (const x of operands) {
    if (typeof x === "number") {
      words.push(x >>> 0);
      continue;
    }
    const bytes = new TextEncoder().encode(x);
    const padded = new Uint8Array((Math.floor(bytes.length / 4) + 1) * 4);
    padded.set(bytes);
    const dv = new DataView(padded.buffer);
    for (let i = 0; i < padded.length; i += 4) words.push(dv.getUint32(i, true));
  }
  return [((words.length + 1) << 16) | opcode, ...words];
}

/** A module from its instructions, with the header (SPIR-V 1.3, id bound `bound`). */
export function module(bound: number, ...instructions: number[][]): Uint32Array {
  return new Uint32Array([0x07230203, 0x00010300, 0, bound, 0, ...instructions.flat()]);
}

/**
 * A compute shader (local size 64) that adds 1 to every u32 of the storage buffer at set 0, binding 0:
 * buf.data[gl_GlobalInvocationID.x] += 1.
 */
export function addOneShader(): Uint32Array {
  const [main, gid, rta, Buf, buf, tvoid, tfn, u32, v3u, pin, pbuf, pu32, c0, c1, lbl, g, x, p, v, w] = Array.from({ length: 20 }, (_, i) => i + 1);
  return module(
    21,
    op(17, 1), // OpCapability Shader
    op(14, 0, 1), // OpMemoryModel Logical GLSL450
    op(15, 5, main, "main", gid), // OpEntryPoint GLCompute %main "main" %gid
    op(16, main, 17, 64, 1, 1), // OpExecutionMode %main LocalSize 64 1 1
    op(71, gid, 11, 28), // OpDecorate %gid BuiltIn GlobalInvocationId
    op(71, rta, 6, 4), // OpDecorate %rta ArrayStride 4
    op(72, Buf, 0, 35, 0), // OpMemberDecorate %Buf 0 Offset 0
    op(71, Buf, 2), // OpDecorate %Buf Block
    op(71, buf, 34, 0), // OpDecorate %buf DescriptorSet 0
    op(71, buf, 33, 0), // OpDecorate %buf Binding 0
    op(19, tvoid), // OpTypeVoid
    op(33, tfn, tvoid), // OpTypeFunction %void
    op(21, u32, 32, 0), // OpTypeInt 32 unsigned
    op(23, v3u, u32, 3), // OpTypeVector %u32 3
    op(32, pin, 1, v3u), // OpTypePointer Input %v3u
    op(59, pin, gid, 1), // OpVariable Input
    op(29, rta, u32), // OpTypeRuntimeArray %u32
    op(30, Buf, rta), // OpTypeStruct %rta
    op(32, pbuf, 12, Buf), // OpTypePointer StorageBuffer %Buf
    op(59, pbuf, buf, 12), // OpVariable StorageBuffer
    op(32, pu32, 12, u32), // OpTypePointer StorageBuffer %u32
    op(43, u32, c0, 0), // OpConstant 0
    op(43, u32, c1, 1), // OpConstant 1
    op(54, tvoid, main, 0, tfn), // OpFunction %void None %fn
    op(248, lbl), // OpLabel
    op(61, v3u, g, gid), // OpLoad %v3u %gid
    op(81, u32, x, g, 0), // OpCompositeExtract .x
    op(65, pu32, p, buf, c0, x), // OpAccessChain %buf.data[x]
    op(61, u32, v, p), // OpLoad
    op(128, u32, w, v, c1), // OpIAdd
    op(62, p, w), // OpStore
    op(253), // OpReturn
    op(56), // OpFunctionEnd
  );
}
