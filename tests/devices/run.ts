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

/**
 * Mismatches between a reference run (the JS device) and a device run, per the case's checks. An element also
 * passes where it matches `alt`, a second reference run (the same case with subnormal inputs flushed).
 */
export function compareRuns(c: FeatureCase, want: Uint8Array[], got: Uint8Array[], max = 6, alt?: Uint8Array[]): string[] {
  const bad: string[] = [];
  let count = 0;
  for (const chk of c.checks) {
    const w = elements(chk, want[chk.binding]), g = elements(chk, got[chk.binding]);
    const w2 = alt && elements(chk, alt[chk.binding]);
    const [lo, hi] = chk.range ?? [0, w.n];
    for (let i = lo; i < hi; i++) {
      const ok = close(chk, w, g, i) || (w2 !== undefined && close(chk, w2, g, i));
      if (!ok && ++count <= max) bad.push(`${c.name} binding ${chk.binding}[${i}]: got ${g.at(i)}, want ${w.at(i)}`);
    }
  }
  if (count > max) bad.push(`${c.name}: ${count} mismatches in all`);
  return bad;
}

/**
 * Bindings whose bytes differ only where a float check reads NaN on both sides, as "" (else the first difference).
 * The same code on two JS engines may store different NaN bit patterns: a Float32Array store of NaN is
 * implementation-defined, and JavaScriptCore's tiers differ from V8's.
 */
export function sameBytesModNaN(c: FeatureCase, want: Uint8Array[], got: Uint8Array[]): string {
  if (want.length !== got.length) return `${c.name}: ${got.length} bindings, want ${want.length}`;
  for (let b = 0; b < want.length; b++) {
    const w = want[b], g = got[b];
    if (w.length !== g.length) return `${c.name} binding ${b}: ${g.length} bytes, want ${w.length}`;
    const nan = new Uint8Array(w.length); // 1 where both sides hold a NaN of a float check
    for (const chk of c.checks.filter((k) => k.binding === b && (k.as === "f32" || k.as === "f16" || k.as === "bf16"))) {
      const we = elements(chk, w), ge = elements(chk, g), width = chk.as === "f32" ? 4 : 2;
      for (let i = 0; i < we.n; i++) if (Number.isNaN(we.at(i)) && Number.isNaN(ge.at(i))) nan.fill(1, i * width, (i + 1) * width);
    }
    for (let i = 0; i < w.length; i++) if (w[i] !== g[i] && !nan[i]) return `${c.name} binding ${b} byte ${i}: ${g[i]}, want ${w[i]}`;
  }
  return "";
}

type Elements = ReturnType<typeof elements>;
function close(chk: OutputCheck, w: Elements, g: Elements, i: number): boolean {
  const a = w.at(i), b = g.at(i);
  if (w.bits(i) === g.bits(i)) return true;
  if (chk.as !== "f32" && chk.as !== "f16" && chk.as !== "bf16") return false;
  if (Number.isNaN(a) || Number.isNaN(b)) return Number.isNaN(a) && Number.isNaN(b);
  if (!Number.isFinite(a) || !Number.isFinite(b)) return false;
  if (chk.abs !== undefined) return Math.abs(a - b) <= chk.abs;
  const u = chk.as === "f32" ? Math.abs(ord32(a) - ord32(b)) : Math.abs(ord16(w.bits(i)) - ord16(g.bits(i))); // f16/bf16 ulps
  return u <= (chk.ulps ?? 0);
}

/**
 * The case with every subnormal of its f32 input bindings replaced by a zero of its sign (what a device that
 * flushes subnormal operands computes with), or undefined when it has none.
 */
export function flushedInputs(c: FeatureCase): FeatureCase | undefined {
  let any = false;
  const inputs = c.inputs.map((b, j) => {
    if (c.kernel.buffers[j]?.elem !== "f32" || b.byteLength % 4) return b;
    const out = b.slice(), u = new Uint32Array(out.buffer);
    for (let i = 0; i < u.length; i++) {
      if ((u[i] & 0x7f800000) === 0 && (u[i] & 0x007fffff) !== 0) {
        u[i] &= 0x80000000;
        any = true;
      }
    }
    return out;
  });
  return any ? { ...c, inputs } : undefined;
}
