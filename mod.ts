/**
 * poot: an LLM inference runtime for Deno and Bun that drives GPUs through their driver libraries by FFI.
 *
 * @module
 */

/** The package version. */
export const VERSION = "0.1.0";
