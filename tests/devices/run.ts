// Running feature cases (feature_kernels.ts) on a Device and comparing two devices' outputs.
import type { Device, DeviceBuffer, DeviceStep } from "../../backends/device.ts";
import type { FeatureCase, OutputCheck } from "./feature_kernels.ts";

/** Allocates and fills the case's bindings on `dev`. */
export function upload(dev: Device, c: FeatureCase): DeviceBuffer[] {
  return c.inputs.map((b) => {
    const d = dev.alloc(b.byteLength, "device");
    dev.write(d, 0, b);
    return d;
  });
}
export function stepOf(dev: Device, c: FeatureCase, bufs: DeviceBuffer[]): DeviceStep {
  return {
    k: "kernel", compiled: dev.compile(c.kernel), grid: c.kernel.grid, work: { bytes: 0, flops: 0 },
    bindings: bufs.map((buffer) => ({ buffer, offset: 0, bytes: buffer.bytes })),
  };
}
export function readAll(dev: Device, bufs: DeviceBuffer[]): Promise<Uint8Array[]> {
  return Promise.all(bufs.map((b) => dev.read(b, 0, b.bytes)));
}

/** Runs the case once (eagerly) and returns every binding's bytes afterwards. */
export async function runFeature(dev: Device, c: FeatureCase, timeoutMs = 60_000): Promise<Uint8Array[]> {
  const bufs = upload(dev, c);
  try {
    dev.run([stepOf(dev, c, bufs)]);
    await dev.synchronize(timeoutMs);
    return await readAll(dev, bufs);
  } finally {
    if (dev.poisoned === undefined) for (const b of bufs) dev.free(b);
  }
}

const F32 = new Float32Array(1), U32 = new Uint32Array(F32.buffer);
const H = new Float16Array(1), HU = new Uint16Array(H.buffer);
function ord32(x: number): number {
  F32[0] = x;
  const u = U32[0];
  return u & 0x80000000 ? -(u & 0x7fffffff) : u;
}
function ord16(bits: number): number {
  return bits & 0x8000 ? -(bits & 0x7fff) : bits;
}

function elements(chk: OutputCheck, b: Uint8Array): { n: number; at: (i: number) => number; bits: (i: number) => number } {
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  switch (chk.as) {
    case "f32": return { n: b.byteLength >> 2, at: (i) => dv.getFloat32(i * 4, true), bits: (i) => dv.getUint32(i * 4, true) };
    case "i32": return { n: b.byteLength >> 2, at: (i) => dv.getInt32(i * 4, true), bits: (i) => dv.getUint32(i * 4, true) };
    case "u32": return { n: b.byteLength >> 2, at: (i) => dv.getUint32(i * 4, true), bits: (i) => dv.getUint32(i * 4, true) };
    case "f16": return {
      n: b.byteLength >> 1,
      at: (i) => {
        HU[0] = dv.getUint16(i * 2, true);
        return H[0];
      },
      bits: (i) => dv.getUint16(i * 2, true),
    };
    case "bf16": return {
      n: b.byteLength >> 1,
      at: (i) => {
        U32[0] = dv.getUint16(i * 2, true) << 16;
        return F32[0];
      },
      bits: (i) => dv.getUint16(i * 2, true),
    };
    case "u16": return { n: b.byteLength >> 1, at: (i) => dv.getUint16(i * 2, true), bits: (i) => dv.getUint16(i * 2, true) };
    case "u8": return { n: b.byteLength, at: (i) => b[i], bits: (i) => b[i] };
  }
}

/** Mismatches between a reference run (the JS device) and a device run, per the case's checks. */
export function compareRuns(c: FeatureCase, want: Uint8Array[], got: Uint8Array[], max = 6): string[] {
  const bad: string[] = [];
  let count = 0;
  for (const chk of c.checks) {
    const w = elements(chk, want[chk.binding]), g = elements(chk, got[chk.binding]);
    const [lo, hi] = chk.range ?? [0, w.n];
    for (let i = lo; i < hi; i++) {
      const a = w.at(i), b = g.at(i);
      let ok: boolean;
      if (w.bits(i) === g.bits(i)) ok = true;
      else if (chk.as !== "f32" && chk.as !== "f16" && chk.as !== "bf16") ok = false;
      else if (Number.isNaN(a) || Number.isNaN(b)) ok = Number.isNaN(a) && Number.isNaN(b);
      else if (!Number.isFinite(a) || !Number.isFinite(b)) ok = false;
      else if (chk.abs !== undefined) ok = Math.abs(a - b) <= chk.abs;
      else {
        const u = chk.as === "f32" ? Math.abs(ord32(a) - ord32(b)) : Math.abs(ord16(w.bits(i)) - ord16(g.bits(i))); // f16/bf16 ulps
        ok = u <= (chk.ulps ?? 0);
      }
      if (!ok && ++count <= max) bad.push(`${c.name} binding ${chk.binding}[${i}]: got ${b}, want ${a}`);
    }
  }
  if (count > max) bad.push(`${c.name}: ${count} mismatches in all`);
  return bad;
}
