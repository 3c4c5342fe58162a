// What a PtxDevice can be opened with (backends/ptx/device.ts; the backend registry passes them through), and the
// environment variables that set the tuning ones where the options do not.
export interface PtxDeviceOptions {
  /** CUDA device ordinal (default 0). */
  ordinal?: number;
  /** libcuda names to try (default libcuda.so.1, libcuda.so). */
  library?: string | readonly string[];
  /** PTX target override (80 ... 90); default from the device's compute capability. */
  sm?: number;
  /** How long synchronize busy-polls before it starts yielding to the event loop (default 20 ms). */
  spinMicros?: number;
  /** Bound on waits inside write() and read() (staging reuse, readback copies); default 600 s. */
  timeoutMs?: number;
  /**
   * Programmatic dependent launch between kernels (sm_90+, through cuLaunchKernelEx): a kernel's blocks get
   * resident while the one before it finishes, and wait for its results (griddepcontrol.wait) before touching
   * memory. "exit": kernels do not signal early (the next launches as the blocks of this one exit). Default
   * on where available; the environment variable POOT_PTX_PDL (0, exit, start) overrides the default.
   */
  pdl?: boolean | "exit";
  /**
   * Preferred shared-memory carveout of every kernel, in percent of the unified L1/shared capacity (a tuning
   * experiment: kernels whose carveouts differ cannot share an SM, so alternating ones may serialize). Default
   * unset (the driver's choice per kernel); the environment variable POOT_PTX_CARVEOUT overrides it.
   */
  carveout?: number;
  /**
   * Small upload buffers in slab shadows (slots.ts; default on). Off, every upload buffer is a plain allocation
   * written through the staging ring (a copy per write). The environment variable POOT_PTX_SLOTS=0 turns it off.
   */
  slotSlabs?: boolean;
}

/** The tuning `opts` give, else the environment's POOT_PTX_* variables, else the defaults. Throws RangeError on a bad carveout. */
export function resolveOptions(opts: PtxDeviceOptions, env: Record<string, string | undefined>): { pdl: boolean | "exit"; carveout?: number; slotSlabs: boolean } {
  const envPdl = env.POOT_PTX_PDL, envCarveout = env.POOT_PTX_CARVEOUT;
  const pdl = opts.pdl ?? (envPdl === "0" || envPdl === "off" ? false : envPdl === "exit" ? "exit" : true);
  const carveout = opts.carveout ?? (envCarveout !== undefined && envCarveout !== "" ? Number(envCarveout) : undefined);
  if (carveout !== undefined && !(Number.isInteger(carveout) && carveout >= 0 && carveout <= 100)) {
    throw new RangeError(`ptx: carveout ${envCarveout ?? carveout} is not a percentage (0..100)`);
  }
  return { pdl, carveout, slotSlabs: opts.slotSlabs ?? env.POOT_PTX_SLOTS !== "0" };
}
