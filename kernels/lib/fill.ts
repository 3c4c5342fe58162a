// Zero-fill of a buffer on the device: what the Engine uses to clear K/V state between sequences, instead of
// uploading a host buffer of zeros (hundreds of MB for a long context: tens of milliseconds over PCIe, paid
// before every prompt). A fixed grid strides over the words with 16-byte stores where the size allows.
import { type Kernel, KernelBuilder, KernelError, u32 } from "../ir.ts";
import type { Caps } from "../target.ts";
import { gridFor, wgIndex } from "./common.ts";

/** Bindings: dst u32 [words] (w). */
export function zeroFill(caps: Caps, words: number): Kernel {
  if (!(Number.isInteger(words) && words >= 1 && words < 2 ** 32)) throw new KernelError(`zero fill: bad size ${words} words`);
  const vec = words % 4 === 0 ? 4 : 1, items = words / vec;
  const wg = Math.min(256, caps.maxWorkgroupSize);
  const groups = Math.max(1, Math.min(Math.ceil(items / wg), 2048));
  const grid = gridFor(caps, groups);
  const b = new KernelBuilder(`zero_fill_${words}`, { workgroup: wg, grid });
  const dst = b.buffer("dst", "u32", "w");
  const total = grid[0] * grid[1] * grid[2] * wg;
  const start = b.let(wgIndex(b, grid).mul(wg).add(b.lid.x), "u32", "i");
  b.for(start, u32(items), total, (i) => {
    if (vec === 4) b.storev(dst, i.mul(4), [u32(0), u32(0), u32(0), u32(0)]);
    else b.store(dst, i, u32(0));
  });
  return b.build();
}
