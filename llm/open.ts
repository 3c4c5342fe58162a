// open(): one call from a model path to a ready Driver, the way a library user starts. It loads the model
// file (header first, tensors on demand), opens the backend, compiles, and on any failure frees what it put
// on the device before rethrowing, so nothing half-loaded stays there.
import { Engine, type Executor } from "../backends/executor.ts";
import { type BackendChoice, isBackendName, openBackend } from "../backends/open.ts";
import { compileGraph } from "../kernels/lower.ts";
import { openRankGroup } from "../backends/group.ts";
import { tpPlan } from "./tp.ts";
import { Driver, type DriverOptions } from "./driver.ts";
import { InvalidArgumentError } from "./errors.ts";
import { loadModel, type ModelHandle } from "./model.ts";

/** A model already loaded (engine's loadModel gives one): open() takes it in place of a path. */
export interface Model {
  /** The file it was loaded from. */
  readonly path: string;
  /** Its architecture (GGUF general.architecture). */
  readonly arch: string;
}

/** What open() needs: a model and a backend, plus the Driver's options. */
export interface OpenOptions extends DriverOptions {
  /** A model file path, or a model already loaded. */
  model: string | Model;
  /** The backend to run on (default "auto": the fastest present). */
  backend?: BackendChoice;
  /** Bound on every wait for the device, in milliseconds (default 600 s). */
  timeoutMs?: number;
  /**
   * Tensor parallelism: split the model over this many ranks (default 1). On ptx one GPU per rank; on js a
   * simulated group on the CPU (llm/tp.ts says how the model is split).
   */
  tp?: number;
}

/** Opens a model for generation: `await using llm = await open({ model: "m.gguf" })`. */
export async function open(opts: OpenOptions): Promise<Driver> {
  if (opts === null || typeof opts !== "object") throw new InvalidArgumentError("options", "must be an object with a model");
  const { model, backend = "auto", timeoutMs, tp = 1, ...driverOpts } = opts;
  if (typeof model !== "string" && (model === null || typeof model !== "object" || !("store" in model))) {
    throw new InvalidArgumentError("model", "must be a file path (string) or a ModelHandle from loadModel");
  }
  if (backend !== "auto" && !isBackendName(backend)) {
    throw new InvalidArgumentError("backend", `unknown backend ${JSON.stringify(String(backend))}: expected auto, ptx, rocm, vulkan, wgpu or js`);
  }
  if (timeoutMs !== undefined && !(Number.isFinite(timeoutMs) && timeoutMs > 0)) {
    throw new InvalidArgumentError("timeoutMs", `${String(timeoutMs)} is not a positive number of milliseconds`);
  }
  if (!Number.isInteger(tp) || tp < 1) throw new InvalidArgumentError("tp", `${String(tp)} is not a positive integer`);
  const handle = typeof model === "string" ? loadModel(model) : model as ModelHandle;
  // A model this call loaded is its to close once the weights are on the device (or on failure).
  const owned = typeof model === "string";
  let engine: Executor | undefined;
  try {
    engine = tp > 1
      ? await openRankGroup(backend, tpPlan(handle.config, tp), { compile: compileGraph, timeoutMs })
      : new Engine(await openBackend(backend), { compile: compileGraph, timeoutMs });
    return await Driver.open(handle, engine, driverOpts);
  } catch (e) {
    await engine?.unload().catch(() => {});
    throw e;
  } finally {
    if (owned) handle.close();
  }
}
