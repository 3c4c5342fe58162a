// One process that uses raw Vulkan and Deno's WebGPU together (a server may open both) must run both correctly
// and exit cleanly. Run in child processes (two_backends_child.ts) because the failure looked for is a glibc
// abort at exit ("corrupted size vs. prev_size in fastbins"), which a test inside the process cannot observe;
// glibc's malloc checks and freed-memory perturbation are on in the child so heap damage aborts early rather than
// by chance. The aborts the test runs met had two causes (README, "Known issues"): Deno's WebGPU GL backend torn
// down on a worker's thread as the process exited (.ci/test sets DENO_WEBGPU_BACKEND=vulkan), and a driver unloaded
// when a worker ended, which the second test here checks cannot happen to what poot's backends opened.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import process from "node:process";
import { openVulkanDevice } from "../../backends/vulkan/mod.ts";

const RUNS = 3;
let skip: string | false = "Bun" in globalThis || !("gpu" in navigator) ? "no WebGPU in this runtime (Deno's navigator.gpu)" : false;
if (!skip) {
  try {
    await openVulkanDevice().destroy();
  } catch (e) {
    skip = `no usable Vulkan device: ${(e as Error).message}`;
  }
}

const child = fileURLToPath(new URL("./two_backends_child.ts", import.meta.url));
const pinChild = fileURLToPath(new URL("./pin_child.ts", import.meta.url));

/** Runs Deno with `args` once (killed after limitMs), `env` over this process's: its output, exit code and signal. */
function runDeno(args: string[], env: Record<string, string>, limitMs: number): Promise<{ output: string; code: number | null; signal: string | null }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } });
    let output = "";
    const timer = setTimeout(() => p.kill("SIGKILL"), limitMs);
    p.stdout.on("data", (d: Uint8Array) => output += new TextDecoder().decode(d));
    p.stderr.on("data", (d: Uint8Array) => output += new TextDecoder().decode(d));
    p.on("close", (code, signal) => {
      clearTimeout(timer);
      resolve({ output, code, signal });
    });
  });
}

test(`vulkan + wgpu in one process: both compute right, destroy, and the process exits cleanly (${RUNS} runs)`, { skip, timeout: 300_000 }, async () => {
  for (let i = 0; i < RUNS; i++) {
    const { output, code, signal } = await runDeno(["run", "-A", "--no-check", child], { MALLOC_CHECK_: "3", MALLOC_PERTURB_: "165" }, 90_000);
    const line = output.split("\n").find((l) => l.startsWith("RESULT "));
    assert.ok(line, `run ${i}: the child reported nothing (exit ${code}, signal ${signal}):\n${output}`);
    const r = JSON.parse(line.slice(7)) as { vulkan: string[]; wgpu: string[] };
    assert.deepEqual(r, { vulkan: [], wgpu: [] }, `run ${i}: wrong results`);
    assert.doesNotMatch(output, /corrupted|double free|free\(\): invalid|malloc\(\)|Aborted/, `run ${i}: glibc reported heap damage`);
    assert.equal(signal, null, `run ${i}: the child died by ${signal} after its work:\n${output}`);
    assert.equal(code, 0, `run ${i}: exit status ${code}:\n${output}`);
  }
});

test("a worker that opened WebGPU and raw Vulkan leaves their drivers loaded when it ends (nothing it mapped is unmapped)", { skip, timeout: 60_000 }, async () => {
  const { output: out } = await runDeno(["run", "-A", "--no-check", pinChild], {}, 50_000);
  const line = out.split("\n").find((l) => l.startsWith("PINNED "));
  assert.ok(line, `the child printed nothing:\n${out}`);
  const r = JSON.parse(line.slice(7)) as { loaded: number; gone: string[] };
  // (without the pins, 13 of the 46 libraries lavapipe and Deno's WebGPU map were gone: libvulkan_lvp, swrast_dri, the loader...)
  assert.ok(r.loaded > 0, "the worker's opens mapped the drivers");
  assert.deepEqual(r.gone, [], "libraries unmapped when the worker ended");
});

// .ci/test keeps Deno's WebGPU off its GL backend (whose EGL teardown on a worker's thread raced the process's exit)
// with DENO_WEBGPU_BACKEND=vulkan where a Vulkan driver is installed: this Deno must still honour the variable. The
// probe opens raw Vulkan first: a driver may map GL libraries of its own (NVIDIA's ICD is libGLX_nvidia, and maps
// libEGL, libEGL_nvidia and libGLdispatch), so only what WebGPU's adapter request maps beyond those counts.
// (Unset, on lavapipe, the probe lists libEGL, libEGL_mesa and libGLdispatch.)
const vulkanMod = new URL("../../backends/vulkan/mod.ts", import.meta.url).href;
const probe = `const { openVulkanDevice } = await import(${JSON.stringify(vulkanMod)});
const gl = () => new Set(Deno.readTextFileSync("/proc/self/maps").match(/\\S*lib(EGL|GLX|GL)[^/\\s]*\\.so[^\\s]*/g) ?? []);
await openVulkanDevice().destroy();
const driver = gl();
await navigator.gpu.requestAdapter();
console.log("PROBE " + JSON.stringify([...gl()].filter((p) => !driver.has(p))));`;

test("DENO_WEBGPU_BACKEND=vulkan (.ci/test's setting where a Vulkan driver is installed) keeps WebGPU's GL libraries out", { skip, timeout: 60_000 }, async () => {
  const { output: out } = await runDeno(["eval", probe], { DENO_WEBGPU_BACKEND: "vulkan" }, 50_000);
  const line = out.split("\n").find((l) => l.startsWith("PROBE "));
  assert.ok(line, `the probe printed nothing:\n${out}`);
  assert.deepEqual(JSON.parse(line.slice(6)), [], "GL libraries mapped by WebGPU beyond the Vulkan driver's");
});
