# Writes the test images of tests/vlm/ and what PIL itself makes of them (pil.json): decoded RGB bytes of PNGs in
# every color type / bit depth / interlacing PIL writes, and Image.resize results for bilinear, bicubic and lanczos
# (shrinking and enlarging), the reference for llm/image.ts and llm/preprocess.ts.
# Run with Pillow + numpy (Debian: apt-get install python3-pil python3-numpy; then /usr/bin/python3 tests/vlm/images/make.py)
# The three photos-to-be (cat.png, grid.png, noise.png) are also the images tests/vlm/fixgen.py captions.
import json, os, zlib, struct
import numpy as np
from PIL import Image, __version__ as PIL_VERSION

D = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(20261201)


def save(name, im, **kw):
    im.save(os.path.join(D, name), **kw)
    return name


# Three small RGB images with structure (gradients, edges, noise), not square, so resizing and cropping matter.
y, x = np.mgrid[0:37, 0:53]
cat = np.stack([(x * 255 // 52), (y * 255 // 36), ((x + y) * 3) % 256], -1).astype(np.uint8)
cat[10:25, 15:35] = [200, 40, 90]
grid = (((x // 6 + y // 6) % 2) * 230 + 10).astype(np.uint8)
grid = np.stack([grid, 255 - grid, np.full_like(grid, 128)], -1)[:29, :41]
noise = rng.integers(0, 256, (48, 31, 3), dtype=np.uint8)
images = {"cat.png": cat, "grid.png": grid, "noise.png": noise}
for n, a in images.items():
    save(n, Image.fromarray(a, "RGB"), optimize=True)  # optimize: zlib picks filters other than 0

out = {"pil": PIL_VERSION, "decode": {}, "resize": []}
small = rng.integers(0, 256, (9, 11, 3), dtype=np.uint8)
variants = {
    "rgb8.png": (Image.fromarray(small, "RGB"), {}),
    "rgba8.png": (Image.fromarray(np.concatenate([small, rng.integers(0, 256, (9, 11, 1), dtype=np.uint8)], -1), "RGBA"), {}),
    "gray8.png": (Image.fromarray(small[..., 0], "L"), {}),
    "graya8.png": (Image.fromarray(np.stack([small[..., 0], small[..., 1]], -1), "LA"), {}),
    "gray1.png": (Image.fromarray(small[..., 0] > 127).convert("1"), {}),
    "palette.png": (Image.fromarray(small, "RGB").quantize(colors=13), {}),
    "palette4.png": (Image.fromarray(small, "RGB").quantize(colors=5), {"bits": 4}),
    "interlaced.png": (Image.fromarray(small, "RGB"), {"interlace": 1}),
    "gray16.png": (Image.fromarray((small[..., 0].astype(np.uint16) * 257 + 3), "I;16"), {}),
}
for n, (im, kw) in variants.items():
    save(n, im, **kw)
    back = Image.open(os.path.join(D, n))
    out["decode"][n] = {"mode": back.mode, "size": back.size, "rgb": list(np.asarray(back.convert("RGB")).reshape(-1).tolist())}

# 16-bit RGB: PIL cannot write it; write it by hand (filter 0) so the decoder's 16-bit path has a known answer.
rgb16 = rng.integers(0, 65536, (5, 7, 3), dtype=np.uint16)
raw = b"".join(b"\x00" + rgb16[r].astype(">u2").tobytes() for r in range(5))
chunk = lambda t, b: struct.pack(">I", len(b)) + t + b + struct.pack(">I", zlib.crc32(t + b))
open(os.path.join(D, "rgb16.png"), "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 7, 5, 16, 2, 0, 0, 0))
                                               + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
out["decode"]["rgb16.png"] = {"mode": "RGB;16", "size": [7, 5], "rgb": (rgb16 >> 8).astype(np.uint8).reshape(-1).tolist()}

# A JPEG (baseline, 4:4:4) and libjpeg's decode of it: jpeg-js's IDCT differs from libjpeg's by up to 3 steps.
# (At 4:2:0 jpeg-js replicates chroma where libjpeg's "fancy upsampling" interpolates: up to 88 steps at sharp
# color edges of this image, mean 2.5; 4:4:4 keeps the check about the IDCT.)
save("photo.jpg", Image.fromarray(cat, "RGB"), quality=90, subsampling=0)
out["decode"]["photo.jpg"] = {"size": [53, 37], "rgb": np.asarray(Image.open(os.path.join(D, "photo.jpg")).convert("RGB")).reshape(-1).tolist()}

src = Image.fromarray(cat, "RGB")
for resample in (1, 2, 3):
    for size in ((16, 16), (24, 11), (53, 37), (80, 61), (53, 20), (7, 37)):
        r = src.resize(size, resample=resample, reducing_gap=None)
        out["resize"].append({"image": "cat.png", "resample": resample, "size": list(size), "rgb": np.asarray(r).reshape(-1).tolist()})

json.dump(out, open(os.path.join(D, "pil.json"), "w"))
print("wrote", sorted(os.listdir(D)))
