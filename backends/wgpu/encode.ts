// A recording's commands (dispatches with their bind groups, buffer copies, timestamp resolves) and their
// encoding into one command buffer: the dispatches of a run share one compute pass (WebGPU orders storage
// writes between dispatches), a copy or resolve ends it; a timed dispatch gets a pass of its own whose
// timestamps are written at its start and end.

export type Cmd =
  /** A dispatch; `q` is its timestamp pair (2q, 2q+1) in the tail's query set when the device times steps. */
  | { k: "d"; pipeline: GPUComputePipeline; group: GPUBindGroup; grid: [number, number, number]; q?: number }
  | { k: "c"; src: GPUBuffer; so: number; dst: GPUBuffer; dOff: number; n: number }
  /** Resolve `count` timestamps into a buffer (the tail's first command when timing). */
  | { k: "r"; set: GPUQuerySet; count: number; dst: GPUBuffer };

/** Timestamps of a recording (device timing): the query set, the resolve buffer, where the values land in the
 * staging buffer, which step each pair brackets, and the values of the latest synchronized submit. */
export interface Timing {
  set: GPUQuerySet;
  resolved: GPUBuffer;
  at: number;
  stepOf: number[];
  steps: number;
  ticks?: BigUint64Array;
}

/** A finished command buffer and what it holds. */
export interface Encoded {
  cb: GPUCommandBuffer;
  dispatches: number;
  micros: number;
  /** Of `micros`, the time in finish(): wgpu validates, tracks and records the passes there, not per call. */
  finishMicros: number;
}

/** One command buffer of the commands (timing each dispatch with a `q` into `timing`). */
export function encode(gpu: GPUDevice, cmds: Cmd[], timing: Timing | undefined, passPerDispatch: boolean): Encoded {
  const t0 = performance.now();
  let dispatches = 0;
  const enc = gpu.createCommandEncoder();
  let pass: GPUComputePassEncoder | undefined;
  let last: GPUComputePipeline | undefined;
  for (const c of cmds) {
    if (c.k !== "d") {
      pass?.end();
      pass = undefined;
      if (c.k === "c") enc.copyBufferToBuffer(c.src, c.so, c.dst, c.dOff, c.n);
      else enc.resolveQuerySet(c.set, 0, c.count, c.dst, 0);
      continue;
    }
    if (c.q !== undefined && timing) {
      // Timed: each dispatch in its own pass, its timestamps written at the pass's start and end.
      pass?.end();
      pass = enc.beginComputePass({ timestampWrites: { querySet: timing.set, beginningOfPassWriteIndex: 2 * c.q, endOfPassWriteIndex: 2 * c.q + 1 } });
      last = undefined;
    } else if (!pass) {
      pass = enc.beginComputePass();
      last = undefined;
    }
    if (c.pipeline !== last) pass.setPipeline(last = c.pipeline);
    pass.setBindGroup(0, c.group);
    pass.dispatchWorkgroups(c.grid[0], c.grid[1], c.grid[2]);
    dispatches++;
    if (passPerDispatch || (c.q !== undefined && timing)) {
      pass.end();
      pass = undefined;
    }
  }
  pass?.end();
  const t1 = performance.now();
  const cb = enc.finish();
  const t2 = performance.now();
  return { cb, dispatches, micros: (t2 - t0) * 1000, finishMicros: (t2 - t1) * 1000 };
}

/** Commands as `parts` command buffers, cut at dispatches (so a tail's copies end the last). */
export function encodeParts(gpu: GPUDevice, list: Cmd[], timing: Timing | undefined, passPerDispatch: boolean, parts: number): Encoded[] {
  if (parts <= 1) return [encode(gpu, list, timing, passPerDispatch)];
  const total = list.reduce((n, c) => n + (c.k === "d" ? 1 : 0), 0), per = Math.ceil(total / parts);
  const out: Encoded[] = [];
  let from = 0, seen = 0;
  for (let i = 0; i < list.length; i++) {
    if (list[i].k !== "d") continue;
    if (++seen % per === 0 && seen < total) {
      out.push(encode(gpu, list.slice(from, i + 1), timing, passPerDispatch));
      from = i + 1;
    }
  }
  out.push(encode(gpu, list.slice(from), timing, passPerDispatch));
  return out;
}
