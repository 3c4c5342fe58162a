// GPT-2's reversible map between bytes and printable characters: byte-level BPE merges over these characters
// so that every byte sequence has a spelling and no token holds a space or a control character.

/** BYTE_TO_CHAR[b] is the character that spells byte b. */
export const BYTE_TO_CHAR: readonly string[] = (() => {
  const out = new Array<string>(256);
  let n = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    out[b] = String.fromCharCode(printable ? b : 256 + n++);
  }
  return out;
})();

/** CHAR_TO_BYTE[charCode] is the byte a character spells, or -1 (every such character is below U+0144). */
export const CHAR_TO_BYTE: Int16Array = (() => {
  const t = new Int16Array(0x144).fill(-1);
  BYTE_TO_CHAR.forEach((c, b) => (t[c.charCodeAt(0)] = b));
  return t;
})();

/** Spells the UTF-8 bytes of `s` with BYTE_TO_CHAR, without building a byte array. */
export function toByteLevel(s: string): string {
  let out = "";
  for (let i = 0; i < s.length; i++) {
    let c = s.charCodeAt(i);
    if (c < 0x80) {
      out += BYTE_TO_CHAR[c];
      continue;
    }
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
        i++;
      }
    }
    if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd; // a lone surrogate encodes as U+FFFD, as TextEncoder does
    if (c < 0x800) {
      out += BYTE_TO_CHAR[0xc0 | (c >> 6)] + BYTE_TO_CHAR[0x80 | (c & 63)];
    } else if (c < 0x10000) {
      out += BYTE_TO_CHAR[0xe0 | (c >> 12)] + BYTE_TO_CHAR[0x80 | ((c >> 6) & 63)] + BYTE_TO_CHAR[0x80 | (c & 63)];
    } else {
      out += BYTE_TO_CHAR[0xf0 | (c >> 18)] + BYTE_TO_CHAR[0x80 | ((c >> 12) & 63)] +
        BYTE_TO_CHAR[0x80 | ((c >> 6) & 63)] + BYTE_TO_CHAR[0x80 | (c & 63)];
    }
  }
  return out;
}

const enc = new TextEncoder();

/** The bytes a byte-level token string spells. Characters outside the map stand for their own UTF-8 bytes. */
export function fromByteLevel(s: string): Uint8Array {
  const out: number[] = [];
  for (const ch of s) {
    const c = ch.charCodeAt(0);
    const b = ch.length === 1 && c < 0x144 ? CHAR_TO_BYTE[c] : -1;
    if (b >= 0) out.push(b);
    else for (const x of enc.encode(ch)) out.push(x);
  }
  return Uint8Array.from(out);
}
