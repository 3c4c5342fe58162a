// libcuda through ffi/cuda.ts. Device tests skip where there is no libcuda.so.1 or no device; where there
// is one they init, name the device, round-trip memory, JIT a hand-written PTX kernel that adds 1, and
// capture a stream into a graph that is replayed the way the PTX backend replays a token step.

import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LibraryNotFound, ptrView, readF32, readU16, readU32, readU64 } from "../../ffi/lib.ts";
import * as cu from "../../ffi/cuda.ts";

/** buf[i] += 1 for i < n; one thread per element. */
export const ADD_ONE_PTX = `
.version 7.0
.target sm_52
.address_size 64

.visible .entry add_one(
	.param .u64 buf,
	.param .u32 n
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<8>;
	.reg .b64 %rd<5>;

	ld.param.u64 %rd1, [buf];
	ld.param.u32 %r1, [n];
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mad.lo.s32 %r5, %r2, %r3, %r4;
	setp.ge.u32 %p1, %r5, %r1;
	@%p1 bra DONE;
	cvta.to.global.u64 %rd2, %rd1;
	mul.wide.u32 %rd3, %r5, 4;
	add.s64 %rd4, %rd2, %rd3;
	ld.global.u32 %r6, [%rd4];
	add.s32 %r7, %r6, 1;
	st.global.u32 [%rd4], %r7;
DONE:
	ret;
}
`;

let probe: { api: cu.Cuda; dev: number; ctx: bigint } | string;
let absent: LibraryNotFound | undefined;
try {
  const api = cu.openCuda();
  api.init();
  if (api.deviceCount() === 0) probe = "libcuda has no device";
  else {
    const dev = api.device(0);
    const ctx = api.primaryCtxRetain(dev);
    api.ctxSetCurrent(ctx);
    probe = { api, dev, ctx };
  }
} catch (e) {
  if (e instanceof LibraryNotFound) absent = e;
  probe = `no CUDA: ${(e as Error).message}`;
}
const skip = typeof probe === "string" ? probe : false;
const ctx = () => probe as { api: cu.Cuda; dev: number; ctx: bigint };

test("the add_one PTX assembles with ptxas", { skip: hasTool("ptxas") ? false : "ptxas not installed" }, () => {
  const dir = mkdtempSync(join(tmpdir(), "poot-ptx-"));
  try {
    writeFileSync(join(dir, "a.ptx"), ADD_ONE_PTX);
    execFileSync("ptxas", ["-arch=sm_90", join(dir, "a.ptx"), "-o", join(dir, "a.cubin")], { stdio: "pipe" });
  } finally {
    rmSync(dir, { recursive: true });
  }
});

test("KernelArgs lays out kernel parameters and the void* array pointing at them", () => {
  const a = new cu.KernelArgs(["u32", "pointer", "u16", "f32", "u64"], [7, 0x1234n, 9, 1.5, 2n ** 40n]);
  assert.deepEqual(a.offsets, [0, 8, 16, 20, 24]);
  assert.equal(a.params.length, 5);
  assert.equal(readU32(a.params[0]), 7);
  assert.equal(readU64(a.params[1]), 0x1234n);
  assert.equal(readU16(a.params[2]), 9);
  assert.equal(readF32(a.params[3]), 1.5);
  assert.equal(readU64(a.params[4]), 2n ** 40n);
  a.set(0, 8);
  assert.equal(readU32(a.params[0]), 8, "set writes in place: params stay valid");
  assert.equal(a.params[1] - a.params[0], 8n);
});

test("a machine without libcuda gets LibraryNotFound naming it", { skip: absent ? false : "libcuda is present" }, () => {
  assert.equal(absent!.library, "libcuda.so.1");
  assert.match(absent!.message, /libcuda\.so\.1/);
});

test("CUDA init, device name and attributes", { skip }, () => {
  const { api, dev } = ctx();
  assert.ok(api.driverVersion() >= 11040, `driver ${api.driverVersion()}`);
  assert.ok(api.deviceName(dev).length > 0);
  assert.equal(api.deviceAttribute(cu.CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev), 32);
  assert.ok(api.deviceAttribute(cu.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) > 0);
  assert.ok(api.deviceAttribute(cu.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) >= 5);
  assert.ok(api.deviceTotalMem(dev) > 1n << 28n);
  const { free, total } = api.memGetInfo();
  assert.ok(free > 0n && free <= total);
  assert.ok(api.ctxGetLimit(cu.CU_LIMIT_STACK_SIZE) > 0n);
  assert.equal(api.ctxGetCurrent(), ctx().ctx);
});

test("CUDA memory: alloc, HtoD/DtoH round trip, memset, DtoD, pinned host memory", { skip }, () => {
  const { api } = ctx();
  const n = 4096;
  const a = api.memAlloc(n * 4);
  const b = api.memAlloc(n * 4);
  const src = Uint32Array.from({ length: n }, (_, i) => i * 7 + 1);
  api.memcpyHtoD(a, src);
  const back = new Uint32Array(n);
  api.memcpyDtoH(back, a);
  assert.deepEqual(back, src);
  api.memcpyDtoD(b, a, n * 4);
  api.memsetD8(a, 0xab, 8);
  api.memsetD32(a + 8n, 0xdeadbeef, 2);
  api.memcpyDtoH(back, a);
  assert.deepEqual(Array.from(back.subarray(0, 4)), [0xabababab, 0xabababab, 0xdeadbeef, 0xdeadbeef]);
  api.memcpyDtoH(back, b);
  assert.deepEqual(back, src);
  const host = api.memAllocHost(n * 4);
  const view = new Uint32Array(ptrView(host, n * 4));
  const stream = api.streamCreate();
  api.memcpyDtoHAsync(host, b, n * 4, stream);
  api.streamSynchronize(stream);
  assert.equal(api.streamQuery(stream), true);
  assert.deepEqual(view, src);
  api.streamDestroy(stream);
  api.memFreeHost(host);
  api.memFree(a);
  api.memFree(b);
});

test("PTX module: JIT, launch add_one, captured into a graph and replayed", { skip }, () => {
  const { api } = ctx();
  const { module, infoLog } = api.moduleLoadDataEx(ADD_ONE_PTX);
  assert.equal(typeof infoLog, "string");
  const fn = api.moduleGetFunction(module, "add_one");
  assert.ok(api.funcGetAttribute(cu.CU_FUNC_ATTRIBUTE_NUM_REGS, fn) > 0);
  const n = 1000;
  const buf = api.memAlloc(n * 4);
  api.memsetD32(buf, 10, n);
  const args = new cu.KernelArgs(["pointer", "u32"], [buf, n]);
  const stream = api.streamCreate();
  const grid = Math.ceil(n / 128);

  // Eager launch.
  api.launchKernel(fn, grid, 128, 0, stream, args);
  api.streamSynchronize(stream);
  const out = new Uint32Array(n);
  api.memcpyDtoH(out, buf);
  assert.ok(out.every((v) => v === 11));

  // Capture: a slot write from pinned memory, two launches, a readback into pinned memory.
  const slot = api.memAllocHost(4);
  const readback = api.memAllocHost(n * 4);
  const slotView = new Uint32Array(ptrView(slot, 4));
  const rb = new Uint32Array(ptrView(readback, n * 4));
  const one = api.memAlloc(4);
  api.streamBeginCapture(stream);
  assert.equal(api.streamIsCapturing(stream), cu.CU_STREAM_CAPTURE_STATUS_ACTIVE);
  api.memcpyHtoDAsync(one, slot, 4, stream);
  api.launchKernel(fn, grid, 128, 0, stream, args);
  args.set(1, n / 2); // the graph keeps the values of the first launch; this one covers half
  api.launchKernel(fn, grid, 128, 0, stream, args);
  api.memcpyDtoHAsync(readback, buf, n * 4, stream);
  const graph = api.streamEndCapture(stream);
  assert.equal(api.streamIsCapturing(stream), cu.CU_STREAM_CAPTURE_STATUS_NONE);
  assert.equal(api.graphNodeCount(graph), 4);
  const exec = api.graphInstantiate(graph);
  api.graphUpload(exec, stream);

  const start = api.eventCreate();
  const end = api.eventCreate();
  api.eventRecord(start, stream);
  for (let r = 1; r <= 5; r++) {
    slotView[0] = r;
    api.graphLaunch(exec, stream);
    api.streamSynchronize(stream);
    assert.equal(rb[0], 11 + 2 * r, `replay ${r}, first half`);
    assert.equal(rb[n - 1], 11 + r, `replay ${r}, second half`);
  }
  api.eventRecord(end, stream);
  api.eventSynchronize(end);
  assert.equal(api.eventQuery(end), true);
  assert.ok(api.eventElapsedTime(start, end) >= 0);
  const probeOne = new Uint32Array(1);
  api.memcpyDtoH(probeOne, one);
  assert.equal(probeOne[0], 5, "the captured HtoD copy read the slot at replay time");

  api.eventDestroy(start);
  api.eventDestroy(end);
  api.graphExecDestroy(exec);
  api.graphDestroy(graph);
  api.streamDestroy(stream);
  api.memFreeHost(slot);
  api.memFreeHost(readback);
  api.memFree(one);
  api.memFree(buf);
  api.moduleUnload(module);
});

test("bad PTX raises CudaError with the function, code name and JIT log", { skip }, () => {
  const { api } = ctx();
  try {
    api.moduleLoadDataEx(".version 7.0\n.target sm_52\n.address_size 64\n.visible .entry broken( { bogus; }");
    assert.fail("loaded broken PTX");
  } catch (e) {
    assert.ok(e instanceof cu.CudaError, String(e));
    assert.equal(e.fn, "cuModuleLoadDataEx");
    assert.equal(e.codeName, "CUDA_ERROR_INVALID_PTX");
    assert.equal(e.sticky, false);
  }
});

function hasTool(name: string): boolean {
  try {
    execFileSync(name, ["--version"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}
