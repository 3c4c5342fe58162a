// The graph layer in one import: IR, dtypes, tracer, composites, oracle, tolerance, passes.
export * from "./dtype.ts";
export * from "./weights.ts";
export * from "./ir.ts";
export * from "./ops.ts";
export * from "./tracer.ts";
export * from "./composites.ts";
export * from "./eval.ts";
export { type AccumulateOrder, copyStrided, runPrimitive } from "./eval_ops.ts";
export * from "./tolerance.ts";
export * from "./validate.ts";
export * from "./print.ts";
export { cse, dce, fold, fuse, optimize, type OptimizeOptions } from "./passes/mod.ts";
