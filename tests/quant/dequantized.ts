// A GGUF file with every tensor as f32: block and f16 tensors decoded exactly as the oracle does (bit-exact with
// ggml's dequantize_row_*, tests/quant/ggml.test.ts). llama.cpp runs it as plain f32 math, which poot's run of the
// quantized file must equal: the exact half of tier 3 for quantized files.
import { writeFileSync } from "node:fs";
import { decodeHalf, dequantize, isBlock, storageFromBytes } from "../../graph/dtype.ts";
import { openGGUF } from "../../llm/formats/gguf.ts";
import { writeGGUF } from "../../llm/formats/gguf-write.ts";

export function dequantizedCopy(src: string, out: string): void {
  const f = openGGUF(src);
  try {
    const tensors = [...f.tensors()].map((t) => {
      const b = f.bytes(t.name), n = t.shape.reduce((a, c) => a * c, 1);
      const x = isBlock(t.dtype) ? dequantize(t.dtype, b, n)
        : t.dtype === "f16" || t.dtype === "bf16" ? decodeHalf(t.dtype, storageFromBytes(t.dtype, b) as Uint16Array)
        : Float32Array.from(storageFromBytes("f32", b) as Float32Array);
      return { name: t.name, dtype: "f32" as const, shape: t.shape, data: new Uint8Array(x.buffer, x.byteOffset, x.byteLength) };
    });
    writeFileSync(out, writeGGUF({ metadata: f.metadata, tensors }));
  } finally {
    f.close();
  }
}
