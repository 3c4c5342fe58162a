// libhsa-runtime64 and libamd_comgr through ffi/hsa.ts and ffi/comgr.ts. Here (no /dev/kfd) hsa_init answers
// HSA_STATUS_ERROR_OUT_OF_RESOURCES as a typed result; comgr works without a device and assembles a kernel.

import { test } from "node:test";
import assert from "node:assert/strict";
import { LibraryNotFound } from "../../ffi/lib.ts";
import { decode, pack } from "../../ffi/layout.ts";
import * as hsa from "../../ffi/hsa.ts";
import * as comgr from "../../ffi/comgr.ts";

function open<T>(f: () => T): T | string {
  try {
    return f();
  } catch (e) {
    if (e instanceof LibraryNotFound) return e.message;
    throw e;
  }
}
const H = open(() => hsa.openHsa());
const C = open(() => comgr.openComgr());
const hsaSkip = typeof H === "string" ? H : false;
const comgrSkip = typeof C === "string" ? C : false;

// A minimal code object v4 kernel for gfx90a (it returns at once).
const KERNEL_ASM = `
.amdgcn_target "amdgcn-amd-amdhsa--gfx90a"
.text
.globl nop_kernel
.p2align 8
.type nop_kernel,@function
nop_kernel:
  s_endpgm
.rodata
.p2align 6
.amdhsa_kernel nop_kernel
  .amdhsa_next_free_vgpr 1
  .amdhsa_next_free_sgpr 1
  .amdhsa_accum_offset 4
.end_amdhsa_kernel
`;

test("hsa_init's status comes back as a typed result", { skip: hsaSkip }, () => {
  const api = H as hsa.Hsa;
  const r = api.init();
  assert.equal(typeof r.ok, "boolean");
  assert.equal(r.codeName, hsa.hsaStatusName(r.code));
  if (r.ok) {
    // A machine with an AMD GPU: agents exist and the runtime can be shut down again.
    const agents = api.agents();
    assert.ok(agents.length > 0);
    assert.ok(api.agentName(agents[0]).length > 0);
    assert.ok(api.systemInfoU64(hsa.HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY) > 0n);
    api.shutDown();
  } else {
    assert.equal(r.code, hsa.HSA_STATUS_ERROR_OUT_OF_RESOURCES, `no device here: ${r.codeName}`);
    assert.equal(r.codeName, "HSA_STATUS_ERROR_OUT_OF_RESOURCES");
    assert.match(api.statusString(r.code), /resources/i);
  }
});

test("HSA calls before a successful init raise HsaError, not a crash", { skip: hsaSkip }, () => {
  const api = H as hsa.Hsa;
  if (api.init().ok) api.shutDown(); // a device machine: drop back to a zero reference count
  try {
    api.agents();
    assert.fail("iterated agents without a runtime");
  } catch (e) {
    assert.ok(e instanceof hsa.HsaError, String(e));
    assert.equal(e.fn, "hsa_iterate_agents");
    assert.equal(e.codeName, "HSA_STATUS_ERROR_NOT_INITIALIZED");
  }
  assert.throws(() => api.signalCreate(1n), hsa.HsaError);
});

test("AQL packets: header word and a dispatch packet written into a ring", () => {
  const header = hsa.aqlHeader(hsa.HSA_PACKET_TYPE_KERNEL_DISPATCH, { barrier: true });
  assert.equal(header, 2 | (1 << 8) | (2 << 9) | (2 << 11));
  const body = pack(hsa.hsa_kernel_dispatch_packet_t, {
    workgroup_size_x: 64, workgroup_size_y: 1, workgroup_size_z: 1, grid_size_x: 1024, grid_size_y: 1, grid_size_z: 1,
    kernel_object: 0x1000n, kernarg_address: 0x2000n, completion_signal: 0x3000n,
  });
  const ring = new ArrayBuffer(4 * 64);
  hsa.writeAqlPacket(ring, 4, 6n, body, header, 1);
  const p = decode(hsa.hsa_kernel_dispatch_packet_t, new Uint8Array(ring, 2 * 64, 64));
  assert.deepEqual([p.header, p.setup, p.workgroup_size_x, p.grid_size_x, p.kernel_object, p.kernarg_address, p.completion_signal], [header, 1, 64, 1024, 0x1000n, 0x2000n, 0x3000n]);
});

test("comgr: version, ISA list, data objects", { skip: comgrSkip }, () => {
  const api = C as comgr.Comgr;
  const [major, minor] = api.version();
  assert.ok(major >= 2, `comgr ${major}.${minor}`);
  const isas = api.isaNames();
  assert.ok(isas.includes("amdgcn-amd-amdhsa--gfx90a"), "gfx90a is a target");
  assert.match(api.statusString(comgr.AMD_COMGR_STATUS_SUCCESS), /SUCCESS/i);
  const d = api.createData(comgr.AMD_COMGR_DATA_KIND_SOURCE, "s_endpgm\n", "a.s");
  assert.equal(api.dataKind(d), comgr.AMD_COMGR_DATA_KIND_SOURCE);
  assert.equal(api.getDataName(d), "a.s");
  assert.equal(new TextDecoder().decode(api.getData(d)), "s_endpgm\n");
  const set = api.createDataSet();
  api.dataSetAdd(set, d);
  assert.equal(api.actionDataCount(set, comgr.AMD_COMGR_DATA_KIND_SOURCE), 1);
  api.destroyDataSet(set);
  api.releaseData(d);
});

test("comgr assembles a kernel into a gfx90a code object and disassembles it back", { skip: comgrSkip }, () => {
  const api = C as comgr.Comgr;
  const elf = api.assembleExecutable(KERNEL_ASM, "amdgcn-amd-amdhsa--gfx90a");
  assert.deepEqual(Array.from(elf.subarray(0, 4)), [0x7f, 0x45, 0x4c, 0x46], "an ELF file");
  assert.equal(elf[18] | (elf[19] << 8), 224, "e_machine is EM_AMDGPU");
  const data = api.createData(comgr.AMD_COMGR_DATA_KIND_EXECUTABLE, elf, "k.co");
  assert.match(api.getDataIsaName(data), /gfx90a/);
  const info = api.createActionInfo({ isa: "amdgcn-amd-amdhsa--gfx90a" });
  const input = api.createDataSet();
  const output = api.createDataSet();
  api.dataSetAdd(input, data);
  api.doAction(comgr.AMD_COMGR_ACTION_DISASSEMBLE_EXECUTABLE_TO_SOURCE, info, input, output);
  const src = api.actionDataGet(output, comgr.AMD_COMGR_DATA_KIND_SOURCE, 0);
  assert.match(new TextDecoder().decode(api.getData(src)), /s_endpgm/);
  api.releaseData(src);
  api.releaseData(data);
  api.destroyDataSet(input);
  api.destroyDataSet(output);
  api.destroyActionInfo(info);
});

test("comgr reports assembler errors as ComgrError with the log", { skip: comgrSkip }, () => {
  const api = C as comgr.Comgr;
  try {
    api.assembleExecutable("  v_not_an_instruction v0\n", "amdgcn-amd-amdhsa--gfx90a");
    assert.fail("assembled garbage");
  } catch (e) {
    assert.ok(e instanceof comgr.ComgrError, String(e));
    assert.equal(e.fn, "amd_comgr_do_action");
    assert.equal(e.codeName, "AMD_COMGR_STATUS_ERROR");
    assert.match(e.log, /v_not_an_instruction|invalid instruction/);
  }
});
