#!/usr/bin/python3
"""make_k3_container.py — a tiny container v0 with the K3 features switched on.

For checking waste_ref.py (and any engine) on the paths the synthetic
Kimi-Linear container of the original project does not reach: latent MoE
with its norm, SiTU, Attention Residuals, MLA with q_lora and the sigmoid
output gate, the full-rank KDA output gate, the bounded decay gate, A_log
padded to head_dim, two shared experts, VQ4P / VQ2R expert records, Q3G /
Q8G trunks, a group size other than 128, tensors written out of order with
dead bytes between them, f16 subnormal scales that matter (the row of logit 5
in lm_head; the row of token 7 in embed_tokens, which also makes the logits of
a prompt ending in 7 ~100x more sensitive to rounding), subnormal codebook
values, and a router layer (layer 2) built so that every token has an exact
tie at the top-k boundary (pairs of identical router rows, odd top-k).

Weights are noise with sane magnitudes; the container only supports
comparisons between implementations on the same file.

  /usr/bin/python3 scripts/reference/make_k3_container.py OUT.waste [--seed N]
      [--prefix language_model.] [--experts vq3r|vq2r|vq4p] [--trunk mixed|q8|q3]
      [--group 128] [--off FEATURE,...] [--false-flags]

FEATURES for --off: attn_res, latent, latent_norm, situ, q_lora, mla_gate,
full_rank_gate, bounded_decay, tie_layer.
"""

import argparse
import json
import os
import struct
import sys
import zlib

import numpy as np

F32, Q8G, Q4G, Q3G = 0, 2, 3, 7
FEATURES = ("attn_res", "latent", "latent_norm", "situ", "q_lora", "mla_gate",
            "full_rank_gate", "bounded_decay", "tie_layer")


class Trunk:
    def __init__(self, rng, prefix, bulk, group):
        self.buf = bytearray()
        self.index = []
        self.rng, self.prefix, self.bulk, self.group = rng, prefix, bulk, group

    def _dead(self):
        # trunk offsets may point anywhere: leave dead bytes between tensors
        if self.rng.random() < 0.3:
            self.buf += bytes(int(self.rng.integers(1, 40)))

    def f32(self, name, a):
        a = np.asarray(a, dtype="<f4")
        self._dead()
        off = len(self.buf)
        self.buf += a.tobytes()
        self.index.append({"name": self.prefix + name, "fmt": F32, "off": off,
                           "shape": list(a.shape), "bytes": a.nbytes})

    def quant(self, name, w, fmt=None):
        """Quantize like the converter: per group amax, q = round(x / s)."""
        fmt = self.bulk if fmt is None else fmt
        if fmt == F32:
            return self.f32(name, w)
        w = np.asarray(w, dtype=np.float64)
        shape, N = list(w.shape), w.shape[-1]
        rows = int(np.prod(shape[:-1]))
        g = self.group
        ng = -(-N // g)
        x = np.zeros((rows, ng * g))
        x[:, :N] = w.reshape(rows, N)
        xg = x.reshape(rows, ng, g)
        qmax = {Q8G: 127, Q4G: 7, Q3G: 3}[fmt]
        qmin = {Q8G: -127, Q4G: -8, Q3G: -4}[fmt]
        amax = np.maximum(np.abs(xg).max(axis=2), 1e-8)
        s16 = (amax / qmax).astype(np.float16)
        s = s16.astype(np.float64)
        s[s == 0] = 1.0
        q = np.clip(np.rint(xg / s[:, :, None]), qmin, qmax).astype(np.int64).reshape(rows, ng * g)
        if fmt == Q8G:
            payload = q.astype(np.int8).tobytes()
        elif fmt == Q4G:
            c = (q + 8).astype(np.uint8)
            payload = (c[:, 0::2] | (c[:, 1::2] << 4)).astype(np.uint8).tobytes()
        else:
            c = (q + 4).astype(np.uint8)
            bits = np.stack([(c >> b) & 1 for b in range(3)], axis=-1).reshape(rows, -1)
            rb = (ng * g * 3 + 7) // 8 + 1
            pad = np.zeros((rows, rb * 8 - bits.shape[1]), dtype=np.uint8)
            payload = np.packbits(np.hstack([bits, pad]), axis=1, bitorder="little").tobytes()
        scales = s16.astype("<f2").tobytes()
        self._dead()
        if self.rng.random() < 0.3:          # scales first, payload after
            soff = len(self.buf)
            self.buf += scales
            self._dead()
            off = len(self.buf)
            self.buf += payload
        else:
            off = len(self.buf)
            self.buf += payload
            soff = len(self.buf)
            self.buf += scales
        self.index.append({"name": self.prefix + name, "fmt": fmt, "off": off,
                           "shape": shape, "bytes": len(payload) + len(scales),
                           "group": g, "scale_off": soff})


def block_indices(idx, M, nv, R):
    """idx [M, nv, R] bytes -> [row_block][v][row_in_block][R], rows padded."""
    Mp = -(-M // 64) * 64
    full = np.zeros((Mp, nv, R), dtype=np.uint8)
    full[:M] = idx
    return full.reshape(Mp // 64, 64, nv, R).transpose(0, 2, 1, 3).tobytes()


def pack6(idx):
    """[M, nv, 4] 6-bit indices -> [M, nv, 3] bytes (stage 0 in the low bits)."""
    s0, s1, s2, s3 = (idx[..., i].astype(np.uint32) for i in range(4))
    b0 = (s0 | (s1 << 6)) & 0xFF
    b1 = ((s1 >> 2) | (s2 << 4)) & 0xFF
    b2 = ((s2 >> 4) | (s3 << 2)) & 0xFF
    return np.stack([b0, b1, b2], axis=-1).astype(np.uint8)


def write_expert(f, rng, layer, eid, cb_base, dims, stages, entries, packed):
    body, offs = bytearray(), []
    for (M, N) in dims:
        idx = rng.integers(0, entries, size=(M, N // 8, stages), dtype=np.int64)
        runs = pack6(idx) if packed else idx.astype(np.uint8)
        offs.append(48 + len(body))
        body += block_indices(runs, M, N // 8, runs.shape[-1])
    s_off = 48 + len(body)
    for (M, N) in dims:
        body += (rng.uniform(1.0, 3.0, M) / np.sqrt(N)).astype("<f2").tobytes()
    total = 48 + len(body)
    blocks = -(-total // 4096)
    hdr = struct.pack("<IHHBBHHHIIIIIIII", 0x50584557, layer, eid, 8 if packed else 4, 0,
                      cb_base, 0, 0, blocks, offs[0], offs[1], offs[2], s_off,
                      zlib.crc32(bytes(body)), 0, 0)
    f.write(hdr + bytes(body) + bytes(blocks * 4096 - total))
    return blocks * 4096


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prefix", default="")
    ap.add_argument("--experts", choices=("vq3r", "vq2r", "vq4p"), default="vq3r")
    ap.add_argument("--trunk", choices=("mixed", "q8", "q3"), default="mixed")
    ap.add_argument("--group", type=int, default=128)
    ap.add_argument("--off", default="", help="comma-separated features to switch off")
    ap.add_argument("--false-flags", action="store_true",
                    help="write the presence-based booleans as false (the engine "
                         "still treats them as on)")
    a = ap.parse_args()
    off = {x for x in a.off.split(",") if x}
    bad = off - set(FEATURES)
    if bad:
        ap.error(f"unknown feature(s) {sorted(bad)}; known: {', '.join(FEATURES)}")
    on = lambda feat: feat not in off
    rng = np.random.default_rng(a.seed)
    flag = (lambda: False) if a.false_flags else (lambda: True)

    hid, nl, vocab = 160, 6, 300
    H, D, K = 3, 16, 4
    C = H * D
    nh, nope, rope, vh, kvl, ql = 3, 16, 8, 16, 32, 48
    E, topk, n_shared, moe, lat, dense = 12, 3, 2, 40, 72, 96
    kda_layers = [1, 2, 3, 5]                 # 1-based: layers 3 and 5 are MLA
    cfg = {
        "model_type": "kimi_linear", "architectures": ["KimiLinearForCausalLM"],
        "hidden_size": hid, "num_hidden_layers": nl, "vocab_size": vocab,
        "first_k_dense_replace": 1, "intermediate_size": dense,
        "num_experts": E, "num_experts_per_token": topk, "num_shared_experts": n_shared,
        "moe_intermediate_size": moe, "moe_renormalize": flag(),
        "routed_scaling_factor": 1.5, "num_attention_heads": nh,
        "qk_nope_head_dim": nope, "qk_rope_head_dim": rope, "v_head_dim": vh,
        "kv_lora_rank": kvl, "q_lora_rank": ql if on("q_lora") else None,
        "mla_use_nope": True,
        "rms_norm_eps": 1e-5, "eos_token_id": 2, "hidden_act": "silu",
        "linear_attn_config": {"num_heads": H, "head_dim": D, "short_conv_kernel_size": K,
                               "kda_layers": kda_layers,
                               "full_attn_layers": [4, 6]},
    }
    if on("latent"):
        cfg["routed_expert_hidden_size"] = lat
        if on("latent_norm"):
            cfg["latent_moe_use_norm"] = flag()
    if on("attn_res"):
        cfg["attn_res_block_size"] = 2
    if on("mla_gate"):
        cfg["mla_use_output_gate"] = flag()
    if on("situ"):
        # small betas so both tanh squashes are really nonlinear here
        cfg.update(hidden_act="situ", activation_situ_beta=1.5,
                   activation_situ_linear_beta=2.0)
    if on("full_rank_gate"):
        cfg["linear_attn_config"]["use_full_rank_gate"] = flag()
    if on("bounded_decay"):
        cfg["linear_attn_config"]["gate_lower_bound"] = -5.0

    bulk = {"mixed": Q4G, "q8": Q8G, "q3": Q3G}[a.trunk]
    t = Trunk(rng, a.prefix, bulk, a.group)
    # one generator per tensor name, so that switching a feature off leaves
    # every other tensor as it was
    R = lambda name: np.random.default_rng([a.seed, zlib.crc32(name.encode())])
    mat = lambda name, r, c, gain=1.0: R(name).normal(0, gain / np.sqrt(c), (r, c))
    vec = lambda name, n, lo=0.5, hi=1.5: R(name).uniform(lo, hi, n)
    Q = lambda name, r, c, gain=1.0, fmt=None: t.quant(name, mat(name, r, c, gain), fmt)
    V = lambda name, n: t.f32(name, vec(name, n))
    N = lambda name, sd, shape: t.f32(name, R(name).normal(0, sd, shape))
    eight = Q8G                         # embed_tokens and lm_head, as the converter

    emb = R("model.embed_tokens.weight").normal(0, 1, (vocab, hid))
    emb[7] *= 1e-3                      # token 7: every scale of its row is subnormal
    t.quant("model.embed_tokens.weight", emb, eight)
    for L in range(nl):
        p = f"model.layers.{L}."
        V(p + "input_layernorm.weight", hid)
        V(p + "post_attention_layernorm.weight", hid)
        if on("attn_res"):
            for n in ("self_attention_res", "mlp_res"):
                V(p + n + "_norm.weight", hid)
                N(p + n + "_proj.weight", 0.3, (1, hid))
        s = p + "self_attn."
        if L + 1 in kda_layers:
            for x in "qkv":
                w = mat(s + f"{x}_proj.weight", C, hid)
                if x == "q":
                    w[0, :a.group] *= 1e-3      # a group whose f16 scale is subnormal
                t.quant(s + f"{x}_proj.weight", w)
                N(s + f"{x}_conv1d.weight", 0.5, (C, 1, K))
            Q(s + "f_a_proj.weight", D, hid, fmt=F32)                # an F32 matrix
            Q(s + "f_b_proj.weight", C, D)
            Q(s + "b_proj.weight", H, hid, 2.0)
            A = np.zeros(D)                                      # padded, tail 0
            A[:H] = R(s + "A_log").uniform(-1.0, 1.0, H)
            t.f32(s + "A_log", A if on("bounded_decay") else A[:H].reshape(1, 1, H, 1))
            t.f32(s + "dt_bias", R(s + "dt_bias").normal(-2.5, 1.0, C))   # decays mostly near 1
            if on("full_rank_gate"):
                Q(s + "g_proj.weight", C, hid, 2.0)
            else:
                Q(s + "g_a_proj.weight", D, hid)
                Q(s + "g_b_proj.weight", C, D, 2.0)
            V(s + "o_norm.weight", D)
            Q(s + "o_proj.weight", hid, C)
        else:
            if on("q_lora"):
                Q(s + "q_a_proj.weight", ql, hid)
                V(s + "q_a_layernorm.weight", ql)
                Q(s + "q_b_proj.weight", nh * (nope + rope), ql, 3.0)
            else:
                Q(s + "q_proj.weight", nh * (nope + rope), hid, 3.0)
            Q(s + "kv_a_proj_with_mqa.weight", kvl + rope, hid, 3.0)
            V(s + "kv_a_layernorm.weight", kvl)
            Q(s + "kv_b_proj.weight", nh * (nope + vh), kvl)
            if on("mla_gate"):
                Q(s + "g_proj.weight", nh * vh, hid, 2.0)
            Q(s + "o_proj.weight", hid, nh * vh)
        if L == 0:
            Q(p + "mlp.gate_proj.weight", dense, hid)
            Q(p + "mlp.up_proj.weight", dense, hid)
            Q(p + "mlp.down_proj.weight", hid, dense)
        else:
            m = p + "block_sparse_moe."
            G = mat(m + "gate.weight", E, hid, 3.0)
            bias = R(m + "bias").normal(0, 0.05, E)
            if on("tie_layer") and L == 2:
                # identical row pairs (and bias pairs), odd top-k: every token
                # has an exact tie straddling the top-k boundary
                G[1::2] = G[0::2]
                bias[1::2] = bias[0::2]
            t.quant(m + "gate.weight", G)
            t.f32(m + "gate.e_score_correction_bias", bias)
            sh = moe * n_shared
            Q(m + "shared_experts.gate_proj.weight", sh, hid)
            Q(m + "shared_experts.up_proj.weight", sh, hid)
            Q(m + "shared_experts.down_proj.weight", hid, sh)
            if on("latent"):
                Q(m + "routed_expert_down_proj.weight", lat, hid)
                Q(m + "routed_expert_up_proj.weight", hid, lat)
                if on("latent_norm"):
                    V(m + "routed_expert_norm.weight", lat)
    V("model.norm.weight", hid)
    if on("attn_res"):
        V("model.output_attn_res_norm.weight", hid)
        N("model.output_attn_res_proj.weight", 0.3, (1, hid))
    head = mat("lm_head.weight", vocab, hid, 4.0)
    head[5] *= 2e-3                     # logit 5: subnormal scales (flushing them shows)
    t.quant("lm_head.weight", head, eight)
    if a.prefix:
        t.prefix = ""
        Q("vision_tower.encoder.blocks.0.wqkv.weight", 64, hid, fmt=Q8G)

    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "trunk.bin"), "wb") as f:
        f.write(t.buf)

    stages, entries, packed = {"vq3r": (3, 256, False), "vq2r": (2, 256, False),
                               "vq4p": (4, 64, True)}[a.experts]
    elat = lat if on("latent") else hid
    dims = [(moe, elat), (moe, elat), (elat, moe)]
    layers, base = {}, 0
    with open(os.path.join(a.out, "codebooks.bin"), "wb") as cf:
        # one zero-filled record first: codebook_base need not start at 0
        cf.write(bytes(16 + entries * 8 * 2))
        base = 1
        for L in range(1, nl):
            for k in range(3):
                for s in range(stages):
                    cid = base + k * stages + s
                    cb = R(f"codebook {cid}").normal(0, 0.35 * 0.4 ** s, (entries, 8))
                    cb[0, :3] = [3e-6, -2e-5, 5e-8]     # f16 subnormals: flushed
                    cf.write(struct.pack("<IHBBII", 0x4B424357, cid & 0xFFFF, 4, 8, entries, 0))
                    cf.write(cb.astype("<f2").tobytes())
            name = f"experts-L{L}.bin"
            with open(os.path.join(a.out, name), "wb") as bf:
                total = sum(write_expert(bf, R(f"expert {L} {e}"), L, e, base, dims,
                                         stages, entries, packed)
                            for e in range(E))
            layers[str(L)] = {"file": name, "experts": E, "bytes": total,
                              "codebook_base": base}
            base += 3 * stages

    eq = {"fmt": a.experts.upper(), "stages": stages, "vec_dim": 8, "entries": entries,
          "index_block": 64, "index_bits": 6 if packed else 8,
          "bits_per_weight": stages * (6 if packed else 8) / 8}
    manifest = {"format_version": 0, "arch": "kimi-k3-synthetic", "tensor_prefix": a.prefix,
                "config": cfg, "expert_quant": eq, "layers": layers, "trunk": t.index}
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"wrote {a.out}: features off: {sorted(off) or 'none'}, experts {a.experts}, "
          f"trunk {a.trunk}, group {a.group}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
