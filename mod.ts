/**
 * poot: an LLM inference runtime for Deno and Bun that drives GPUs through their driver libraries by FFI.
 *
 * ```ts
 * import { open } from "@poot/poot";
 * await using llm = await open({ model: "stories260K.gguf", backend: "auto" });
 * const s = llm.stream("Once upon a time", { maxTokens: 32 });
 * for await (const e of s) console.log(e.text);
 * console.log((await s.result).finish);
 * ```
 *
 * The engine underneath (devices, executors, the compiler) is `@poot/poot/engine`.
 *
 * @module
 */

/** The package version. */
export const VERSION = "0.1.0";

export { open, type Model, type OpenOptions } from "./llm/open.ts";
export {
  DEFAULT_MAX_TOKENS, Driver, type DriverOptions, type EmbedOptions, type EncoderShapes, type FinishReason, type GenerateOptions,
  type GenerateResult, type LoadProgress, type TokenEvent, type TokenStream,
} from "./llm/driver.ts";
export type { Pooling } from "./llm/pooling.ts";
export { GREEDY, type RowLogprobs, type SamplerParams } from "./llm/sampling.ts";
export { GrammarError, type ResponseFormat } from "./llm/grammar.ts";
export {
  AbortError, ChatTemplateError, ConfigError, ContextLengthError, ContextOverflowError, DriverClosedError, type FormatLocation,
  ImageError, InvalidArgumentError, LlmError, MetadataError, ModelFormatError, ModelKindError, ModelNotFoundError, NestingLimitError,
  TensorMismatchError, UnknownArchitectureError,
} from "./llm/errors.ts";
export type { ChatContent, ChatMessage, ChatOptions, ImagePart } from "./llm/chat.ts";
export {
  callGrammar, type ParsedReply, parseReply, syntaxMarkers, type Tool, type ToolCall, type ToolChoice, type ToolFunction, type ToolSyntax,
  toolSyntax,
} from "./llm/tools.ts";
export { opensInside, ReasoningStream, type SplitReply, splitReasoning, thinkTags, type ThinkTags } from "./llm/reasoning.ts";
export type { ImageInput, PromptInput } from "./llm/vision.ts";
export type { RGBImage } from "./llm/image.ts";
export { TpError } from "./llm/tp.ts";
export type { BackendChoice, BackendName } from "./backends/open.ts";
export { DeviceLost, DeviceTimeout, ExecError, KernelFault, NeedsReset, OutOfMemory, Poisoned, Unsupported } from "./backends/errors.ts";
