// CUDA graphs from stream captures: PtxDevice.record captures one recording's launches alone, and
// backends/ptx/nccl.ts drives several devices' captures in lockstep (PtxDevice's group capture methods); both end
// their capture and instantiate its graph here.
import { type Cuda, CudaError } from "../../ffi/cuda.ts";

/**
 * Ends the stream's open capture and returns its graph. A failed capture's partial graph is destroyed and the
 * failure thrown; the stream is usable again either way.
 */
export function endCapture(cu: Cuda, stream: bigint): bigint {
  const out = new BigUint64Array(1);
  const code = cu.fn.cuStreamEndCapture(stream, out);
  if (code === 0) return out[0];
  if (out[0] !== 0n) cu.fn.cuGraphDestroy(out[0]);
  throw new CudaError("cuStreamEndCapture", code, cu.errorName(code));
}

/** Instantiates `graph` and uploads it ahead of its first launch; the graph itself is destroyed either way. */
export function instantiate(cu: Cuda, stream: bigint, graph: bigint): bigint {
  try {
    const exec = cu.graphInstantiate(graph, 0);
    cu.graphUpload(exec, stream);
    return exec;
  } finally {
    cu.graphDestroy(graph);
  }
}
