/**
 * The engine under `open()`: devices by backend name, the generic Engine (Executor) over a Device, the graph
 * compiler, and model loading, for callers that assemble a Driver themselves:
 *
 * ```ts
 * import { compileGraph, Driver, Engine, loadModel, openBackend } from "@poot/poot/engine";
 * const engine = new Engine(await openBackend("js"), { compile: compileGraph });
 * const driver = await Driver.open(loadModel("stories260K.gguf"), engine);
 * ```
 *
 * @module
 */
export { Engine, type EngineOptions, type Executor, type ExecutorStats, type LoadOptions, type StepOptions, type StepResult } from "./backends/executor.ts";
export type { Device } from "./backends/device.ts";
export { type BackendChoice, chooseBackend, openBackend, probeBackend } from "./backends/open.ts";
export { compileGraph } from "./kernels/lower.ts";
export { loadModel, type ModelHandle } from "./llm/model.ts";
export { Driver } from "./llm/driver.ts";
