#!/usr/bin/python3
"""selfcheck.py — test waste_ref's pieces against second, independent formulations.

Each check computes the same quantity two ways on random numbers: the way
waste_ref does it (vectorized numpy) and a second way (scalar loops straight
from the spec's formula, or a mathematically different form such as absorbed
MLA or the unrolled KDA transition product). Any disagreement beyond float64
rounding fails.

  /usr/bin/python3 scripts/reference/selfcheck.py [--k3parts FILE]

--k3parts FILE additionally compares SiTU, both decay-gate forms and AttnRes
against the binary dump written by the original engine's tests/test_k3parts.c
(f32; tolerance 2e-5 relative).

Exit status 0 when every check passes.
"""

import argparse
import math
import os
import struct
import sys
import tempfile

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import container  # noqa: E402
import model  # noqa: E402
from container import Config, VQMatrix  # noqa: E402

RESULTS = []


def check(name, got, want, tol=1e-12):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        RESULTS.append((name, False, f"shape {got.shape} vs {want.shape}"))
        return
    scale = max(np.abs(want).max() if want.size else 0.0, 1e-300)
    err = np.abs(got - want).max() / scale if want.size else 0.0
    ok = bool(err <= tol) and np.isfinite(got).all()
    RESULTS.append((name, ok, f"max rel err {err:.2e} (tol {tol:.0e})"))


def check_true(name, cond, detail=""):
    RESULTS.append((name, bool(cond), detail))


# ---------------------------------------------------------------- scalar primitives

def s_sigmoid(z):
    return 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0


def s_softplus(z):
    return z if z > 20 else math.log(1.0 + math.exp(z))


def s_rmsnorm(x, w, eps):
    ms = sum(v * v for v in x) / len(x)
    return [x[i] * w[i] / math.sqrt(ms + eps) for i in range(len(x))]


def test_primitives(rng):
    x, w = rng.normal(size=37), rng.normal(size=37)
    check("rmsnorm vs scalar loop", model.rmsnorm(x, w, 1e-5), s_rmsnorm(list(x), list(w), 1e-5))
    z = rng.normal(0, 8, 200)
    check("silu vs a/(1+e^-a)", model.silu(z), [a / (1 + math.exp(-a)) for a in z])
    zz = np.concatenate([z, [19.999, 20.0, 20.001, 35.0, -40.0]])
    check("softplus (threshold 20)", model.softplus(zz), [s_softplus(a) for a in zz])
    g, u = rng.normal(0, 6, 300), rng.normal(0, 40, 300)
    for beta, lb in ((4.0, 25.0), (1.5, 2.0), (1.0, 0.0)):
        want = [beta * math.tanh(a / beta) * s_sigmoid(a) * (lb * math.tanh(b / lb) if lb > 0 else b)
                for a, b in zip(g, u)]
        check(f"SiTU beta={beta} linear_beta={lb}", model.situ(g, u, beta, lb), want)
    s = rng.normal(0, 30, 17)
    e = [math.exp(v - max(s)) for v in s]
    check("softmax", model.softmax(s), [v / sum(e) for v in e])


# ---------------------------------------------------------------- f16 and trunk formats

def s_f16(h, flush):
    """Bit-level f16 decode as the spec states it (exp 31 is finite)."""
    sign = -1.0 if h >> 15 else 1.0
    e, m = (h >> 10) & 31, h & 1023
    if e == 0:
        return sign * 0.0 if flush else sign * m * 2.0 ** -24
    return sign * (1 + m / 1024) * 2.0 ** (e - 15)


def test_f16():
    h = np.arange(65536, dtype=np.uint16)
    a, b = container.f16_scale(h), container.f16_codebook(h)
    ref = h.view(np.float16).astype(np.float64)
    finite = (h & 0x7C00) != 0x7C00
    check("f16 scale decode == IEEE on finite values", a[finite], ref[finite], 0)
    sub = ((h & 0x7C00) == 0) & ((h & 0x3FF) != 0)
    check("f16 codebook decode flushes subnormals", b[sub], np.zeros(sub.sum()), 0)
    check("f16 codebook decode == IEEE on normals", b[finite & ~sub], ref[finite & ~sub], 0)
    sample = [0x7C00, 0xFC00, 0x7FFF, 0x7E00, 0x0001, 0x8001, 0x03FF, 0x3C00]
    check("f16 exponent 31 finite, subnormals (scale)", container.f16_scale(np.array(sample, np.uint16)),
          [s_f16(v, False) for v in sample], 0)
    check("f16 exponent 31 finite, subnormals (codebook)",
          container.f16_codebook(np.array(sample, np.uint16)), [s_f16(v, True) for v in sample], 0)


def pack_trunk(fmt, q, g):
    """Independent writer: q [rows, N] integer codes -> row bytes, by loops."""
    rows, N = q.shape
    ng = -(-N // g)
    out = bytearray()
    for r in range(rows):
        codes = list(q[r]) + [0] * (ng * g - N)
        if fmt == 2:
            out += bytes(c & 0xFF for c in codes)
        elif fmt == 3:
            for i in range(0, len(codes), 2):
                out.append(((codes[i] + 8) & 15) | (((codes[i + 1] + 8) & 15) << 4))
        else:
            rb = (ng * g * 3 + 7) // 8 + 1
            row = bytearray(rb)
            for i, c in enumerate(codes):
                v = c + 4
                for b in range(3):
                    if (v >> b) & 1:
                        bit = 3 * i + b
                        row[bit >> 3] |= 1 << (bit & 7)
            out += row
    return bytes(out)


def test_trunk_formats(rng):
    for fmt, (lo, hi) in ((2, (-127, 127)), (3, (-8, 7)), (7, (-4, 3))):
        for g, (rows, N) in ((128, (3, 200)), (64, (5, 64)), (32, (2, 70))):
            q = rng.integers(lo, hi + 1, size=(rows, N))
            ng = -(-N // g)
            sc = rng.uniform(1e-6, 0.05, (rows, ng)).astype(np.float16)
            sc[0, 0] = np.float16(3e-6)                       # a subnormal scale
            payload, scales = pack_trunk(fmt, q, g), sc.astype("<f2").tobytes()
            ct = container.Container.__new__(container.Container)
            ct.trunk = np.frombuffer(b"xyz" + scales + b"\0" + payload, dtype=np.uint8)
            t = {"name": "t", "fmt": fmt, "off": 3 + len(scales) + 1, "shape": [rows, N],
                 "group": g, "scale_off": 3}
            want = [[q[r, i] * s_f16(int(sc[r, i // g].view(np.uint16)), False) for i in range(N)]
                    for r in range(rows)]
            check(f"trunk fmt {fmt} group {g} decode", ct._rows(t, 0, rows), want, 0)
            check(f"trunk fmt {fmt} group {g} single row", ct._rows(t, rows - 1, 1), want[-1:], 0)


# ---------------------------------------------------------------- expert records

def write_blocked(idx, R):
    """Independent writer of the 64-row index blocking, straight from the
    formula: run of (r, v) at byte ((r//64 * nv + v) * 64 + r%64) * R."""
    M, nv, _ = idx.shape
    Mp = -(-M // 64) * 64
    buf = bytearray(Mp * nv * R)
    for r in range(M):
        for v in range(nv):
            off = ((r // 64 * nv + v) * 64 + r % 64) * R
            if R == 3 and idx.shape[2] == 4:                 # VQ4P packing
                s0, s1, s2, s3 = (int(x) for x in idx[r, v])
                buf[off] = (s0 | s1 << 6) & 255
                buf[off + 1] = (s1 >> 2 | s2 << 4) & 255
                buf[off + 2] = (s2 >> 4 | s3 << 2) & 255
            else:
                for s in range(R):
                    buf[off + s] = int(idx[r, v, s])
    return bytes(buf)


def test_expert_layout(rng):
    for stages, entries, bits in ((3, 256, 8), (2, 256, 8), (4, 64, 6)):
        for M, N in ((70, 24), (64, 16), (5, 40)):
            ct = container.Container.__new__(container.Container)
            ct.vec_dim, ct.stages, ct.index_bits = 8, stages, bits
            idx = rng.integers(0, entries, size=(M, N // 8, stages))
            R = 3 if bits == 6 else stages
            rec = b"\x00" * 48 + write_blocked(idx, R)
            check(f"index blocking S={stages} bits={bits} M={M}", ct._indices(rec, 48, M, N), idx, 0)


def s_vq_dense(idx, scales, books):
    M, nv, S = idx.shape
    vd = books.shape[2]
    W = np.zeros((M, nv * vd))
    for r in range(M):
        for v in range(nv):
            for d in range(vd):
                W[r, 8 * v + d] = scales[r] * sum(books[s][idx[r, v, s]][d] for s in range(S))
    return W


def s_lut8_matvec(idx, scales, books, x):
    """docs/FORMAT.md §8.3 with plain loops: table, int8 per 32-position block, integer sums."""
    M, nv, S = idx.shape
    en = books.shape[1]
    T = [[[sum(x[8 * v + d] * books[s][c][d] for d in range(8)) for c in range(en)]
          for s in range(S)] for v in range(nv)]
    y = []
    for r in range(M):
        acc = 0.0
        for b0 in range(0, nv, 32):
            blk = range(b0, min(nv, b0 + 32))
            m = max(abs(T[v][s][c]) for v in blk for s in range(S) for c in range(en))
            isum = 0
            for v in blk:
                for s in range(S):
                    t = T[v][s][idx[r, v, s]]
                    q = 0 if m == 0 else int(max(-127, min(127, round(t * 127 / m))))
                    isum += q
            acc += (m / 127) * isum
        y.append(acc * scales[r])
    return y


def test_vq(rng):
    S, en = 3, 256
    idx = rng.integers(0, en, size=(70, 5, S))
    books = rng.normal(0, 0.3, (S, en, 8))
    scales = rng.uniform(0.1, 1.0, 70)
    Wq = VQMatrix(idx, scales, books, packed=False)
    check("VQ reconstruction vs per-element loop", Wq.dense(), s_vq_dense(idx, scales, books))
    x = rng.normal(size=40)
    check("VQ exact matvec", model.vq_matvec(Wq, x, False), s_vq_dense(idx, scales, books) @ x)
    S, en = 4, 64
    idx = rng.integers(0, en, size=(67, 40, S))              # 40 positions: 2 blocks
    books = rng.normal(0, 0.3, (S, en, 8))
    scales = rng.uniform(0.1, 1.0, 67)
    x = rng.normal(size=320)
    Wq = VQMatrix(idx, scales, books, packed=True)
    check("VQ4P int8 table vs scalar loops", model.vq_matvec(Wq, x, True),
          s_lut8_matvec(idx, scales, books, x), 1e-12)
    exact = model.vq_matvec(Wq, x, False)
    err = np.abs(model.vq_matvec(Wq, x, True) - exact).max() / np.abs(exact).max()
    check_true("VQ4P int8 table close to exact (sanity)", err < 0.05, f"rel {err:.2e}")


# ---------------------------------------------------------------- stub container for layers

class Stub:
    """Quacks like container.Container for the layer functions."""

    def __init__(self, cfg_dict, tensors, experts=None, index_bits=8):
        self.cfg = Config(cfg_dict)
        self.t = tensors
        self.experts = experts or {}
        self.index_bits = index_bits
        self.dtype = np.dtype(np.float64)

    def has(self, n):
        return n in self.t

    def tensor(self, n):
        return self.t[n]

    def vector(self, n, k):
        return self.t[n].reshape(-1)[:k]

    def expert_parts(self, L, e):
        return self.experts[(L, e)]


BASE_CFG = {"num_hidden_layers": 2, "hidden_size": 24, "vocab_size": 10, "rms_norm_eps": 1e-5,
            "num_attention_heads": 3, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
            "qk_rope_head_dim": 4, "v_head_dim": 8}


def kda_stub(rng, k3):
    H, D, K, hid = 3, 8, 4, 24
    C = H * D
    cfg = dict(BASE_CFG, linear_attn_config={"num_heads": H, "head_dim": D, "kda_layers": [1],
                                             "short_conv_kernel_size": K})
    if k3:
        cfg["linear_attn_config"].update(use_full_rank_gate=True, gate_lower_bound=-5.0)
    p = "model.layers.0.self_attn."
    t = {}
    for x in "qkv":
        t[p + f"{x}_proj.weight"] = rng.normal(0, 0.3, (C, hid))
        t[p + f"{x}_conv1d.weight"] = rng.normal(0, 0.5, (C, 1, K))
    t[p + "f_a_proj.weight"] = rng.normal(0, 0.3, (D, hid))
    t[p + "f_b_proj.weight"] = rng.normal(0, 0.3, (C, D))
    t[p + "b_proj.weight"] = rng.normal(0, 0.5, (H, hid))
    A = np.zeros(D)
    A[:H] = rng.uniform(-1, 1, H)
    t[p + "A_log"] = A if k3 else A[:H].reshape(1, 1, H, 1)
    t[p + "dt_bias"] = rng.normal(-1, 1, C)
    if k3:
        t[p + "g_proj.weight"] = rng.normal(0, 0.5, (C, hid))
    else:
        t[p + "g_a_proj.weight"] = rng.normal(0, 0.3, (D, hid))
        t[p + "g_b_proj.weight"] = rng.normal(0, 0.5, (C, D))
    t[p + "o_norm.weight"] = rng.uniform(0.5, 1.5, D)
    t[p + "o_proj.weight"] = rng.normal(0, 0.3, (hid, C))
    return Stub(cfg, t)


def kda_naive(ct, us):
    """Scalar-loop KDA over a whole sequence, written from docs/MODEL.md §4, with the
    recurrence in its unrolled form S_t = A_t S_{t-1} + beta_t k_t v_t^T,
    A_t = (I - beta_t k_t k_t^T) diag(exp g_t), evaluated as explicit matrices."""
    c = ct.cfg
    H, D, K = c.kda_heads, c.kda_dim, c.conv_k
    C, eps = H * D, c.eps
    p = "model.layers.0.self_attn."
    T = ct.tensor
    hist = {x: [] for x in "qkv"}
    S = [np.zeros((D, D)) for _ in range(H)]
    outs = []
    for u in us:
        act = {}
        for x in "qkv":
            z = T(p + f"{x}_proj.weight") @ u
            hist[x].append(z)
            w = T(p + f"{x}_conv1d.weight").reshape(C, K)
            y = []
            for ch in range(C):
                acc = 0.0
                for j in range(K):               # tap j multiplies the value K-1-j steps ago
                    back = K - 1 - j
                    if len(hist[x]) - 1 - back >= 0:
                        acc += w[ch, j] * hist[x][-1 - back][ch]
                y.append(acc / (1 + math.exp(-acc)))
            act[x] = y
        f = T(p + "f_b_proj.weight") @ (T(p + "f_a_proj.weight") @ u)
        A_log = T(p + "A_log").reshape(-1)
        g = []
        for ch in range(C):
            zc, a = f[ch] + T(p + "dt_bias")[ch], math.exp(A_log[ch // D])
            g.append(c.gate_lower_bound * s_sigmoid(a * zc) if c.gate_lower_bound < 0
                     else -a * s_softplus(zc))
        braw = T(p + "b_proj.weight") @ u
        if c.full_rank_gate:
            G = T(p + "g_proj.weight") @ u
        else:
            G = T(p + "g_b_proj.weight") @ (T(p + "g_a_proj.weight") @ u)
        o_all = []
        for h in range(H):
            sl = slice(h * D, (h + 1) * D)
            q, k, v = (np.array(act[x][sl]) for x in "qkv")
            qn = q / math.sqrt(sum(a * a for a in q) + 1e-12) / math.sqrt(D)
            kn = k / math.sqrt(sum(a * a for a in k) + 1e-12)
            beta = s_sigmoid(braw[h])
            A = (np.eye(D) - beta * np.outer(kn, kn)) @ np.diag(np.exp(g[sl]))
            S[h] = A @ S[h] + beta * np.outer(kn, v)
            o = S[h].T @ qn
            o = s_rmsnorm(list(o), list(T(p + "o_norm.weight")), eps)
            o_all += [o[i] * s_sigmoid(G[sl][i]) for i in range(D)]
        outs.append(T(p + "o_proj.weight") @ np.array(o_all))
    return outs


def test_kda(rng):
    for k3 in (False, True):
        ct = kda_stub(rng, k3)
        us = [rng.normal(size=24) for _ in range(7)]
        st = model.KDAState(ct.cfg.kda_heads, ct.cfg.kda_dim, ct.cfg.conv_k)
        got = [model.kda_layer(ct, 0, u, st) for u in us]
        name = "K3 (bounded decay, full-rank gate)" if k3 else "Kimi-Linear (softplus, low-rank gate)"
        check(f"KDA {name} vs unrolled scalar form", got, kda_naive(ct, us), 1e-10)


K2_ROPE = {"rope_theta": 50000.0,
           "rope_scaling": {"type": "yarn", "factor": 32.0, "beta_fast": 1.0, "beta_slow": 1.0,
                            "mscale": 1.0, "mscale_all_dim": 1.0,
                            "original_max_position_embeddings": 4096}}


def mla_stub(rng, qlora, gate, rope=False):
    cfg = dict(BASE_CFG, linear_attn_config={"kda_layers": []}, mla_use_nope=not rope)
    if rope:
        cfg.update(K2_ROPE)
    nh, nope, rope, vh, kvl, hid = 3, 8, 4, 8, 16, 24
    if qlora:
        cfg["q_lora_rank"] = 12
    if gate:
        cfg["mla_use_output_gate"] = False        # presence-based: still on
    p = "model.layers.0.self_attn."
    t = {}
    if qlora:
        t[p + "q_a_proj.weight"] = rng.normal(0, 0.3, (12, hid))
        t[p + "q_a_layernorm.weight"] = rng.uniform(0.5, 1.5, 12)
        t[p + "q_b_proj.weight"] = rng.normal(0, 0.5, (nh * (nope + rope), 12))
    else:
        t[p + "q_proj.weight"] = rng.normal(0, 0.5, (nh * (nope + rope), hid))
    t[p + "kv_a_proj_with_mqa.weight"] = rng.normal(0, 0.5, (kvl + rope, hid))
    t[p + "kv_a_layernorm.weight"] = rng.uniform(0.5, 1.5, kvl)
    t[p + "kv_b_proj.weight"] = rng.normal(0, 0.5, (nh * (nope + vh), kvl))
    if gate:
        t[p + "g_proj.weight"] = rng.normal(0, 0.5, (nh * vh, hid))
    t[p + "o_proj.weight"] = rng.normal(0, 0.3, (hid, nh * vh))
    return Stub(cfg, t)


def s_yarn(dim, theta, rs):
    """Per-pair frequencies and the score factor, by scalar loops over the §5.0 formulas."""
    f = [theta ** (-2.0 * j / dim) for j in range(dim // 2)]
    if not rs:
        return f, 1.0
    s, L = rs["factor"], rs["original_max_position_embeddings"]
    d = lambda b: dim * math.log(L / (2 * math.pi * b)) / (2 * math.log(theta))
    lo, hi = max(0, math.floor(d(rs["beta_fast"]))), min(dim - 1, math.ceil(d(rs["beta_slow"])))
    hi = hi + 0.001 if hi == lo else hi
    out = []
    for j, fj in enumerate(f):
        r = min(1.0, max(0.0, (j - lo) / (hi - lo)))
        out.append(fj * (1 - r) + fj / s * r)
    m = (0.1 * rs["mscale_all_dim"] * math.log(s) + 1) ** 2
    return out, m


def s_rotate(x, freqs, pos):
    """Interleaved pairs (x[2j], x[2j+1]) turned by pos * freqs[j], with cos and sin."""
    y = list(x)
    for j, f in enumerate(freqs):
        cs, sn = math.cos(pos * f), math.sin(pos * f)
        y[2 * j], y[2 * j + 1] = x[2 * j] * cs - x[2 * j + 1] * sn, x[2 * j] * sn + x[2 * j + 1] * cs
    return np.array(y)


def mla_absorbed(ct, us, rope_cfg=None):
    """docs/MODEL.md §5 literally: cache latents, absorb kv_b into the query and the
    output, never expand K/V; with rope_cfg, rotate q's and k's rope channels (§5.0)."""
    c = ct.cfg
    nh, nope, rope, vh, kvl = c.n_heads, c.qk_nope, c.qk_rope, c.v_head, c.kv_lora
    p = "model.layers.0.self_attn."
    T = ct.tensor
    freqs, att = s_yarn(rope, rope_cfg["rope_theta"], rope_cfg["rope_scaling"]) if rope_cfg \
        else (None, 1.0)
    cache, outs = [], []
    for u in us:
        if c.q_lora:
            qa = T(p + "q_a_proj.weight") @ u
            q = T(p + "q_b_proj.weight") @ np.array(s_rmsnorm(list(qa), list(T(p + "q_a_layernorm.weight")), c.eps))
        else:
            q = T(p + "q_proj.weight") @ u
        ckv = T(p + "kv_a_proj_with_mqa.weight") @ u
        lat = s_rmsnorm(list(ckv[:kvl]), list(T(p + "kv_a_layernorm.weight")), c.eps)
        pos = len(cache)
        if freqs:
            ckv = np.concatenate([ckv[:kvl], s_rotate(ckv[kvl:], freqs, pos)])
            q = np.concatenate([np.concatenate([q[h * (nope + rope):h * (nope + rope) + nope],
                                                s_rotate(q[h * (nope + rope) + nope:
                                                           (h + 1) * (nope + rope)], freqs, pos)])
                                for h in range(nh)])
        cache.append(np.concatenate([lat, ckv[kvl:]]))
        kvb = T(p + "kv_b_proj.weight")
        o = []
        for h in range(nh):
            qh = q[h * (nope + rope):(h + 1) * (nope + rope)]
            Wkb = kvb[h * (nope + vh):h * (nope + vh) + nope]
            Wvb = kvb[h * (nope + vh) + nope:(h + 1) * (nope + vh)]
            qt = Wkb.T @ qh[:nope]
            sc = [(qt @ cs[:kvl] + qh[nope:] @ cs[kvl:]) * att / math.sqrt(nope + rope)
                  for cs in cache]
            e = [math.exp(s - max(sc)) for s in sc]
            ct_ = sum((ei / sum(e)) * cs[:kvl] for ei, cs in zip(e, cache))
            o += list(Wvb @ ct_)
        o = np.array(o)
        if c.mla_output_gate:
            o = o * np.array([s_sigmoid(z) for z in T(p + "g_proj.weight") @ u])
        outs.append(T(p + "o_proj.weight") @ o)
    return outs


def test_mla(rng):
    for qlora, gate in ((False, False), (True, True), (True, False), (False, True)):
        ct = mla_stub(rng, qlora, gate)
        us = [rng.normal(size=24) for _ in range(6)]
        cache = []
        got = [model.mla_layer(ct, 0, u, cache) for u in us]
        check(f"MLA unabsorbed vs absorbed (q_lora={qlora}, gate={gate})", got,
              mla_absorbed(ct, us), 1e-11)
    # K2's rotation: 4 rope channels, so with theta 50000 the YaRN ramp sits at pair 0..1
    for qlora in (False, True):
        ct = mla_stub(rng, qlora, False, rope=True)
        us = [rng.normal(size=24) for _ in range(7)]
        cache = []
        got = [model.mla_layer(ct, 0, u, cache) for u in us]
        check(f"MLA with YaRN rotary vs absorbed and scalar rotation (q_lora={qlora})", got,
              mla_absorbed(ct, us, K2_ROPE), 1e-11)
        plain = mla_absorbed(ct, us)
        check_true(f"MLA rotation moves the output (q_lora={qlora})",
                   max(np.abs(g - w).max() for g, w in zip(got[1:], plain[1:])) > 1e-3)


# ---------------------------------------------------------------- router and MoE

def s_route(scores, bias, K, renorm, scale, groups=1, keep=1):
    """K greedy passes: largest score+bias among unpicked, ties -> lowest id; with
    groups, only experts of the `keep` groups whose two best ranks sum highest."""
    E, picked = len(scores), []
    allowed = set(range(E))
    if keep < groups:
        per = E // groups
        key = []
        for g in range(groups):
            r = [scores[e] + bias[e] for e in range(g * per, (g + 1) * per)]
            a = max(r)
            r.remove(a)
            key.append(a + (max(r) if r else 0.0))
        kept = []
        for _ in range(keep):
            kept.append(max((g for g in range(groups) if g not in kept), key=lambda g: (key[g], -g)))
        allowed = {e for e in range(E) if e // per in kept}
    for _ in range(K):
        best = None
        for e in range(E):
            if e in picked or e not in allowed:
                continue
            if best is None or scores[e] + bias[e] > scores[best] + bias[best]:
                best = e
        picked.append(best)
    w = [scores[e] for e in picked]
    if renorm and K > 1:
        tot = sum(w) + 1e-20
        w = [x / tot for x in w]
    return picked, [x * scale for x in w]


def moe_stub(rng, latent, situ, ties, renorm=True):
    hid, E, K, inter, lat = 24, 8, 3, 16, 16
    cfg = dict(BASE_CFG, num_experts=E, num_experts_per_token=K, moe_intermediate_size=inter,
               num_shared_experts=2, routed_scaling_factor=1.7,
               linear_attn_config={"kda_layers": [], "num_heads": 1, "head_dim": 8})
    if renorm:
        cfg["moe_renormalize"] = False              # presence-based: still on
    if latent:
        cfg.update(routed_expert_hidden_size=lat, latent_moe_use_norm=True)
    if situ:
        cfg.update(hidden_act="situ", activation_situ_beta=1.5, activation_situ_linear_beta=2.0)
    p = "model.layers.1.block_sparse_moe."
    G = rng.normal(0, 0.5, (E, hid))
    bias = rng.normal(0, 0.1, E)
    if ties:
        G[1::2], bias[1::2] = G[0::2], bias[0::2]
    t = {p + "gate.weight": G, p + "gate.e_score_correction_bias": bias,
         p + "shared_experts.gate_proj.weight": rng.normal(0, 0.3, (2 * inter, hid)),
         p + "shared_experts.up_proj.weight": rng.normal(0, 0.3, (2 * inter, hid)),
         p + "shared_experts.down_proj.weight": rng.normal(0, 0.3, (hid, 2 * inter))}
    n = lat if latent else hid
    if latent:
        t[p + "routed_expert_down_proj.weight"] = rng.normal(0, 0.3, (lat, hid))
        t[p + "routed_expert_up_proj.weight"] = rng.normal(0, 0.3, (hid, lat))
        t[p + "routed_expert_norm.weight"] = rng.uniform(0.5, 1.5, lat)
    experts = {}
    for e in range(E):
        experts[(1, e)] = [VQMatrix(rng.integers(0, 256, (M, N // 8, 3)), rng.uniform(0.1, 1, M),
                                    rng.normal(0, 0.3, (3, 256, 8)), False)
                           for M, N in ((inter, n), (inter, n), (n, inter))]
    return Stub(cfg, t, experts)


def moe_naive(ct, u):
    c = ct.cfg
    p = "model.layers.1.block_sparse_moe."
    T = ct.tensor
    G = T(p + "gate.weight")
    scores = [s_sigmoid(sum(G[e, j] * u[j] for j in range(len(u)))) for e in range(c.n_experts)]
    ids, w = s_route(scores, list(T(p + "gate.e_score_correction_bias")), c.top_k,
                     c.renormalize, c.routed_scale)

    def act(g, up):
        if c.situ:
            b, lb = c.situ_beta, c.situ_linear_beta
            return np.array([b * math.tanh(a / b) * s_sigmoid(a) * lb * math.tanh(x / lb)
                             for a, x in zip(g, up)])
        return np.array([a / (1 + math.exp(-a)) * x for a, x in zip(g, up)])

    xi = T(p + "routed_expert_down_proj.weight") @ u if c.latent else u
    acc = np.zeros(len(xi))
    for e, we in zip(ids, w):
        Wg, Wu, Wd = (s_vq_dense(m.idx, m.scales, m.books) for m in ct.expert_parts(1, e))
        acc = acc + we * (Wd @ act(Wg @ xi, Wu @ xi))
    if c.latent:
        acc = np.array(s_rmsnorm(list(acc), list(T(p + "routed_expert_norm.weight")), c.eps))
        acc = T(p + "routed_expert_up_proj.weight") @ acc
    s = p + "shared_experts."
    sh = T(s + "down_proj.weight") @ act(T(s + "gate_proj.weight") @ u, T(s + "up_proj.weight") @ u)
    return acc + sh, ids


def test_moe(rng):
    for latent, situ, ties in ((False, False, False), (True, True, False), (True, True, True),
                               (False, True, True)):
        ct = moe_stub(rng, latent, situ, ties)
        u = rng.normal(size=24)
        trace = []
        got = model.moe_block(ct, 1, u, trace)
        want, ids = moe_naive(ct, u)
        tag = f"latent={latent} situ={situ} ties={ties}"
        check(f"MoE block vs naive ({tag})", got, want, 1e-10)
        check_true(f"router selection vs greedy passes ({tag})", trace[0][1] == ids,
                   f"{trace[0][1]} vs {ids}")
    # every score tied: the lowest ids win, in id order
    sc, b = [0.5] * 8, [0.0] * 8
    check_true("router all-tie -> lowest ids", s_route(sc, b, 3, True, 1.0)[0] == [0, 1, 2])
    ct = moe_stub(rng, False, False, False)
    ct.t["model.layers.1.block_sparse_moe.gate.weight"][:] = 0.25
    ct.t["model.layers.1.block_sparse_moe.gate.e_score_correction_bias"][:] = 0.0
    ids, w, _ = model.route(ct, 1, rng.normal(size=24))
    check_true("route(): identical rows -> lowest ids", list(ids) == [0, 1, 2], str(ids))
    check("route(): renormalized weights sum to the scale", [w.sum()], [1.7], 1e-12)
    ct = moe_stub(rng, False, False, False, renorm=False)
    u = rng.normal(size=24)
    ids, w, _ = model.route(ct, 1, u)
    sc = model.sigmoid(ct.tensor("model.layers.1.block_sparse_moe.gate.weight") @ u)
    check("route(): no moe_renormalize key -> raw sigmoid x scale", w, sc[ids] * 1.7, 1e-12)
    # grouped top-k: 8 experts in 4 groups, 2 kept (ties: pairs of equal experts)
    for trial in range(12):
        ct = moe_stub(rng, False, False, trial % 2 == 1)
        ct.cfg.n_group, ct.cfg.topk_group = 4, 2
        u = rng.normal(size=24)
        ids, w, _ = model.route(ct, 1, u)
        G = ct.tensor("model.layers.1.block_sparse_moe.gate.weight")
        b = list(ct.tensor("model.layers.1.block_sparse_moe.gate.e_score_correction_bias"))
        sc = [s_sigmoid(z) for z in G @ u]
        want, ww = s_route(sc, b, 3, True, 1.7, 4, 2)
        check_true(f"grouped route() vs greedy passes (trial {trial})", list(ids) == want,
                   f"{list(ids)} vs {want}")
        check(f"grouped route() weights (trial {trial})", w, ww, 1e-12)
    cfg = Config(dict(BASE_CFG, num_experts=8, num_experts_per_token=2, moe_intermediate_size=8,
                      num_expert_group=4, topk_group=2, linear_attn_config={"kda_layers": []},
                      mla_use_nope=True))
    check_true("config reads num_expert_group / topk_group", (cfg.n_group, cfg.topk_group) == (4, 2))


# ---------------------------------------------------------------- attention residuals

def ar_inplace(blocks, buf, nw, pw, eps):
    """C-style AttnRes writing into the same buffer it reads p from (the final
    aggregation aliases). Scores first; then out = w_n*p element-wise before
    adding the blocks, so no input is overwritten before it is read."""
    vs = list(blocks) + [buf.copy()]
    sc = []
    for v in vs:
        r = 1 / math.sqrt(sum(a * a for a in v) / len(v) + eps)
        sc.append(sum(v[j] * r * nw[j] * pw[j] for j in range(len(v))))
    e = [math.exp(s - max(sc)) for s in sc]
    w = [x / sum(e) for x in e]
    for j in range(len(buf)):
        buf[j] = w[-1] * buf[j]
    for i, v in enumerate(blocks):
        for j in range(len(buf)):
            buf[j] += w[i] * v[j]
    return buf


def test_attn_res(rng):
    hid = 20
    blocks = [rng.normal(0, 2, hid) for _ in range(5)]
    p, nw, pw = rng.normal(0, 2, hid), rng.uniform(0.5, 1.5, hid), rng.normal(0, 1, hid)
    p0 = p.copy()
    got = model.attn_res(blocks, p, nw, pw, 1e-5)
    check_true("attn_res() leaves its inputs untouched", np.array_equal(p, p0))
    buf = p.copy()
    check("AttnRes vs in-place (aliased) scalar form", got, ar_inplace(blocks, buf, nw, pw, 1e-5))
    one = model.attn_res([], p, nw, pw, 1e-5)
    check("AttnRes over one candidate is the identity", one, p, 1e-15)


def test_attn_res_stack(rng):
    """Model._layers_attn_res vs a set formulation: every sub-layer input is
    AR over {completed block sums} + {current partial sum, if non-empty}, where
    block 0 is the embedding and block j the sum of the sub-layer outputs of
    layers [(j-1)*blk, j*blk)."""
    hid, nl = 16, 7
    for blk in (1, 2, 3, 7):
        cfg = dict(BASE_CFG, num_hidden_layers=nl, hidden_size=hid, attn_res_block_size=blk,
                   linear_attn_config={"kda_layers": list(range(1, nl + 1)),
                                       "num_heads": 1, "head_dim": 8})
        t = {}
        for L in range(nl):
            lw = f"model.layers.{L}."
            for n in ("input_layernorm", "post_attention_layernorm", "self_attention_res_norm",
                      "mlp_res_norm"):
                t[lw + n + ".weight"] = rng.uniform(0.5, 1.5, hid)
            for n in ("self_attention_res_proj", "mlp_res_proj"):
                t[lw + n + ".weight"] = rng.normal(0, 1, (1, hid))
        t["model.output_attn_res_norm.weight"] = rng.uniform(0.5, 1.5, hid)
        t["model.output_attn_res_proj.weight"] = rng.normal(0, 1, (1, hid))
        ct = Stub(cfg, t)
        Wa = [rng.normal(0, 0.5, (hid, hid)) for _ in range(nl)]
        Wf = [rng.normal(0, 0.5, (hid, hid)) for _ in range(nl)]
        m = model.Model.__new__(model.Model)
        m.ct, m.hidden = ct, None
        m.attn = lambda L, u: np.tanh(Wa[L] @ u)
        m.ffn = lambda L, u: np.tanh(Wf[L] @ u)
        x0 = rng.normal(0, 1, hid)
        got = m._layers_attn_res(x0.copy())

        def AR(cands, lw, kind):
            nw, pw = t[lw + kind + "_norm.weight"], t[lw + kind + "_proj.weight"].reshape(-1)
            s = [sum(s_rmsnorm(list(v), list(nw), 1e-5)[j] * pw[j] for j in range(hid))
                 for v in cands]
            e = [math.exp(v - max(s)) for v in s]
            return sum((ei / sum(e)) * v for ei, v in zip(e, cands))

        def cands(outputs):
            groups = {}
            for L, o in outputs:
                groups[L // blk] = groups.get(L // blk, 0) + o
            return [x0] + [groups[g] for g in sorted(groups)]

        def norm(x, name):
            return np.array(s_rmsnorm(list(x), list(t[name]), 1e-5))
        outputs = []                                  # (layer, sub-layer output)
        for L in range(nl):
            lw = f"model.layers.{L}."
            xin = AR(cands(outputs), lw, "self_attention_res")
            a = np.tanh(Wa[L] @ norm(xin, lw + "input_layernorm.weight"))
            outputs.append((L, a))
            xm = AR(cands(outputs), lw, "mlp_res")
            f = np.tanh(Wf[L] @ norm(xm, lw + "post_attention_layernorm.weight"))
            outputs.append((L, f))
        want = AR(cands(outputs), "model.", "output_attn_res")
        check(f"AttnRes layer stack vs set formulation (block {blk})", got, want, 1e-12)


# ---------------------------------------------------------------- original engine's dump

def test_k3parts(path):
    with open(path, "rb") as f:
        raw = f.read()
    pos = [0]

    def i32():
        v = struct.unpack_from("<i", raw, pos[0])[0]
        pos[0] += 4
        return v

    def f32(n=None):
        k = 1 if n is None else n
        v = np.frombuffer(raw, "<f4", k, pos[0]).astype(np.float64)
        pos[0] += 4 * k
        return float(v[0]) if n is None else v
    n = i32()
    beta, lb = f32(), f32()
    g, u, out = f32(n), f32(n), f32(n)
    check("k3parts: SiTU vs engine", model.situ(g, u, beta, lb), out, 2e-5)
    H, D = i32(), i32()
    low = f32()
    gin, A, dt, gk3, glin = f32(H * D), f32(H), f32(H * D), f32(H * D), f32(H * D)
    a = np.repeat(np.exp(A), D)
    check("k3parts: bounded decay gate vs engine", low * model.sigmoid(a * (gin + dt)), gk3, 2e-5)
    check("k3parts: softplus decay gate vs engine", -a * model.softplus(gin + dt), glin, 2e-5)
    nb, hid = i32(), i32()
    eps = f32()
    blocks = f32(nb * hid).reshape(nb, hid)
    ps, nw, pw, o = f32(hid), f32(hid), f32(hid), f32(hid)
    check("k3parts: AttnRes vs engine", model.attn_res(list(blocks), ps, nw, pw, eps), o, 2e-5)


def test_container_errors():
    """Missing files and bad manifests are refused with a ContainerError."""
    with tempfile.TemporaryDirectory() as d:
        try:
            container.Container(d)
            check_true("missing manifest refused", False)
        except container.ContainerError as e:
            check_true("missing manifest refused", "manifest.json" in str(e), str(e))
        with open(os.path.join(d, "manifest.json"), "w") as f:
            f.write('{"format_version": 1, "config": {}}')
        try:
            container.Container(d)
            check_true("format_version 1 refused", False)
        except container.ContainerError as e:
            check_true("format_version 1 refused", "mismatch" in str(e), str(e))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--k3parts", metavar="FILE", help="dump from the original's test_k3parts")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    test_primitives(rng)
    test_f16()
    test_trunk_formats(rng)
    test_expert_layout(rng)
    test_vq(rng)
    test_kda(rng)
    test_mla(rng)
    test_moe(rng)
    test_attn_res(rng)
    test_attn_res_stack(rng)
    test_container_errors()
    if a.k3parts:
        test_k3parts(a.k3parts)
    bad = 0
    for name, ok, detail in RESULTS:
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")
        bad += not ok
    print(f"{len(RESULTS) - bad}/{len(RESULTS)} checks passed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
