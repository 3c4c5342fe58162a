// Typed errors of the LLM layer. Each message is one line that names what was wrong (a file, a field, a tensor,
// an offset), so the command line can print it as is without a stack trace.
import type { GenerateResult } from "./driver.ts";

/** Base class of every error the LLM layer throws on bad input. */
export class LlmError extends Error {
  /** Builds the error and its one-line message. */
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** A model file that does not exist or cannot be read. */
export class ModelNotFoundError extends LlmError {
  /** The file path. */
  readonly path: string;
  /** Builds the error and its one-line message. */
  constructor(path: string, reason: string, options?: { cause?: unknown }) {
    super(`${path}: cannot read model file: ${reason}`, options);
    this.path = path;
  }
}

/** Where in a model file a problem was found. */
export interface FormatLocation {
  /** File path, or a label such as "<bytes>" for in-memory input. */
  file: string;
  /** The field being read: "header.magic", "metadata[3] 'general.alignment' value", "tensor 'blk.0.attn_q.weight' dims". */
  field: string;
  /** Byte offset in the file where the field starts (or where reading failed). */
  offset: number;
}

/** A truncated or corrupt model file. */
export class ModelFormatError extends LlmError implements FormatLocation {
  /** The file. */
  readonly file: string;
  /** The field. */
  readonly field: string;
  /** The byte offset. */
  readonly offset: number;
  /** Builds the error and its one-line message. */
  constructor(loc: FormatLocation, problem: string) {
    super(`${loc.file}: ${loc.field} at offset ${loc.offset}: ${problem}`);
    this.file = loc.file;
    this.field = loc.field;
    this.offset = loc.offset;
  }
}

/** A well-formed model file that uses something this runtime does not support (version, tensor type, ...). */
export class UnsupportedFormatError extends ModelFormatError {}

/** A tensor whose ggml type id is unknown or not supported. */
export class UnsupportedTensorTypeError extends UnsupportedFormatError {
  /** The tensor name. */
  readonly tensor: string;
  /** The ggml type id. */
  readonly typeId: number;
  /** Builds the error and its one-line message. */
  constructor(loc: FormatLocation, tensor: string, typeId: number, typeName?: string) {
    super(
      loc,
      `tensor '${tensor}' has ${typeName ? `ggml type ${typeName} (id ${typeId}), which is not supported` : `unknown ggml type id ${typeId}`}`,
    );
    this.tensor = tensor;
    this.typeId = typeId;
  }
}

/** A metadata key that is missing or holds a value of the wrong type. */
export class MetadataError extends LlmError {
  /** The metadata key. */
  readonly key: string;
  /** Builds the error and its one-line message. */
  constructor(file: string, key: string, problem: string) {
    super(`${file}: metadata '${key}': ${problem}`);
    this.key = key;
  }
}

/** A tokenizer description (GGUF metadata or tokenizer.json) that cannot be used, or a token id out of range. */
export class TokenizerError extends LlmError {}

/** An architecture name (general.architecture) that no model family handles. */
export class UnknownArchitectureError extends LlmError {
  /** The architecture name. */
  readonly architecture: string;
  /** Builds the error and its one-line message. */
  constructor(architecture: string, known: readonly string[] = []) {
    super(
      `unknown architecture '${architecture}'` + (known.length ? ` (supported: ${known.join(", ")})` : ""),
    );
    this.architecture = architecture;
  }
}

/** A prompt (or prompt plus requested tokens) longer than the context the model was loaded with. */
export class ContextOverflowError extends LlmError {
  /** Tokens given. */
  readonly tokens: number;
  /** The context size. */
  readonly context: number;
  /** Builds the error and its one-line message. */
  constructor(tokens: number, context: number, what = "prompt") {
    super(`${what} has ${tokens} tokens, more than the context of ${context}`);
    this.tokens = tokens;
    this.context = context;
  }
}

/** A library call given an argument it cannot use (wrong type, out of range); `argument` names it. */
export class InvalidArgumentError extends LlmError {
  /** The argument that was wrong. */
  readonly argument: string;
  /** Builds the error and its one-line message. */
  constructor(argument: string, problem: string) {
    super(`${argument}: ${problem}`);
    this.argument = argument;
  }
}

/**
 * A generation stopped by its AbortSignal (or by leaving a `for await` loop over its stream). `name` is
 * "AbortError", as fetch and node-llama-cpp use; `partial` holds what was generated before the abort
 * (absent when the call was aborted while still queued).
 */
export class AbortError extends LlmError {
  /** What was generated before the abort. */
  readonly partial?: GenerateResult;
  /** Builds the error and its one-line message. */
  constructor(message: string, partial?: GenerateResult) {
    super(message);
    this.name = "AbortError";
    this.partial = partial;
  }
}

/** A call on a Driver after `close()`. */
export class DriverClosedError extends LlmError {
  /** Builds the error and its one-line message. */
  constructor() {
    super("the driver is closed");
  }
}
