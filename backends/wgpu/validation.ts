// Validation and out-of-memory errors of the WebGPU device. WebGPU reports them asynchronously: error scopes
// around compile and record, a shader's compilation messages, and uncaptured errors are collected as they
// come and drained (the first one thrown) at synchronize or compileAsync, each typed (OutOfMemory, Unsupported).
import { type ExecError, OutOfMemory, Unsupported } from "../errors.ts";
import { B } from "./handles.ts";

/** The device's pending validation outcomes. */
export class GpuErrors {
  /** Validation outcomes still to be looked at (compile and record error scopes, compilation messages). */
  checks: Promise<ExecError | undefined>[] = [];
  private errors: ExecError[] = [];

  constructor(private readonly gpu: GPUDevice) {
    gpu.addEventListener("uncapturederror", (ev) => {
      this.errors.push(typedError((ev as GPUUncapturedErrorEvent).error, "uncaptured"));
    });
  }

  /** Runs `f` inside validation and out-of-memory error scopes; what they catch is checked at drain. */
  scoped(what: string, f: () => void): void {
    this.gpu.pushErrorScope("out-of-memory");
    this.gpu.pushErrorScope("validation");
    try {
      f();
    } finally {
      const v = this.gpu.popErrorScope(), m = this.gpu.popErrorScope();
      this.checks.push(Promise.all([v, m]).then(([a, b]) => a ? typedError(a, what) : b ? typedError(b, what) : undefined));
    }
  }

  /** Throws the first error collected since the last drain (uncaptured ones first). */
  async drain(): Promise<void> {
    const checks = this.checks;
    this.checks = [];
    const found = (await Promise.all(checks)).filter((e): e is ExecError => e !== undefined);
    const errs = [...this.errors, ...found];
    this.errors = [];
    if (errs.length) throw errs[0];
  }
}

function typedError(e: GPUError, what: string): ExecError {
  const msg = `${B}: ${what}: ${e.message}`;
  if (e.constructor?.name === "GPUOutOfMemoryError") return new OutOfMemory(B, 0, msg);
  return new Unsupported(msg);
}
