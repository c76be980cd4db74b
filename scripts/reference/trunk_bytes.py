#!/usr/bin/python3
"""Re-derives a converted container's quantized trunk bytes from the source checkpoint with the
original converter's arithmetic (docs/CONVERTER.md §1.4, "Quantizer arithmetic": float32 throughout;
per 128-group amax clamped to >= 1e-8, s = amax / qmax, q = rint(x / s) with the f32 s, clamped;
the stored scale is f16(s); Q4G packs q + 8 low nibble first), which the doc measured to match
convert.py byte for byte. Independent of the C++ converter: plain numpy, its own safetensors
reader, its own fp8 decoder (docs/CONVERTER.md §2.3: E4M3FN codes by their definition, times the
scale of their weight_block_size tile, rounded once to f32), and DeepSeek-V3 / Kimi K2 names read
under the release's spelling (§1.2).

Usage: trunk_bytes.py CONTAINER CHECKPOINT_DIR
Prints one line per mismatching tensor and a summary; exit status 0 when every F32, Q8G and Q4G
text-trunk tensor matches and each format occurs (vision tensors use another layout and are
skipped).
"""
import json
import os
import struct
import sys

import numpy as np

F32, Q8G, Q4G = 0, 2, 3
QMAX = {Q8G: 127, Q4G: 7}
QMIN = {Q8G: -127, Q4G: -8}


def e4m3_table():
    """The 256 E4M3FN codes by definition: bias 7, subnormals at exponent 0, 0x7f/0xff NaN."""
    out = []
    for b in range(256):
        e, m = (b >> 3) & 15, b & 7
        if e == 15 and m == 7:
            out.append(float("nan"))
            continue
        mag = m / 8.0 * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7)
        out.append(-mag if b & 0x80 else mag)
    return np.array(out, dtype=np.float32)


def read_raw(path, name):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        t = header[name]
        a, b = t["data_offsets"]
        f.seek(8 + n + a)
        return t, f.read(b - a)


def read_tensor(path, name, fp8=None):
    """fp8: (scale tensor f32, [bm, bn]) for an F8_E4M3 weight."""
    t, raw = read_raw(path, name)
    dtype = t["dtype"]
    if dtype == "F8_E4M3":
        codes = np.frombuffer(raw, dtype=np.uint8).reshape(t["shape"])
        scale, (bm, bn) = fp8
        full = np.repeat(np.repeat(scale, bm, axis=0), bn, axis=1)[:codes.shape[0], :codes.shape[1]]
        return (e4m3_table()[codes] * full).astype(np.float32)
    if dtype == "F32":
        x = np.frombuffer(raw, dtype="<f4")
    elif dtype == "F16":
        x = np.frombuffer(raw, dtype="<f2").astype(np.float32)
    elif dtype == "BF16":
        x = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        raise ValueError(f"{name}: dtype {dtype} is not a trunk dtype")
    return x.reshape(t["shape"]).astype(np.float32)


def quantize(x, fmt, group):
    n = x.shape[-1]
    rows = x.size // n
    ng = -(-n // group)
    padded = np.zeros((rows, ng * group), dtype=np.float32)
    padded[:, :n] = x.reshape(rows, n)
    g = padded.reshape(rows, ng, group)
    amax = np.maximum(np.abs(g).max(axis=2), np.float32(1e-8)).astype(np.float32)
    s = (amax / np.float32(QMAX[fmt])).astype(np.float32)
    q = np.clip(np.rint(g / s[:, :, None]), QMIN[fmt], QMAX[fmt]).astype(np.int64)
    q = q.reshape(rows, ng * group)
    if fmt == Q8G:
        payload = q.astype(np.int8).tobytes()
    else:
        c = (q + 8).astype(np.uint8)
        payload = (c[:, 0::2] | (c[:, 1::2] << 4)).astype(np.uint8).tobytes()
    return payload, s.astype("<f2").tobytes()


def release_name(name, weight_map):
    """The release's spelling of a container name: DeepSeek's MoE tensors sit under `mlp.`."""
    if weight_map is None or name in weight_map:
        return name
    for ours, theirs in ((".block_sparse_moe.gate.", ".mlp.gate."),
                         (".block_sparse_moe.shared_experts.", ".mlp.shared_experts.")):
        name = name.replace(ours, theirs)
    return name


def main():
    container, src = sys.argv[1], sys.argv[2]
    config = json.load(open(os.path.join(src, "config.json")))
    tile = (config.get("quantization_config") or {}).get("weight_block_size")
    manifest = json.load(open(os.path.join(container, "manifest.json")))
    index_path = os.path.join(src, "model.safetensors.index.json")
    if os.path.exists(index_path):
        weight_map = json.load(open(index_path))["weight_map"]
    else:
        weight_map = None
    trunk = open(os.path.join(container, "trunk.bin"), "rb").read()
    checked = bad = 0
    per_format = {F32: 0, Q8G: 0, Q4G: 0}
    for e in manifest["trunk"]:
        name = e["name"]
        if "vision_tower" in name or "mm_projector" in name:
            continue
        source = release_name(name, weight_map)
        shard = weight_map[source] if weight_map else "model.safetensors"
        fp8 = None
        if weight_map and source + "_scale_inv" in weight_map:
            scale = read_tensor(os.path.join(src, weight_map[source + "_scale_inv"]),
                                source + "_scale_inv")
            fp8 = (scale, tile)
        x = read_tensor(os.path.join(src, shard), source, fp8)
        if e["fmt"] == F32:
            want, scales = x.astype("<f4").tobytes(), b""
        elif e["fmt"] in (Q8G, Q4G):
            want, scales = quantize(x, e["fmt"], e["group"])
        else:
            print(f"{name}: format {e['fmt']} not checked")
            continue
        got = trunk[e["off"]:e["off"] + len(want)]
        got_scales = trunk[e["scale_off"]:e["scale_off"] + len(scales)] if scales else b""
        checked += 1
        per_format[e["fmt"]] += 1
        if got != want or got_scales != scales:
            bad += 1
            diff = sum(1 for a, b in zip(got, want) if a != b)
            print(f"{name}: fmt {e['fmt']}: {diff} payload bytes differ, scales "
                  f"{'match' if got_scales == scales else 'differ'}")
    print(f"{checked} trunk tensors checked (F32 {per_format[F32]}, Q8G {per_format[Q8G]}, "
          f"Q4G {per_format[Q4G]}), {bad} differ")
    return 1 if bad or min(per_format.values()) == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
