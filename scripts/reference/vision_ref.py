#!/usr/bin/python3
"""vision_ref — independent float64 reference of the K3 image tower (MoonViT).

  /usr/bin/python3 scripts/reference/vision_ref.py MODEL_DIR --grid H W \\
      --patches FILE --out FILE [--stage embed|encoder|merged]

Reads vision.json and the vision_tower.* / mm_projector.* tensors of the
container (dequantized to float64 by container.py) and runs one image of
H x W patches through patch embedding, the position table, the encoder
blocks, the final norm, the 2x2 merge and the projector. The math is
docs/VISION.md §5, written as whole-matrix algebra: attention with full
score matrices, the rotary embedding as complex multiplication, the
position-table resize as two interpolation matrices.

  --patches FILE  H*W patches in row-major grid order, 588 values each
                  (channel, row, column): a .npy array or raw float32
  --out FILE      (H/2)*(W/2) rows of text_hidden_size, raw float64
  --stage         stop early: `embed` (patch embedding + positions),
                  `encoder` (after the final norm) or `merged` (the
                  2x2-merged rows, the projector's input)
"""

import argparse
import json
import math
import os
import sys

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

from container import Container, ContainerError  # noqa: E402

# float32's machine epsilon: the release builds the encoder's RMSNorms without
# an eps, and PyTorch then uses the accumulation type's (docs/VISION.md §5.4–§5.5).
TOWER_EPS = 2.0 ** -23
PROJECTOR_EPS = 1e-5


class VisionConfig:
    """vision.json with the defaults of docs/VISION.md §7"""

    def __init__(self, d):
        self.hidden = int(d.get("vt_hidden_size", 1024))
        self.heads = int(d.get("vt_num_attention_heads", 12))
        self.qkv = int(d.get("qkv_hidden_size", 1536))
        self.inter = int(d.get("vt_intermediate_size", 4096))
        self.layers = int(d.get("vt_num_hidden_layers", 27))
        self.pos_h = int(d.get("init_pos_emb_height", 64))
        self.pos_w = int(d.get("init_pos_emb_width", 64))
        self.text_hidden = int(d["text_hidden_size"])
        if int(d.get("patch_size", 14)) != 14:
            raise ContainerError("vision.json: patch_size must be 14")
        if d.get("pos_emb_interpolation_mode", "bilinear") != "bilinear":
            raise ContainerError("vision.json: only bilinear position interpolation")
        self.head_dim = self.qkv // self.heads


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def gelu_tanh(u):
    return 0.5 * u * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (u + 0.044715 * u ** 3)))


_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu_erf(u):
    return 0.5 * u * (1.0 + _erf(u / math.sqrt(2.0)))


def interp_matrix(n_in, n_out):
    """The linear map of a 1-D resize from n_in to n_out samples, written from
    the definition of half-pixel bilinear sampling (align_corners=False):
    output o samples the input at max(0, (o + 1/2) * n_in / n_out - 1/2),
    weighting its two neighbours (the upper one clamped to the last)."""
    A = np.zeros((n_out, n_in))
    for o in range(n_out):
        src = max(0.0, (o + 0.5) * n_in / n_out - 0.5)
        i0 = min(int(math.floor(src)), n_in - 1)
        i1 = min(i0 + 1, n_in - 1)
        lam = src - i0
        A[o, i0] += 1.0 - lam
        A[o, i1] += lam
    return A


def position_embedding(table, gh, gw):
    """[pos_h, pos_w, D] resized to [gh*gw, D]; the table itself at its own size."""
    ph, pw, D = table.shape
    if (gh, gw) == (ph, pw):
        return table.reshape(gh * gw, D)
    out = np.einsum("ri,ijd,cj->rcd", interp_matrix(ph, gh), table, interp_matrix(pw, gw))
    return out.reshape(gh * gw, D)


def rotary_angles(gh, gw, head_dim):
    """[L, head_dim/2] angles: complex slot j turns with the column when j is
    even and with the row when j is odd, at frequency 10000^(-4*(j//2)/head_dim).
    The product is formed in float32, as the release builds its table."""
    j = np.arange(head_dim // 2)
    theta = (10000.0 ** (-4.0 * (j // 2) / head_dim)).astype(np.float32)
    rows, cols = np.divmod(np.arange(gh * gw), gw)
    pos = np.where(j[None, :] % 2 == 0, cols[:, None], rows[:, None]).astype(np.float32)
    return (pos * theta[None, :]).astype(np.float64)


def rotate(x, angles):
    """x [L, H, hd] real, pairs (2j, 2j+1) read as complex numbers, times e^{i*angle}."""
    z = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * angles)[:, None, :]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = z.real, z.imag
    return out


def attention(q, k, v):
    """Bidirectional softmax attention per head; q, k, v [L, H, hd] -> [L, H*hd]."""
    L, H, hd = q.shape
    s = np.einsum("ihd,jhd->hij", q, k) / math.sqrt(hd)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("hij,jhd->ihd", p, v).reshape(L, H * hd)


class Tower:
    def __init__(self, path):
        self.c = Container(path)
        vpath = os.path.join(path, "vision.json")
        if not os.path.isfile(vpath):
            raise ContainerError(f"{vpath}: missing (images are not supported)")
        with open(vpath) as f:
            self.cfg = VisionConfig(json.load(f))

    def t(self, name):
        return self.c.stored_tensor(name)

    def embed(self, patches, gh, gw):
        cfg = self.cfg
        w = self.t("vision_tower.patch_embed.proj.weight").reshape(cfg.hidden, -1)
        table = self.t("vision_tower.patch_embed.pos_emb.weight")
        table = table.reshape(cfg.pos_h, cfg.pos_w, cfg.hidden)
        return patches @ w.T + position_embedding(table, gh, gw)

    def block(self, x, l, angles):
        cfg = self.cfg
        p = f"vision_tower.encoder.blocks.{l}."
        L, H, hd = x.shape[0], cfg.heads, cfg.head_dim
        y = rmsnorm(x, self.t(p + "norm0.weight"), TOWER_EPS)
        qkv = (y @ self.t(p + "wqkv.weight").T).reshape(L, 3, H, hd)
        q, k, v = rotate(qkv[:, 0], angles), rotate(qkv[:, 1], angles), qkv[:, 2]
        x = x + attention(q, k, v) @ self.t(p + "wo.weight").T
        y = rmsnorm(x, self.t(p + "norm1.weight"), TOWER_EPS)
        h = gelu_tanh(y @ self.t(p + "mlp.fc0.weight").T)
        return x + h @ self.t(p + "mlp.fc1.weight").T

    def encode(self, patches, gh, gw, stage=None):
        cfg = self.cfg
        x = self.embed(patches, gh, gw)
        if stage == "embed":
            return x
        angles = rotary_angles(gh, gw, cfg.head_dim)
        for l in range(cfg.layers):
            x = self.block(x, l, angles)
        x = rmsnorm(x, self.t("vision_tower.encoder.final_layernorm.weight"), TOWER_EPS)
        if stage == "encoder":
            return x
        # 2x2 tiles, each the concatenation of (2a,2b), (2a,2b+1), (2a+1,2b), (2a+1,2b+1)
        D = cfg.hidden
        m = x.reshape(gh // 2, 2, gw // 2, 2, D).transpose(0, 2, 1, 3, 4)
        m = m.reshape(-1, 4 * D)
        if stage == "merged":
            return m
        h = gelu_erf(m @ self.t("mm_projector.proj.0.weight").T)
        h = h @ self.t("mm_projector.proj.2.weight").T
        return rmsnorm(h, self.t("mm_projector.post_norm.weight"), PROJECTOR_EPS)


def load_patches(path, gh, gw):
    if path.endswith(".npy"):
        a = np.load(path).astype(np.float64)
    else:
        a = np.fromfile(path, dtype="<f4").astype(np.float64)
    if a.size != gh * gw * 588:
        raise ContainerError(f"{path}: {a.size} values, a {gh}x{gw} grid needs {gh * gw * 588}")
    return a.reshape(gh * gw, 588)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="container directory")
    ap.add_argument("--grid", nargs=2, type=int, required=True, metavar=("H", "W"))
    ap.add_argument("--patches", required=True, metavar="FILE")
    ap.add_argument("--out", required=True, metavar="FILE")
    ap.add_argument("--stage", choices=["embed", "encoder", "merged"])
    a = ap.parse_args(argv)
    gh, gw = a.grid
    if gh < 2 or gw < 2 or gh % 2 or gw % 2:
        ap.error("--grid: both sides must be even and at least 2")
    try:
        tower = Tower(a.model)
        out = tower.encode(load_patches(a.patches, gh, gw), gh, gw, a.stage)
    except ContainerError as e:
        print(f"vision_ref: {e}", file=sys.stderr)
        return 1
    out.astype("<f8").tofile(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
