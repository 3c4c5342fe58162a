// Loaded by `bun test` before every test file (bunfig.toml [test] preload): device tests (Vulkan on lavapipe,
// model decode) take seconds, so a plain `bun test FILE` gets the same 10-minute default per test that .ci/test
// passes as --timeout (Bun's own default is 5 s; bunfig.toml has no key for it). The specifier is computed so that
// `deno check tests/` does not try to resolve Bun's built-in module.
const bunTest = "bun:" + "test";
const { setDefaultTimeout } = await import(bunTest) as { setDefaultTimeout(ms: number): void };
setDefaultTimeout(600_000);
export {};
