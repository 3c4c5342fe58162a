// The WebGPU device's readback path: mapping a MAP_READ staging buffer (bounded by a timeout, read early where
// Deno's map has already happened; see mappedEarly), and waiting for submitted work when there is nothing to map.
// A timeout is DeviceTimeout, a failed map DeviceLost; both poison the device.
import { DeviceLost, DeviceTimeout, type ExecError } from "../errors.ts";
import { B, MAP_READ, type WgpuStats } from "./handles.ts";

/** What a map needs of the device: its counters, its early-map state, and its poison and device-lost state. */
export interface MapContext {
  gpu: GPUDevice;
  stats: WgpuStats;
  /** Read a staging buffer as soon as its map has happened (WgpuOptions.earlyMap). */
  earlyMap: boolean;
  /** Staging buffers mapped once by awaiting mapAsync (see mappedEarly). */
  mappedOnce: WeakSet<GPUBuffer>;
  /** Poisons the device with `e` and returns it. */
  poison(e: ExecError): ExecError;
  /** The device-lost error when the device was lost (reported once as DeviceLost), else undefined. */
  lost(): ExecError | undefined;
}

/** `p`, or `timeout()` when it has not settled after `ms`. */
export function bounded<T>(p: Promise<T>, ms: number, timeout: () => Error): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const t = setTimeout(() => reject(timeout()), ms);
    p.then((v) => {
      clearTimeout(t);
      resolve(v);
    }, (e) => {
      clearTimeout(t);
      reject(e);
    });
  });
}

/** Maps a MAP_READ buffer (bounded), copies its bytes out and unmaps. */
export async function mapRead(cx: MapContext, st: GPUBuffer, timeoutMs: number, what: string): Promise<Uint8Array> {
  const t0 = performance.now();
  const p = st.mapAsync(MAP_READ);
  p.catch(() => {}); // a timed-out map may still reject later
  const early = mappedEarly(cx, st, p);
  if (early) {
    cx.stats.maps++;
    cx.stats.earlyMaps++;
    cx.stats.mapMicros += (performance.now() - t0) * 1000;
    return early;
  }
  try {
    await bounded(p, timeoutMs, () => new DeviceTimeout(B, `${what} (mapAsync)`, timeoutMs));
  } catch (e) {
    if (e instanceof DeviceTimeout) throw cx.poison(e);
    await Promise.resolve(); // let a pending device-lost callback land first
    const lost = cx.lost();
    if (lost) throw lost;
    throw cx.poison(new DeviceLost(B, `${what}: mapAsync failed: ${(e as Error).message}`));
  }
  const out = new Uint8Array(st.getMappedRange().slice(0));
  st.unmap();
  cx.mappedOnce.add(st);
  cx.stats.maps++;
  cx.stats.mapMicros += (performance.now() - t0) * 1000;
  return out;
}

/**
 * The bytes of a buffer whose mapAsync was just called, when the map has already happened. Deno's mapAsync
 * polls its first step at the call: it waits on the device (wgpu's blocking poll), which runs the map
 * callback, and only then sleeps 10 ms before it checks again and resolves the promise. The buffer is
 * mapped inside wgpu from that first poll on, so its range can be read and unmapped at once; the promise
 * resolves later, on its own. Only for a buffer that was mapped the ordinary way before (Deno keeps the map
 * mode from that one; before it, getMappedRange would panic); any refusal (a runtime that polls lazily,
 * work still running, a lost device) falls back to awaiting the promise.
 */
function mappedEarly(cx: MapContext, st: GPUBuffer, p: Promise<void>): Uint8Array | undefined {
  if (!cx.earlyMap || !cx.mappedOnce.has(st)) return undefined;
  let out: Uint8Array;
  try {
    out = new Uint8Array(st.getMappedRange().slice(0));
  } catch {
    return undefined;
  }
  try {
    st.unmap();
  } catch {
    // unmapped already: the bytes read are the buffer's
  }
  p.then(() => {}, () => {});
  return out;
}

export async function waitIdle(cx: MapContext, timeoutMs: number): Promise<void> {
  const p = cx.gpu.queue.onSubmittedWorkDone();
  p.catch(() => {});
  try {
    await bounded(p, timeoutMs, () => new DeviceTimeout(B, "synchronize (onSubmittedWorkDone)", timeoutMs));
  } catch (e) {
    if (e instanceof DeviceTimeout) throw cx.poison(e);
    throw cx.poison(new DeviceLost(B, `onSubmittedWorkDone failed: ${(e as Error).message}`));
  }
}
