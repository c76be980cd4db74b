#!/usr/bin/python3
"""The K3 release's image preprocessing, done with Pillow and numpy, as the oracle for
engine/image_preprocess.cpp (tests/image_test.cpp).

It follows docs/VISION.md §3.2–§4.5 (the NaViT size rule, Pillow's resize in the image's own
mode, the chessboard fill in float32) using Pillow itself for decoding and resampling, so the
C++ port is checked against the library the release runs, not against a restatement of it.

  pil_preprocess.py preprocess IMAGE MAX_PATCHES OUT.rgb   # prints "mode W H new_w new_h tokens"
  pil_preprocess.py batch CASES.json OUTDIR                  # makes test images, then references

A case is {"name", "format" (png|gif|bmp|tga|jpeg), "mode" (RGB|RGBA|LA|L|1|P), "w", "h",
"seed", "max_patches", optional "transparency" (true: a PNG/GIF key or tRNS), "rle" (TGA)}.
batch writes OUTDIR/NAME.FORMAT, OUTDIR/NAME.rgb (resized bytes after the fill, before padding)
and one line per case to OUTDIR/results.txt: "NAME MODE W H NEW_W NEW_H TOKENS".
"""
import json
import math
import os
import sys

import numpy as np
from PIL import Image

PATCH, MERGE, SIDE = 14, 2, 512
WHITE, GRAY, SQUARE = 255, 180, 8


def target_size(w, h, limit):
    patches = max(1, w // PATCH) * max(1, h // PATCH)
    scale = min(1.0, math.sqrt(limit / patches), SIDE * PATCH / w, SIDE * PATCH / h)
    nw = min(SIDE * PATCH, max(1, int(w * scale)))
    nh = min(SIDE * PATCH, max(1, int(h * scale)))
    f = PATCH * MERGE
    gw = (nw + (f - nw % f) % f) // PATCH
    gh = (nh + (f - nh % f) % f) // PATCH
    return nw, nh, (gh // MERGE) * (gw // MERGE)


def chessboard(w, h):
    y, x = np.mgrid[0:h, 0:w]
    return np.where(((y // SQUARE) + (x // SQUARE)) % 2 == 1, GRAY, WHITE).astype(np.uint8)


def release_rgb(im, nw, nh):
    if im.size != (nw, nh):
        im = im.resize((nw, nh), Image.BICUBIC)
    if im.mode == "RGB":
        return np.asarray(im)
    if "A" in im.getbands() or "transparency" in im.info:
        rgba = np.asarray(im.convert("RGBA"))
        alpha = rgba[..., 3:4].astype(np.float32) / 255
        bg = chessboard(nw, nh)[..., None]
        out = alpha * rgba[..., :3] + (1 - alpha) * bg
        return out.astype(np.uint8)
    return np.asarray(im.convert("RGB"))


def preprocess(path, limit, out_path):
    with Image.open(path) as im:
        im.load()
        mode, (w, h) = im.mode, im.size
        nw, nh, tokens = target_size(w, h, limit)
        rgb = release_rgb(im, nw, nh)
    assert rgb.shape == (nh, nw, 3) and rgb.dtype == np.uint8
    with open(out_path, "wb") as f:
        f.write(np.ascontiguousarray(rgb).tobytes())
    return f"{mode} {w} {h} {nw} {nh} {tokens}"


def smooth_noise(rng, h, w, channels):
    """A gradient with noise on top: edges for the kernel, and every byte value."""
    y, x = np.mgrid[0:h, 0:w]
    base = (x * 255 // max(1, w - 1) + y * 128 // max(1, h - 1))[..., None]
    noise = rng.randint(-60, 61, size=(h, w, channels))
    phase = np.arange(channels) * 80
    return np.clip((base + phase) % 256 + noise, 0, 255).astype(np.uint8)


def make_image(case):
    rng = np.random.RandomState(case["seed"])
    w, h, mode = case["w"], case["h"], case["mode"]
    info = {}
    if mode == "P":
        colors = 200
        im = Image.fromarray(rng.randint(0, colors, size=(h, w)).astype(np.uint8), "P")
        im.putpalette(rng.randint(0, 256, size=colors * 3).astype(np.uint8).tobytes())
        if case.get("transparency"):
            if case["format"] == "gif":
                info["transparency"] = 7
            else:
                alphas = rng.choice([0, 255, 128, 40], size=colors).astype(np.uint8)
                info["transparency"] = alphas.tobytes()
    elif mode == "1":
        im = Image.fromarray(rng.randint(0, 2, size=(h, w)).astype(bool))
    elif mode in ("L", "LA", "RGB", "RGBA"):
        im = Image.fromarray(smooth_noise(rng, h, w, len(mode)).squeeze(-1) if len(mode) == 1
                             else smooth_noise(rng, h, w, len(mode)), mode)
        if "A" in mode:
            a = np.asarray(im).copy()
            pick = rng.randint(0, 4, size=(h, w))
            a[..., -1] = np.where(pick == 0, 0, np.where(pick == 1, 255, a[..., -1]))
            im = Image.fromarray(a, mode)
        if mode == "L" and case.get("transparency"):
            info["transparency"] = int(np.asarray(im)[h // 2, w // 2])
    else:
        raise SystemExit(f"unknown mode {mode}")
    path = os.path.join(case["dir"], f"{case['name']}.{case['format']}")
    fmt = {"png": "PNG", "gif": "GIF", "bmp": "BMP", "tga": "TGA", "jpeg": "JPEG"}[case["format"]]
    kwargs = dict(info)
    if fmt == "TGA" and case.get("rle"):
        kwargs["compression"] = "tga_rle"
    if fmt == "JPEG":
        kwargs.update(quality=90, subsampling=0)
    im.save(path, fmt, **kwargs)
    return path


def batch(cases_path, out_dir):
    with open(cases_path) as f:
        cases = json.load(f)
    lines = []
    for case in cases:
        case["dir"] = out_dir
        path = make_image(case)
        rgb = os.path.join(out_dir, case["name"] + ".rgb")
        lines.append(case["name"] + " " + preprocess(path, case["max_patches"], rgb))
    with open(os.path.join(out_dir, "results.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv):
    if len(argv) == 5 and argv[1] == "preprocess":
        print(preprocess(argv[2], int(argv[3]), argv[4]))
    elif len(argv) == 4 and argv[1] == "batch":
        batch(argv[2], argv[3])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
