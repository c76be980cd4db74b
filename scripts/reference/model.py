"""Kimi-Linear / Kimi K3 forward pass in float64, one token at a time.

Written from docs/MODEL.md §1–§8 (model math). One function
per layer kind; every weight is a dequantized float64 matrix from
container.Container, and every product is a plain `W @ x`.

  m = Model(container); logits = m.step(token)   (positions 0, 1, 2, ...)
"""

import numpy as np

from container import ContainerError


# ---------------------------------------------------------------- primitives

def rmsnorm(x, w, eps):
    """y_i = x_i * w_i / sqrt(mean_j x_j^2 + eps)"""
    return x * w / np.sqrt(np.mean(x * x) + eps)


def sigmoid(z):
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-z))


def softplus(z):
    """z if z > 20 else log(1 + e^z)"""
    return np.where(z > 20.0, z, np.log1p(np.exp(np.minimum(z, 20.0))))


def silu(a):
    return a * sigmoid(a)


def situ(g, u, beta, linear_beta):
    """SiTU: [beta*tanh(g/beta)*sigmoid(g)] * [lb*tanh(u/lb)]  (u if lb <= 0)."""
    up = linear_beta * np.tanh(u / linear_beta) if linear_beta > 0 else u
    return beta * np.tanh(g / beta) * sigmoid(g) * up


def softmax(s):
    e = np.exp(s - np.max(s))
    return e / e.sum()


def glu_act(cfg, g, u):
    """The FFN nonlinearity of this model: SiTU on K3, SiLU(g)*u otherwise."""
    if cfg.situ:
        return situ(g, u, cfg.situ_beta, cfg.situ_linear_beta)
    return silu(g) * u


def attn_res(blocks, p, norm_w, proj_w, eps):
    """Attention Residuals: softmax over [blocks..., p] of
    s_i = sum_j v_ij * norm_w_j * proj_w_j / sqrt(mean_j v_ij^2 + eps),
    result = sum_i w_i v_i. Returns a new array (so aliasing cannot bite)."""
    V = np.vstack(list(blocks) + [p])                        # [n+1, hid]
    r = 1.0 / np.sqrt(np.mean(V * V, axis=1) + eps)
    s = (V * (norm_w * proj_w)[None, :]).sum(axis=1) * r
    return softmax(s) @ V


# ---------------------------------------------------------------- experts

# Set EXACT_VQ4P[0] = True (waste_ref.py --exact-vq4p) to use the exact
# dequantized product for VQ4P experts instead of the engine's int8 table.
EXACT_VQ4P = [False]
LUT8_BLOCK = 32          # vector positions sharing one int8 table scale


def vq_matvec(Wq, x, lut8):
    """y = W x for a routed-expert matrix (container.VQMatrix).

    lut8=False: the exact product with W dequantized (docs/FORMAT.md §8.1).
    lut8=True (VQ4P containers, the engine's only VQ4P path, docs/FORMAT.md §8.3): the
    table T[v][s][c] = sum_d x[8v+d] C_s[c][d] is quantized to int8 per block
    of 32 positions (scale m/127, m = max|T| over the block's 4 x 64 x 32
    values, round half to even, clamp to +-127); each row sums its looked-up
    integers per block, acc = sum_blocks scale_b * int_sum_b, y = acc * f16(scale_r).
    """
    if not lut8:
        return Wq.dense() @ x
    M, nv, S = Wq.idx.shape
    vd = Wq.books.shape[2]
    T = np.einsum("vd,sed->vse", x.reshape(nv, vd), Wq.books)          # [nv, S, en]
    y = np.zeros(M, dtype=x.dtype)
    for v0 in range(0, nv, LUT8_BLOCK):
        Tb = T[v0:v0 + LUT8_BLOCK]
        m = np.abs(Tb).max()
        q = np.clip(np.rint(Tb * (127.0 / m)), -127, 127) if m > 0 else np.zeros_like(Tb)
        ib = Wq.idx[:, v0:v0 + LUT8_BLOCK, :]                           # [M, nb, S]
        looked = q[np.arange(ib.shape[1])[None, :, None], np.arange(S)[None, None, :], ib]
        y += (m / 127.0) * looked.sum(axis=(1, 2))                      # exact integers
    return y * Wq.scales


# ---------------------------------------------------------------- layers

class KDAState:
    """Per KDA layer: S[h] (D x D, rows = key dim) and the last K-1
    pre-conv values of q, k, v (oldest first)."""

    def __init__(self, H, D, K, dtype=np.float64):
        C = H * D
        self.S = np.zeros((H, D, D), dtype=dtype)
        self.ring = {x: np.zeros((K - 1, C), dtype=dtype) for x in "qkv"}


def short_conv_silu(z, w, ring):
    """Causal depthwise conv, w[c][K-1] multiplies the current value; no bias.
    Returns (SiLU(y), new ring)."""
    K = w.shape[1]
    y = (ring * w[:, :K - 1].T).sum(axis=0) + z * w[:, K - 1]
    ring = np.vstack([ring[1:], z[None, :]]) if K > 1 else ring
    return silu(y), ring


def kda_layer(ct, L, u, st):
    """Kimi Delta Attention, one decode step (docs/MODEL.md §4)."""
    c = ct.cfg
    H, D, K = c.kda_heads, c.kda_dim, c.conv_k
    C = H * D
    p = f"model.layers.{L}.self_attn."
    W = lambda n: ct.tensor(p + n + ".weight")

    # 1. projections + short conv + SiLU
    qkv = {}
    for x in "qkv":
        w = ct.vector(p + f"{x}_conv1d.weight", C * K).reshape(C, K)
        qkv[x], st.ring[x] = short_conv_silu(W(f"{x}_proj") @ u, w, st.ring[x])
    q, k, v = (qkv[x].reshape(H, D) for x in "qkv")

    # 2. decay gate (log space, per channel)
    z = W("f_b_proj") @ (W("f_a_proj") @ u) + ct.vector(p + "dt_bias", C)
    a = np.repeat(np.exp(ct.vector(p + "A_log", H)), D)      # per head
    if c.gate_lower_bound < 0:
        g = c.gate_lower_bound * sigmoid(a * z)              # K3: in (lb, 0)
    else:
        g = -a * softplus(z)                                 # Kimi-Linear
    g = g.reshape(H, D)

    # 3. beta, one per head
    beta = sigmoid(W("b_proj") @ u)

    # 4.-5. normalize q, k; gated delta rule per head
    o = np.zeros((H, D), dtype=u.dtype)
    for h in range(H):
        qh = q[h] / np.sqrt(np.sum(q[h] ** 2) + 1e-12) / np.sqrt(D)
        kh = k[h] / np.sqrt(np.sum(k[h] ** 2) + 1e-12)
        S = np.exp(g[h])[:, None] * st.S[h]                  # decay first
        delta = beta[h] * (v[h] - S.T @ kh)                  # vs decayed state
        S = S + np.outer(kh, delta)
        st.S[h] = S
        o[h] = S.T @ qh

    # 6.-8. output gate, per-head RMSNorm, o_proj
    G = W("g_proj") @ u if c.full_rank_gate else W("g_b_proj") @ (W("g_a_proj") @ u)
    G = G.reshape(H, D)
    onw = ct.vector(p + "o_norm.weight", D)
    o = np.stack([rmsnorm(o[h], onw, c.eps) * sigmoid(G[h]) for h in range(H)])
    return W("o_proj") @ o.reshape(C)


def rotate(x, inv_freq, pos):
    """Rotary embedding on interleaved pairs: (x[2j], x[2j+1]) read as the complex
    number x[2j] + i x[2j+1], multiplied by e^(i pos inv_freq[j]) (docs/MODEL.md §5.0)."""
    z = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * pos * inv_freq)
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = z.real, z.imag
    return out


def mla_layer(ct, L, u, cache):
    """Multi-head latent attention, unabsorbed form (docs/MODEL.md §5); the rope
    channels rotated to each token's position when the config asks for it.
    cache: list of (c_kv normalized [kv_lora], k_rope [qk_rope]) per position."""
    c = ct.cfg
    nh, nope, rope, vh, kvl = c.n_heads, c.qk_nope, c.qk_rope, c.v_head, c.kv_lora
    p = f"model.layers.{L}.self_attn."
    W = lambda n: ct.tensor(p + n + ".weight")

    if c.q_lora > 0:
        q = W("q_b_proj") @ rmsnorm(W("q_a_proj") @ u, W("q_a_layernorm"), c.eps)
    else:
        q = W("q_proj") @ u
    q = q.reshape(nh, nope + rope)
    q_nope, q_rope = q[:, :nope], q[:, nope:]

    ckv = W("kv_a_proj_with_mqa") @ u
    k_rope = ckv[kvl:]
    if c.rope_inv_freq is not None:
        pos = len(cache)                   # this token's position
        q_rope = rotate(q_rope, c.rope_inv_freq, pos)
        k_rope = rotate(k_rope, c.rope_inv_freq, pos)
    cache.append((rmsnorm(ckv[:kvl], W("kv_a_layernorm"), c.eps), k_rope))
    Cl = np.stack([x[0] for x in cache])                     # [T, kvl]
    Kr = np.stack([x[1] for x in cache])                     # [T, rope]

    kvb = W("kv_b_proj").reshape(nh, nope + vh, kvl)
    K_nope = np.einsum("hdl,tl->htd", kvb[:, :nope], Cl)     # [nh, T, nope]
    V = np.einsum("hdl,tl->htd", kvb[:, nope:], Cl)          # [nh, T, vh]

    o = np.zeros((nh, vh), dtype=u.dtype)
    for h in range(nh):
        s = (K_nope[h] @ q_nope[h] + Kr @ q_rope[h]) * c.att_mul / np.sqrt(nope + rope)
        o[h] = softmax(s) @ V[h]
    o = o.reshape(nh * vh)
    if c.mla_output_gate:
        o = o * sigmoid(W("g_proj") @ u)
    return W("o_proj") @ o


def route(ct, L, u):
    """Sigmoid router; bias only for selection; ties -> lowest id (docs/MODEL.md §6).
    Returns (ids in selection order, weights, selection margin)."""
    c = ct.cfg
    p = f"model.layers.{L}.block_sparse_moe.gate."
    # Row-wise sums rather than a BLAS gemv, so that two identical router rows
    # give bit-identical scores (a gemv may treat tail rows differently) and
    # an exact tie is resolved by the tie rule, as in the engine.
    score = sigmoid((ct.tensor(p + "weight") * u[None, :]).sum(axis=1))
    bias = (ct.vector(p + "e_score_correction_bias", c.n_experts)
            if ct.has(p + "e_score_correction_bias") else np.zeros(c.n_experts, u.dtype))
    sel = score + bias
    if c.topk_group < c.n_group:
        # grouped top-k: keep the topk_group groups whose two best selection scores
        # sum highest (ties -> lowest group); the other groups' experts cannot be chosen
        per = c.n_experts // c.n_group
        gs = [sum(sorted(sel[g * per:(g + 1) * per], reverse=True)[:2])
              for g in range(c.n_group)]
        kept = sorted(range(c.n_group), key=lambda g: (-gs[g], g))[:c.topk_group]
        sel = np.array([sel[e] if e // per in kept else -np.inf
                        for e in range(c.n_experts)])
    order = sorted(range(c.n_experts), key=lambda e: (-sel[e], e))
    ids = order[:c.top_k]
    margin = (sel[order[c.top_k - 1]] - sel[order[c.top_k]]
              if c.top_k < c.n_experts else np.inf)
    w = score[ids]
    if c.renormalize and c.top_k > 1:
        w = w / (w.sum() + 1e-20)
    return ids, w * c.routed_scale, margin


def moe_block(ct, L, u, trace=None):
    """Routed experts (optionally in a latent space) + shared experts."""
    c = ct.cfg
    p = f"model.layers.{L}.block_sparse_moe."
    ids, w, margin = route(ct, L, u)
    if trace is not None:
        trace.append((L, ids, margin))

    xi = ct.tensor(p + "routed_expert_down_proj.weight") @ u if c.latent > 0 else u
    acc = np.zeros_like(xi)
    lut8 = ct.index_bits == 6 and not EXACT_VQ4P[0]
    for e, we in zip(ids, w):
        Wg, Wu, Wd = ct.expert_parts(L, e)
        h = glu_act(c, vq_matvec(Wg, xi, lut8), vq_matvec(Wu, xi, lut8))
        acc += we * vq_matvec(Wd, h, lut8)
    if c.latent > 0:
        if c.latent_norm:
            acc = rmsnorm(acc, ct.tensor(p + "routed_expert_norm.weight"), c.eps)
        out = ct.tensor(p + "routed_expert_up_proj.weight") @ acc
    else:
        out = acc

    s = p + "shared_experts."
    g, up = ct.tensor(s + "gate_proj.weight") @ u, ct.tensor(s + "up_proj.weight") @ u
    return out + ct.tensor(s + "down_proj.weight") @ glu_act(c, g, up)


def dense_ffn(ct, L, u):
    p = f"model.layers.{L}.mlp."
    g, up = ct.tensor(p + "gate_proj.weight") @ u, ct.tensor(p + "up_proj.weight") @ u
    return ct.tensor(p + "down_proj.weight") @ glu_act(ct.cfg, g, up)


# ---------------------------------------------------------------- the stack

class Model:
    def __init__(self, ct):
        self.ct, c = ct, ct.cfg
        self.pos = 0
        self.kda = {L: KDAState(c.kda_heads, c.kda_dim, c.conv_k, ct.dtype)
                    for L in range(c.n_layers) if L in c.kda_layers}
        self.mla = {L: [] for L in range(c.n_layers) if L not in c.kda_layers}
        self.trace = None                  # list to collect routing, or None
        self.hidden = None                 # list to collect x after each layer
        for L in range(c.n_layers):
            if self._is_moe(L):
                if c.n_experts <= 0:
                    raise ContainerError(f"layer {L} has a router but num_experts is 0")
                if L not in ct.banks:
                    raise ContainerError(f"manifest has no expert bank for MoE layer {L}")

    def _is_moe(self, L):
        # the engine's rule: MoE iff the router matrix is in the trunk index
        return self.ct.has(f"model.layers.{L}.block_sparse_moe.gate.weight")

    def attn(self, L, u):
        if L in self.kda:
            return kda_layer(self.ct, L, u, self.kda[L])
        return mla_layer(self.ct, L, u, self.mla[L])

    def ffn(self, L, u):
        if self._is_moe(L):
            return moe_block(self.ct, L, u, self.trace)
        return dense_ffn(self.ct, L, u)

    def step(self, token):
        """Feed one token at the next position; return the logits (float64)."""
        ct, c = self.ct, self.ct.cfg
        x = ct.embed_row(token)
        if self.hidden is not None:
            self.hidden.clear()
        T = lambda n: ct.tensor(n)
        if c.attn_res_block > 0:
            x = self._layers_attn_res(x)
        else:
            for L in range(c.n_layers):
                lw = f"model.layers.{L}."
                h = x + self.attn(L, rmsnorm(x, T(lw + "input_layernorm.weight"), c.eps))
                x = h + self.ffn(L, rmsnorm(h, T(lw + "post_attention_layernorm.weight"), c.eps))
                self._record(x)
        self.pos += 1
        return T("lm_head.weight") @ rmsnorm(x, T("model.norm.weight"), c.eps)

    def _record(self, x):
        if self.hidden is not None:
            self.hidden.append(x.copy())

    def _layers_attn_res(self, x):
        """The residual stream with Attention Residuals (docs/MODEL.md §3): a
        per-block partial sum p and a history B of block representations."""
        ct, c = self.ct, self.ct.cfg
        T = lambda n: ct.tensor(n)
        B = []
        for L in range(c.n_layers):
            lw = f"model.layers.{L}."
            p = x                                                   # a.
            if B:
                x = attn_res(B, p, T(lw + "self_attention_res_norm.weight"),
                             T(lw + "self_attention_res_proj.weight").reshape(-1), c.eps)
            if L % c.attn_res_block == 0:                           # b.
                B.append(p)
                p = None
            a = self.attn(L, rmsnorm(x, T(lw + "input_layernorm.weight"), c.eps))
            p = a if p is None else p + a                           # c.
            x = attn_res(B, p, T(lw + "mlp_res_norm.weight"),
                         T(lw + "mlp_res_proj.weight").reshape(-1), c.eps)
            f = self.ffn(L, rmsnorm(x, T(lw + "post_attention_layernorm.weight"), c.eps))
            p = p + f                                               # d.
            x = p
            self._record(x)
        if B:
            x = attn_res(B, x, T("model.output_attn_res_norm.weight"),
                         T("model.output_attn_res_proj.weight").reshape(-1), c.eps)
        return x
