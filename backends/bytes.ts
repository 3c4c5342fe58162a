// Byte checks the backends share (target-neutral: no driver, no device handle).

/**
 * True when every byte is zero, so a write can be a fill (cuMemsetD8, vkCmdFillBuffer) instead of a staged copy.
 * Reads whole aligned words where it can: a multi-megabyte weight tensor is checked at memory speed.
 */
export function allZero(data: Uint8Array): boolean {
  const head = (4 - (data.byteOffset % 4)) % 4;
  for (let i = 0; i < Math.min(head, data.byteLength); i++) if (data[i] !== 0) return false;
  if (head >= data.byteLength) return true;
  const words = new Int32Array(data.buffer, data.byteOffset + head, (data.byteLength - head) >>> 2);
  for (let i = 0; i < words.length; i++) if (words[i] !== 0) return false;
  for (let i = head + words.length * 4; i < data.byteLength; i++) if (data[i] !== 0) return false;
  return true;
}
