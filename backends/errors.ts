// Typed errors of the execution layer. A device fault never aborts the process: the call that sees it
// throws one of these, and the engine refuses later work as the spec says.

/** Base class of the execution layer's errors. */
export class ExecError extends Error {
  /** The error's class name. */
  override name = "ExecError";
}
/** The device is gone (a failed submit or wait, a sticky CUDA error, wgpu device-lost). Poisons. */
export class DeviceLost extends ExecError {
  /** The error's class name. */
  override name = "DeviceLost";
  /** Builds the error and its one-line message. */
  constructor(readonly backend: string, readonly detail: string) {
    super(`${backend}: device lost: ${detail}`);
  }
}
/** A wait for the device outlasted its bound. Poisons. */
export class DeviceTimeout extends ExecError {
  /** The error's class name. */
  override name = "DeviceTimeout";
  /** Builds the error and its one-line message. */
  constructor(readonly backend: string, readonly what: string, readonly ms: number) {
    super(`${backend}: ${what} did not finish within ${ms} ms`);
  }
}
/** A kernel's check failed (a trap on ptx/rocm, a fault word on vulkan/wgpu). */
export class KernelFault extends ExecError {
  /** The error's class name. */
  override name = "KernelFault";
  /** Builds the error and its one-line message. */
  constructor(readonly backend: string, readonly kernel: string, readonly code: number) {
    super(`${backend}: kernel ${kernel} failed check with code ${code}`);
  }
}
/** The context was poisoned by an earlier fault; nothing touches the device any more. */
export class Poisoned extends ExecError {
  /** The error's class name. */
  override name = "Poisoned";
  /** Builds the error and its one-line message. */
  constructor(readonly backend: string, readonly reason: string) {
    super(`${backend}: context is poisoned (${reason}); refusing work`);
  }
}
/** A step failed after it replayed; State may be half-written until resetState. */
export class NeedsReset extends ExecError {
  /** The error's class name. */
  override name = "NeedsReset";
  /** Builds the error and its one-line message. */
  constructor(readonly entry: number) {
    super(`entry ${entry} needs resetState after a failed step`);
  }
}
/** A device allocation failed. */
export class OutOfMemory extends ExecError {
  /** The error's class name. */
  override name = "OutOfMemory";
  /** Builds the error and its one-line message. */
  constructor(readonly backend: string, readonly bytes: number, readonly detail = "") {
    super(`${backend}: out of memory allocating ${bytes} bytes${detail ? `: ${detail}` : ""}`);
  }
}
/** The target cannot do what was asked (a missing capability, a too-large binding, an unknown op). */
export class Unsupported extends ExecError {
  /** The error's class name. */
  override name = "Unsupported";
}
