// Runs a kernel case on any Device and checks it against the case's reference. GPU renderer tests import
// `cases` (cases.ts) and these two functions (runKernel, beneath runCase, runs any one kernel on given bytes):
//   for (const kc of cases) test(kc.name, async () => assertCase(kc, await runCase(device, kc)));
import type { Device, DeviceBuffer } from "../../backends/device.ts";
import type { Kernel } from "../../kernels/ir.ts";
import { KernelFault } from "../../backends/errors.ts";
import type { Expect, KernelCase } from "./cases.ts";
import { halfToNum, bf16ToNum } from "./data.ts";

export interface CaseRun {
  inputs: Uint8Array[];
  /** Every binding's bytes after the dispatch (absent when it faulted). */
  outputs?: Uint8Array[];
  fault?: KernelFault;
}

/** Builds the case's kernel for the device's caps, dispatches it once and reads every binding back. */
export async function runCase(dev: Device, kc: KernelCase, timeoutMs = 60_000): Promise<CaseRun> {
  const inputs = kc.inputs();
  try {
    return { inputs, outputs: await runKernel(dev, kc.make(dev.target.caps), inputs, undefined, timeoutMs) };
  } catch (e) {
    if (e instanceof KernelFault) return { inputs, fault: e };
    throw e;
  }
}

/** Runs `k` once (eagerly) with the given initial bytes per binding; returns every binding's bytes after. */
export async function runKernel(dev: Device, k: Kernel, inputs: Uint8Array[], grid = k.grid, timeoutMs = 60_000): Promise<Uint8Array[]> {
  const bufs: DeviceBuffer[] = inputs.map((b) => {
    const d = dev.alloc(b.byteLength, "device");
    dev.write(d, 0, b);
    return d;
  });
  try {
    const compiled = dev.compile(k);
    dev.run([{
      k: "kernel", compiled, grid, work: { bytes: 0, flops: 0 },
      bindings: bufs.map((buffer) => ({ buffer, offset: 0, bytes: buffer.bytes })),
    }]);
    await dev.synchronize(timeoutMs);
    return await Promise.all(bufs.map((b) => dev.read(b, 0, b.bytes)));
  } finally {
    for (const b of bufs) dev.free(b);
  }
}

function read(e: Expect, b: Uint8Array, n: number): number[] {
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    switch (e.type) {
      case "f32": out.push(dv.getFloat32(i * 4, true)); break;
      case "u32": out.push(dv.getUint32(i * 4, true)); break;
      case "i32": out.push(dv.getInt32(i * 4, true)); break;
      case "f16": out.push(halfToNum(dv.getUint16(i * 2, true))); break;
      case "bf16": out.push(bf16ToNum(dv.getUint16(i * 2, true))); break;
    }
  }
  return out;
}

/** Problems found comparing a run with the case's reference (empty = pass). Lists at most `max`. */
export function checkCase(kc: KernelCase, run: CaseRun, max = 8): string[] {
  if (kc.fault !== undefined) {
    if (!run.fault) return [`expected KernelFault code ${kc.fault}, the dispatch succeeded`];
    if (run.fault.code !== kc.fault) return [`expected fault code ${kc.fault}, got ${run.fault.code} (${run.fault.message})`];
    return [];
  }
  if (run.fault) return [`unexpected ${run.fault.message}`];
  const bad: string[] = [];
  let count = 0;
  for (const e of kc.expect(run.inputs)) {
    const got = read(e, run.outputs![e.binding], e.want.length);
    for (let i = 0; i < e.want.length; i++) {
      const w = e.want[i], g = got[i];
      let ok: boolean;
      if (Number.isNaN(w)) ok = Number.isNaN(g);
      else if (!Number.isFinite(w)) ok = g === w;
      else if (!Number.isFinite(g)) ok = false;
      else if (!e.tol) ok = g === w;
      else ok = Math.abs(g - w) <= e.tol.abs + e.tol.rel * (e.mag ? e.mag[i] : Math.abs(w));
      if (!ok) {
        count++;
        if (bad.length < max) bad.push(`binding ${e.binding}[${i}]: got ${g}, want ${w}${e.tol ? ` (tol ${e.tol.abs} + ${e.tol.rel} * ${e.mag ? e.mag[i] : Math.abs(w)})` : ""}`);
      }
    }
  }
  if (count > bad.length) bad.push(`... ${count} mismatches in all`);
  return bad;
}

/** Throws with the mismatches when a run does not match its case. */
export function assertCase(kc: KernelCase, run: CaseRun): void {
  const bad = checkCase(kc, run);
  if (bad.length) throw new Error(`${kc.name}:\n  ${bad.join("\n  ")}`);
}
