// The part of Deno's FFI namespace that ffi/lib.ts names, declared loosely for `tsc` against Bun's types
// (tsconfig.json), which has no Deno namespace. `deno check` never reads this file: Deno has the real one.
declare namespace Deno {
  type NativeType = string;
  type NativeResultType = string;
  type PointerObject = { readonly __pointer: unique symbol };
  type PointerValue = PointerObject | null;
  interface ForeignFunction {
    name?: string;
    parameters: readonly NativeType[];
    result: NativeResultType;
    optional?: boolean;
    nonblocking?: boolean;
  }
  interface DynamicLibrary<S> {
    symbols: { [K in keyof S]: (...args: unknown[]) => unknown };
    close(): void;
  }
  type UnsafeCallbackFunction<_P = unknown, _R = unknown> = (...args: never[]) => unknown;
  function dlopen<S extends Record<string, ForeignFunction>>(path: string | URL, symbols: S): DynamicLibrary<S>;
  const permissions: { querySync(desc: { name: string; path?: string }): { readonly state: string } };
  class UnsafePointer {
    static create(value: bigint): PointerValue;
    static of(value: BufferSource): PointerValue;
    static value(value: PointerValue): bigint | number;
  }
  class UnsafePointerView {
    constructor(pointer: PointerObject);
    static getArrayBuffer(pointer: PointerObject, byteLength: number, offset?: number): ArrayBuffer;
    static getCString(pointer: PointerObject, offset?: number): string;
    getBigUint64(offset?: number): bigint;
    getBigInt64(offset?: number): bigint;
    getUint8(offset?: number): number;
    getInt8(offset?: number): number;
    getUint16(offset?: number): number;
    getInt16(offset?: number): number;
    getUint32(offset?: number): number;
    getInt32(offset?: number): number;
    getFloat32(offset?: number): number;
    getFloat64(offset?: number): number;
  }
  class UnsafeFnPointer<_D = unknown> {
    constructor(pointer: PointerObject, definition: { parameters: readonly NativeType[]; result: NativeResultType; nonblocking?: boolean });
    call(...args: unknown[]): unknown;
  }
  class UnsafeCallback<_D = unknown> {
    constructor(definition: { parameters: readonly NativeType[]; result: NativeResultType }, callback: UnsafeCallbackFunction);
    static threadSafe(definition: { parameters: readonly NativeType[]; result: NativeResultType }, callback: UnsafeCallbackFunction): UnsafeCallback;
    readonly pointer: PointerObject;
    ref(): number;
    unref(): number;
    close(): void;
  }
}
