/**
 * poot: an LLM inference runtime for Deno and Bun that drives GPUs through their driver libraries by FFI.
 *
 * ```ts
 * import { compileGraph, Driver, Engine, loadModel, openBackend } from "@poot/poot";
 * const model = loadModel("stories260K.gguf");
 * const engine = new Engine(await openBackend("auto"), { compile: compileGraph });
 * const driver = await Driver.open(model, engine);
 * console.log((await driver.generate("Once upon a time", { maxTokens: 32 })).text);
 * ```
 *
 * @module
 */

/** The package version. */
export const VERSION = "0.1.0";

export { Engine, type EngineOptions, type Executor, type ExecutorStats, type StepResult } from "./backends/executor.ts";
export type { Device } from "./backends/device.ts";
export { type BackendChoice, openBackend } from "./backends/open.ts";
export { DeviceLost, DeviceTimeout, ExecError, KernelFault, NeedsReset, OutOfMemory, Poisoned, Unsupported } from "./backends/errors.ts";
export { compileGraph } from "./kernels/lower.ts";
export { loadModel, type ModelHandle } from "./llm/model.ts";
export { Driver, type DriverOptions, type GenerateOptions, type GenerateResult } from "./llm/driver.ts";
export { GREEDY, type SamplerParams } from "./llm/sampling.ts";
export { ContextOverflowError, LlmError, ModelFormatError, ModelNotFoundError, UnknownArchitectureError } from "./llm/errors.ts";
