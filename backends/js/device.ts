// The JavaScript device: buffers are ArrayBuffers, kernels are rendered to JS functions, a recording is the
// dispatch list with every binding's typed-array views made once. Work runs when it is enqueued; a failed
// check is held and raised by synchronize (as a GPU's staged fault would be), and the steps after it in the
// same submission are skipped.
import { totalmem } from "node:os";
import type {
  CompiledKernel, Device, DeviceBinding, DeviceBuffer, DeviceStep, Recording,
} from "../device.ts";
import { DeviceLost, KernelFault, OutOfMemory, Poisoned, Unsupported } from "../errors.ts";
import type { Kernel } from "../../kernels/ir.ts";
import { type Caps, JS_CAPS, type TargetSet } from "../../kernels/target.ts";
import { type JsKernel, JsKernelFault, type View } from "../../kernels/render/js.ts";
import { RENDERERS } from "../../kernels/render/mod.ts";

/**
 * Capabilities the JS device reports. Subgroups of one lane make the kernel library choose one invocation per
 * row with no cross-lane traffic, which the renderer runs on its fast scalar path (subgroup ops become
 * identities and no barriers are emitted).
 */
export const JS_DEVICE_CAPS: Caps = { ...JS_CAPS, subgroups: true, subgroupSize: 1 };

export interface JsDeviceOptions {
  /** Bounds-check every access and validate barriers (slower; faults with code 0 instead of dropping). */
  debug?: boolean;
  caps?: Partial<Caps>;
}

class JsBuffer implements DeviceBuffer {
  freed = false;
  constructor(readonly bytes: number, readonly data: ArrayBuffer, readonly usage: string) {}
}
class JsCompiled implements CompiledKernel {
  constructor(readonly kernel: Kernel, readonly js: JsKernel) {}
}
type Prepared =
  | { k: "kernel"; js: JsKernel; views: View[]; grid: [number, number, number] }
  | { k: "copy"; src: Uint8Array; dst: Uint8Array };
class JsRecording implements Recording {
  released = false;
  constructor(readonly list: Prepared[]) {}
  get steps(): number {
    return this.list.length;
  }
}

export class JsDevice implements Device {
  readonly target: TargetSet;
  poisoned: string | undefined;
  private pending: KernelFault | undefined;
  private readonly debug: boolean;
  private readonly cache = new WeakMap<Kernel, JsCompiled>();
  private live = 0;

  constructor(opts: JsDeviceOptions = {}) {
    this.debug = opts.debug ?? false;
    this.target = {
      backend: "js",
      device: `JavaScript CPU${this.debug ? " (debug)" : ""}`,
      caps: { ...JS_DEVICE_CAPS, ...opts.caps },
      memory: { totalBytes: totalmem() },
      watchdogBudget: 0,
    };
  }

  private alive(): void {
    if (this.poisoned !== undefined) throw new Poisoned("js", this.poisoned);
  }
  private buf(b: DeviceBuffer): JsBuffer {
    if (!(b instanceof JsBuffer)) throw new Unsupported("js: not a JS device buffer");
    if (b.freed) throw new Unsupported("js: buffer used after free");
    return b;
  }
  private range(b: DeviceBinding): { data: ArrayBuffer; offset: number; bytes: number } {
    const jb = this.buf(b.buffer);
    if (b.offset < 0 || b.bytes < 0 || b.offset + b.bytes > jb.bytes) {
      throw new Unsupported(`js: binding ${b.offset}+${b.bytes} outside a ${jb.bytes}-byte buffer`);
    }
    return { data: jb.data, offset: b.offset, bytes: b.bytes };
  }

  alloc(bytes: number, usage: "device" | "upload" | "readback"): DeviceBuffer {
    this.alive();
    if (!Number.isInteger(bytes) || bytes < 0) throw new Unsupported(`js: cannot allocate ${bytes} bytes`);
    let data: ArrayBuffer;
    try {
      data = new ArrayBuffer(bytes);
    } catch (e) {
      throw new OutOfMemory("js", bytes, (e as Error).message);
    }
    this.live += bytes;
    return new JsBuffer(bytes, data, usage);
  }
  free(b: DeviceBuffer): void {
    const jb = this.buf(b);
    jb.freed = true;
    this.live -= jb.bytes;
  }
  /** Bytes currently allocated. */
  get allocated(): number {
    return this.live;
  }
  write(b: DeviceBuffer, offset: number, data: Uint8Array): void {
    this.alive();
    const r = this.range({ buffer: b, offset, bytes: data.byteLength });
    new Uint8Array(r.data, r.offset, r.bytes).set(data);
  }
  read(b: DeviceBuffer, offset: number, bytes: number): Promise<Uint8Array> {
    this.alive();
    const r = this.range({ buffer: b, offset, bytes });
    return Promise.resolve(new Uint8Array(r.data.slice(r.offset, r.offset + r.bytes)));
  }
  /** Direct access to a buffer's bytes (host-side tools and tests; no copy). */
  bytesOf(b: DeviceBuffer): Uint8Array {
    const jb = this.buf(b);
    return new Uint8Array(jb.data);
  }

  compile(kernel: Kernel): CompiledKernel {
    this.alive();
    let c = this.cache.get(kernel);
    if (!c) {
      const caps = this.target.caps;
      if (kernel.uses.subgroups && !caps.subgroups) throw new Unsupported(`js: ${kernel.name} needs subgroups`);
      c = new JsCompiled(kernel, RENDERERS.js.render(kernel, caps, { debug: this.debug }));
      this.cache.set(kernel, c);
    }
    return c;
  }

  private prepare(steps: DeviceStep[]): Prepared[] {
    return steps.map((s): Prepared => {
      if (s.k === "copy") {
        const a = this.range(s.src), b = this.range(s.dst);
        if (a.bytes !== b.bytes) throw new Unsupported(`js: copy of ${a.bytes} bytes into ${b.bytes}`);
        return { k: "copy", src: new Uint8Array(a.data, a.offset, a.bytes), dst: new Uint8Array(b.data, b.offset, b.bytes) };
      }
      if (!(s.compiled instanceof JsCompiled)) throw new Unsupported("js: kernel was not compiled by this device");
      const js = s.compiled.js;
      const views = js.bind(s.bindings.map((b) => {
        const r = this.range(b);
        return { buffer: r.data, offset: r.offset, bytes: r.bytes };
      }));
      return { k: "kernel", js, views, grid: s.grid };
    });
  }
  private exec(list: Prepared[]): void {
    if (this.pending) return; // a fault is staged: the rest of the work is discarded until synchronize
    for (const p of list) {
      try {
        if (p.k === "copy") p.dst.set(p.src);
        else p.js.run(p.views, p.grid);
      } catch (e) {
        if (e instanceof JsKernelFault) {
          this.pending = new KernelFault("js", e.kernel, e.code);
          if (e.detail) this.pending.message += ` (${e.detail})`;
          return;
        }
        // Anything else is a renderer bug; the device can no longer vouch for its buffers.
        this.poisoned = `${p.k === "kernel" ? p.js.kernel.name : "copy"}: ${(e as Error).message}`;
        throw new DeviceLost("js", this.poisoned);
      }
    }
  }

  record(steps: DeviceStep[]): Recording {
    this.alive();
    return new JsRecording(this.prepare(steps));
  }
  replay(rec: Recording): void {
    this.alive();
    if (!(rec instanceof JsRecording) || rec.released) throw new Unsupported("js: not a live recording of this device");
    this.exec(rec.list);
  }
  run(steps: DeviceStep[]): void {
    this.alive();
    this.exec(this.prepare(steps));
  }
  synchronize(_timeoutMs: number): Promise<void> {
    if (this.poisoned !== undefined) return Promise.reject(new Poisoned("js", this.poisoned));
    const f = this.pending;
    this.pending = undefined;
    return f ? Promise.reject(f) : Promise.resolve();
  }
  releaseRecording(rec: Recording): void {
    if (rec instanceof JsRecording) rec.released = true;
  }
  destroy(): Promise<void> {
    this.poisoned ??= "destroyed";
    return Promise.resolve();
  }
}
