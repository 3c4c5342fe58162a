// A Device that forwards to another and adds up the host time spent in each call, so the benchmark can say
// where a token's time goes: writing slots and issuing work (host), waiting for the device, reading back.
// performance.now() around each call costs well under a microsecond, against steps of hundreds.
import type { CompiledKernel, Device, DeviceBuffer, DeviceStep, Recording } from "../backends/device.ts";
import type { Kernel } from "../kernels/ir.ts";
import type { TargetSet } from "../kernels/target.ts";

/** Accumulated milliseconds per kind of call (and bytes written). */
export interface DeviceTimes {
  /** write(): slot and weight uploads as the host sees them (async copies return early on GPUs). */
  write: number;
  writeBytes: number;
  /** replay() and run(): issuing recorded or eager work. */
  issue: number;
  /** synchronize(): waiting for the device to finish. */
  wait: number;
  /** read(): readback after the wait. */
  read: number;
  /** compile(): rendering and JIT of kernels. */
  compile: number;
  /** record(): capture. */
  record: number;
}

export function zeroTimes(): DeviceTimes {
  return { write: 0, writeBytes: 0, issue: 0, wait: 0, read: 0, compile: 0, record: 0 };
}

export class TimedDevice implements Device {
  times: DeviceTimes = zeroTimes();
  /** Every recording made through this wrapper, in order (benches profile the Engine's own). */
  readonly recordings: Recording[] = [];
  constructor(readonly inner: Device) {
    if (inner.mark) this.mark = () => inner.mark!();
  }

  get target(): TargetSet {
    return this.inner.target;
  }
  get poisoned(): string | undefined {
    return this.inner.poisoned;
  }
  // The device's own schedule, which the Engine reads: without them a bench's Driver ran one step at a time
  // (Device.stepsAhead absent) where `poot run` keeps the device's default in flight, and never parked.
  get stepsAhead(): number | undefined {
    return this.inner.stepsAhead;
  }
  get autonomous(): boolean | undefined {
    return this.inner.autonomous;
  }
  /** Returns the times so far and starts counting from zero. */
  take(): DeviceTimes {
    const t = this.times;
    this.times = zeroTimes();
    return t;
  }

  alloc(bytes: number, usage: "device" | "upload" | "readback"): DeviceBuffer {
    return this.inner.alloc(bytes, usage);
  }
  free(buf: DeviceBuffer): void {
    this.inner.free(buf);
  }
  write(buf: DeviceBuffer, offset: number, data: Uint8Array): void {
    const t0 = performance.now();
    try {
      this.inner.write(buf, offset, data);
    } finally {
      this.times.write += performance.now() - t0;
      this.times.writeBytes += data.byteLength;
    }
  }
  async read(buf: DeviceBuffer, offset: number, bytes: number): Promise<Uint8Array> {
    const t0 = performance.now();
    try {
      return await this.inner.read(buf, offset, bytes);
    } finally {
      this.times.read += performance.now() - t0;
    }
  }
  compile(kernel: Kernel): CompiledKernel {
    const t0 = performance.now();
    try {
      return this.inner.compile(kernel);
    } finally {
      this.times.compile += performance.now() - t0;
    }
  }
  record(steps: DeviceStep[]): Recording {
    const t0 = performance.now();
    try {
      const rec = this.inner.record(steps);
      this.recordings.push(rec);
      return rec;
    } finally {
      this.times.record += performance.now() - t0;
    }
  }
  replay(rec: Recording): void {
    const t0 = performance.now();
    try {
      this.inner.replay(rec);
    } finally {
      this.times.issue += performance.now() - t0;
    }
  }
  run(steps: DeviceStep[]): void {
    const t0 = performance.now();
    try {
      this.inner.run(steps);
    } finally {
      this.times.issue += performance.now() - t0;
    }
  }
  /** Device.mark where the inner device has it. */
  readonly mark?: () => number;
  async synchronize(timeoutMs: number, mark?: number): Promise<void> {
    const t0 = performance.now();
    try {
      await this.inner.synchronize(timeoutMs, mark);
    } finally {
      this.times.wait += performance.now() - t0;
    }
  }
  releaseRecording(rec: Recording): void {
    this.inner.releaseRecording(rec);
  }
  destroy(): Promise<void> {
    return this.inner.destroy();
  }
}
