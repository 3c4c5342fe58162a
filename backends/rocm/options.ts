// The ROCm device's options a user sets (OpenOptions.rocm): plain data, nothing of the HSA bindings, so the
// public API's types stay explicit (JSR's slow-type check) and need no driver library to load.

/** Options of the ROCm device (`open({ backend: "rocm", rocm: {...} })`). */
export interface RocmOptions {
  /** Index among the GPU agents that take kernel dispatches (default 0). */
  agent?: number;
  /** libhsa-runtime64 names to try. */
  library?: string | readonly string[];
  /** Bound on the waits inside write() and the ring (default 600 s). */
  timeoutMs?: number;
  /** How long synchronize busy-polls before it yields to the event loop (default 20 ms). */
  spinMicros?: number;
  /** Queue size in packets (a power of two; default the agent's maximum, at most 4096). */
  ringPackets?: number;
  /** Bytes of each half of the staging memory for host-to-device writes (default 4 MiB). */
  stagingBytes?: number;
  /** A barrier before every recorded step, not only where a hazard needs one (to rule the hazard analysis out). */
  allBarriers?: boolean;
  /** Stamp the start and end of every recorded step (stepTimes); costs a signal per step. */
  timestamps?: boolean;
}
