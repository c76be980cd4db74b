"""Reading a WASTE container v0 into float64 numpy arrays.

Written from docs/FORMAT.md §1–§7 (container v0) and §8.1 (VQ
reconstruction). Everything here decodes to float64; nothing is kept in the
engine's quantized form.

  Container(path)                   open and validate manifest.json
  .cfg                              Config (the keys the engine reads)
  .has(name) / .tensor(name)        trunk tensor, dequantized, logical shape
  .stored_tensor(full_name)         the same by stored name (vision tower, projector)
  .embed_row(token)                 one row of embed_tokens
  .expert(layer, e)                 (gate, up, down) float64 matrices
"""

import json
import os
import struct
import zlib

import numpy as np


class ContainerError(Exception):
    """A missing file, an unsupported format, or a manifest we refuse."""


# ---------------------------------------------------------------- f16 decode
#
# Two decoders, on purpose (docs/FORMAT.md §3.4):
#   trunk / expert-row scales: subnormals decode as mantissa * 2^-24;
#   codebook values:           subnormals flush to signed zero.
# In both, exponent 31 is NOT inf/NaN: it decodes like any other exponent,
# 2^16 * (1 + m/1024). numpy's float16 would give inf/nan there, so we decode
# by hand.

def _f16_decode(h, flush_subnormals):
    h = np.asarray(h, dtype=np.uint16).astype(np.int64)
    sign = np.where(h >> 15, -1.0, 1.0)
    e = (h >> 10) & 0x1F
    m = (h & 0x3FF).astype(np.float64)
    normal = (1.0 + m / 1024.0) * np.exp2(e.astype(np.float64) - 15.0)
    sub = np.zeros_like(m) if flush_subnormals else m * 2.0 ** -24
    return sign * np.where(e == 0, sub, normal)


def f16_scale(h):
    """f16 as the engine decodes trunk scales and expert row scales."""
    return _f16_decode(h, flush_subnormals=False)


def f16_codebook(h):
    """f16 as the engine decodes codebook values (subnormals -> +-0)."""
    return _f16_decode(h, flush_subnormals=True)


# ---------------------------------------------------------------- config

def _present(d, key):
    return isinstance(d, dict) and key in d


class Config:
    """The config keys the engine reads, with its defaults (docs/FORMAT.md §2).

    QUIRK kept on purpose: moe_renormalize, latent_moe_use_norm,
    mla_use_output_gate and linear_attn_config.use_full_rank_gate are
    switched on by the key's *presence*, whatever its value.
    """

    def __init__(self, c):
        def num(key, default, src=c):
            v = src.get(key, default) if isinstance(src, dict) else default
            return default if v is None else v

        self.n_layers = int(num("num_hidden_layers", 0))
        self.hidden = int(num("hidden_size", 0))
        self.n_experts = int(num("num_experts", 0))
        self.top_k = int(num("num_experts_per_token", 0))
        self.moe_inter = int(num("moe_intermediate_size", 0))
        self.dense_inter = int(num("intermediate_size", 0))
        self.n_shared = int(num("num_shared_experts", 0))
        self.first_dense = int(num("first_k_dense_replace", 0))
        self.vocab = int(num("vocab_size", 0))
        eos = num("eos_token_id", 0)
        self.eos = int(eos) if isinstance(eos, (int, float)) else 0
        self.n_heads = int(num("num_attention_heads", 0))
        self.kv_lora = int(num("kv_lora_rank", 0))
        self.q_lora = int(num("q_lora_rank", 0))          # null -> 0
        self.qk_nope = int(num("qk_nope_head_dim", 0))
        self.qk_rope = int(num("qk_rope_head_dim", 0))
        self.v_head = int(num("v_head_dim", 0))
        self.eps = float(num("rms_norm_eps", 1e-5))
        self.routed_scale = float(num("routed_scaling_factor", 1.0))
        self.renormalize = _present(c, "moe_renormalize")
        self.latent = int(num("routed_expert_hidden_size", 0))
        self.latent_norm = _present(c, "latent_moe_use_norm")
        self.attn_res_block = int(num("attn_res_block_size", 0))
        self.mla_output_gate = _present(c, "mla_use_output_gate")
        self._read_rope(c)
        # grouped top-k, in DeepSeek's spelling or Kimi's
        self.n_group = int(num("n_group", 0) or num("num_expert_group", 1))
        self.topk_group = int(num("topk_group", self.n_group))
        self.situ = c.get("hidden_act") == "situ"
        self.situ_beta = float(num("activation_situ_beta", 1.0))
        self.situ_linear_beta = float(num("activation_situ_linear_beta", 0.0))
        lac = c.get("linear_attn_config") or {}
        self.full_rank_gate = _present(lac, "use_full_rank_gate")
        self.gate_lower_bound = float(num("gate_lower_bound", 0.0, lac))
        self.kda_heads = int(num("num_heads", 0, lac))
        self.kda_dim = int(num("head_dim", 0, lac))
        self.conv_k = int(num("short_conv_kernel_size", 4, lac))
        # 1-based in the config; every layer not listed is MLA
        self.kda_layers = {int(v) - 1 for v in (lac.get("kda_layers") or [])}
        self._check()

    def _read_rope(self, c):
        """MLA rotary (docs/MODEL.md §5.0): on unless mla_use_nope is true.
        Sets rope_inv_freq (one per pair; None = no rotation) and att_mul."""
        self.rope_inv_freq, self.att_mul = None, 1.0
        nope = c.get("mla_use_nope")
        if nope is not None and not isinstance(nope, bool):
            raise ContainerError("mla_use_nope must be true or false")
        if nope or self.qk_rope <= 0:
            return
        dim = self.qk_rope
        theta = float(c.get("rope_theta") or 10000.0)
        j = np.arange(dim // 2, dtype=np.float64)
        base_freq = theta ** (-2.0 * j / dim)
        self.rope_inv_freq = base_freq
        rs = c.get("rope_scaling") or {}
        if not rs:
            return
        kind = rs.get("type", rs.get("rope_type"))
        if kind != "yarn":
            raise ContainerError(f"rope_scaling type {kind!r} is not implemented")
        s = float(rs.get("factor", 1.0))
        if s <= 1.0:
            return
        if float(rs.get("mscale", 1.0)) != float(rs.get("mscale_all_dim", 0.0)):
            raise ContainerError("rope_scaling mscale != mscale_all_dim is not implemented")
        L0 = float(rs.get("original_max_position_embeddings", 4096))

        # Pair j completes L0 * f_j / (2 pi) turns over the original context; a pair that
        # turns more than beta_fast times keeps its frequency, one that turns fewer than
        # beta_slow times is slowed by the factor, and the pairs between blend linearly.
        def pair_at(turns):
            return dim * np.log(L0 / (turns * 2 * np.pi)) / (2 * np.log(theta))
        lo = max(0.0, np.floor(pair_at(float(rs.get("beta_fast", 32.0)))))
        hi = min(dim - 1.0, np.ceil(pair_at(float(rs.get("beta_slow", 1.0)))))
        if hi == lo:
            hi += 0.001
        slowed = np.clip((j - lo) / (hi - lo), 0.0, 1.0)    # 0 keeps, 1 divides by s
        self.rope_inv_freq = base_freq * (1.0 - slowed) + base_freq / s * slowed
        m = float(rs.get("mscale_all_dim", 0.0))
        if m:
            self.att_mul = (0.1 * m * np.log(s) + 1.0) ** 2

    def _check(self):
        def need(ok, what):
            if not ok:
                raise ContainerError("manifest config out of range: " + what)
        need(1 <= self.n_layers <= 128, "num_hidden_layers must be 1..128")
        need(1 <= self.hidden <= 1 << 20, "hidden_size must be 1..2^20")
        need(1 <= self.vocab <= 1 << 24, "vocab_size must be 1..2^24")
        need(0 < self.eps < 1, "rms_norm_eps must be in (0, 1)")
        if self.n_experts > 0:
            need(1 <= self.top_k <= min(self.n_experts, 64),
                 "num_experts_per_token must be 1..min(num_experts, 64)")
            need(self.moe_inter >= 1, "moe_intermediate_size must be >= 1")
        kda_any = any(L < self.n_layers for L in self.kda_layers)
        if kda_any:
            need(self.kda_heads >= 1 and self.kda_dim >= 1,
                 "linear_attn_config num_heads/head_dim must be >= 1")
            need(1 <= self.conv_k <= 64, "short_conv_kernel_size must be 1..64")
        if any(L not in self.kda_layers for L in range(self.n_layers)):
            need(self.n_heads >= 1 and self.kv_lora >= 1 and self.qk_nope >= 1
                 and self.qk_rope >= 1 and self.v_head >= 1,
                 "MLA dims must be >= 1 when a layer is MLA")
        need(0 <= self.first_dense <= self.n_layers, "first_k_dense_replace")
        if self.n_experts > 0:
            need(self.n_experts % self.n_group == 0 and 1 <= self.topk_group <= self.n_group,
                 "n_group must divide num_experts and topk_group lie in 1..n_group")
        need(0 <= self.attn_res_block <= self.n_layers, "attn_res_block_size")


# ---------------------------------------------------------------- container

FMT_F32, FMT_F16, FMT_Q8G, FMT_Q4G, FMT_Q3G = 0, 1, 2, 3, 7
EXPERT_MAGIC = 0x50584557          # "WEXP"
EXPERT_HDR = struct.Struct("<IHHBBHHHIIIIIIII")   # 48 bytes
FMT_VQ3R, FMT_VQ2R, FMT_VQ4P = 4, 5, 8


def _read_file(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise ContainerError(f"missing file: {path}") from None
    except OSError as e:
        raise ContainerError(f"cannot read {path}: {e}") from None


class VQMatrix:
    """A residual-VQ matrix: W[r][8v+d] = scale_r * sum_s books[s][idx[r, v, s]][d]."""

    def __init__(self, idx, scales, books, packed):
        self.idx, self.scales, self.books, self.packed = idx, scales, books, packed

    def dense(self):
        M, nv, S = self.idx.shape
        W = np.zeros((M, nv, self.books.shape[2]), dtype=self.books.dtype)
        for s in range(S):
            W += self.books[s][self.idx[:, :, s]]
        return W.reshape(M, -1) * self.scales[:, None]


class Container:
    def __init__(self, path, verify_crc=True, dtype=np.float64):
        self.path = path
        # float64 is the reference. float32 (--float32) repeats the same math in
        # single precision, to estimate how far an f32 engine may drift.
        self.dtype = np.dtype(dtype)
        if not os.path.isdir(path):
            raise ContainerError(f"not a model directory: {path}")
        try:
            man = json.loads(_read_file(os.path.join(path, "manifest.json")))
        except json.JSONDecodeError as e:
            raise ContainerError(f"manifest.json is not valid JSON: {e}") from None
        if "format_version" not in man:
            raise ContainerError("manifest: format version missing")
        if man["format_version"] != 0:
            raise ContainerError(
                f"manifest: format version mismatch ({man['format_version']!r}, this reads 0)")
        cfg = man.get("config")
        if not isinstance(cfg, dict):
            raise ContainerError("manifest: no config object")
        self.prefix = man.get("tensor_prefix") or ""
        if isinstance(cfg.get("text_config"), dict):   # raw nested HF config
            cfg = cfg["text_config"]
            self.prefix = self.prefix or "language_model."
        self.cfg = Config(cfg)
        self.verify_crc = verify_crc

        eq = man.get("expert_quant") or {}
        self.stages = int(eq.get("stages", 3))
        self.vec_dim = int(eq.get("vec_dim", 8))
        self.entries = int(eq.get("entries", 256))
        self.index_bits = int(eq.get("index_bits", 8))
        if not (1 <= self.stages <= 8 and 1 <= self.vec_dim <= 64
                and 1 <= self.entries <= 256):
            raise ContainerError("expert_quant: stages/vec_dim/entries out of range")
        if self.index_bits not in (8, 6) or (
                self.index_bits == 6 and (self.stages, self.entries) != (4, 64)):
            raise ContainerError(
                f"expert_quant: unsupported index_bits {self.index_bits} "
                "(8, or 6 with 4 stages x 64 entries)")

        self.trunk_path = os.path.join(path, "trunk.bin")
        if not os.path.isfile(self.trunk_path):
            raise ContainerError(f"missing file: {self.trunk_path}")
        self.trunk = np.memmap(self.trunk_path, dtype=np.uint8, mode="r")
        self.index = {}
        for t in man.get("trunk") or []:
            self.index[t["name"]] = t
        self.banks = {int(k): v for k, v in (man.get("layers") or {}).items()}
        self._check_files()
        self._books = None
        self._cache = {}          # trunk tensors, dequantized
        self._experts = {}        # (layer, expert) -> [VQMatrix] x 3

    def _check_files(self):
        """Fail at open, not halfway through a forward pass."""
        for name, t in self.index.items():
            if self.prefix and not name.startswith(self.prefix):
                continue                      # vision tower etc.: never read
            if int(t.get("fmt", 0)) not in (FMT_F32, FMT_Q8G, FMT_Q4G, FMT_Q3G):
                raise ContainerError(f"{name}: unsupported trunk format {t.get('fmt')} "
                                     "(supported: 0 F32, 2 Q8G, 3 Q4G, 7 Q3G)")
        if self.banks:
            cb = os.path.join(self.path, "codebooks.bin")
            if not os.path.isfile(cb):
                raise ContainerError(f"missing file: {cb}")
        for L, bank in sorted(self.banks.items()):
            path = os.path.join(self.path, bank.get("file", f"experts-L{L}.bin"))
            if not os.path.isfile(path):
                raise ContainerError(f"missing file: {path}")

    # ---- trunk ----------------------------------------------------------

    def full(self, name):
        return self.prefix + name

    def has(self, name):
        return self.full(name) in self.index

    def entry(self, name):
        t = self.index.get(self.full(name))
        if t is None:
            raise ContainerError(f"trunk tensor missing: {self.full(name)}")
        return t

    def shape(self, name):
        return [int(s) for s in self.entry(name)["shape"]]

    def _bytes(self, off, n, what):
        if off < 0 or off + n > len(self.trunk):
            raise ContainerError(f"{what}: bytes [{off}, {off + n}) outside trunk.bin")
        return np.asarray(self.trunk[off:off + n])

    def _rows(self, t, row0, nrows):
        """Dequantize rows [row0, row0+nrows) of a trunk tensor -> [nrows, N]."""
        name, fmt = t["name"], int(t["fmt"])
        shape = [int(s) for s in t["shape"]]
        N = shape[-1]
        off = int(t["off"])
        if fmt == FMT_F32:
            raw = self._bytes(off + 4 * row0 * N, 4 * nrows * N, name)
            return raw.view("<f4").astype(np.float64).reshape(nrows, N)
        if fmt not in (FMT_Q8G, FMT_Q4G, FMT_Q3G):
            raise ContainerError(f"{name}: unsupported trunk format {fmt} "
                                 "(supported: 0 F32, 2 Q8G, 3 Q4G, 7 Q3G)")
        g = int(t.get("group", 128))
        if g < 1:
            raise ContainerError(f"{name}: group must be >= 1")
        ng = (N + g - 1) // g
        width = ng * g                         # each row padded to whole groups
        if fmt == FMT_Q8G:
            rowbytes = width
        elif fmt == FMT_Q4G:
            rowbytes = width // 2
        else:
            rowbytes = (width * 3 + 7) // 8 + 1    # bitstream + guard byte
        raw = self._bytes(off + row0 * rowbytes, nrows * rowbytes, name)
        raw = raw.reshape(nrows, rowbytes)
        if fmt == FMT_Q8G:
            q = raw.view(np.int8).astype(np.float64)
        elif fmt == FMT_Q4G:
            q = np.empty((nrows, width), dtype=np.float64)
            q[:, 0::2] = (raw & 0x0F).astype(np.float64) - 8.0   # low nibble = even
            q[:, 1::2] = (raw >> 4).astype(np.float64) - 8.0
        else:
            bits = np.unpackbits(raw, axis=1, bitorder="little")[:, :3 * width]
            b = bits.reshape(nrows, width, 3).astype(np.int64)
            q = (b[:, :, 0] | (b[:, :, 1] << 1) | (b[:, :, 2] << 2)).astype(np.float64) - 4.0
        soff = int(t["scale_off"])
        sraw = self._bytes(soff + 2 * row0 * ng, 2 * nrows * ng, name + " scales")
        s = f16_scale(sraw.view("<u2")).reshape(nrows, ng)
        w = (q.reshape(nrows, ng, g) * s[:, :, None]).reshape(nrows, width)
        return w[:, :N]

    def tensor(self, name):
        """Whole trunk tensor, float64, in its manifest shape."""
        return self.stored_tensor(self.full(name))

    def stored_tensor(self, key):
        """A trunk tensor by its name as stored, without the text prefix added:
        the vision tower and projector (vision_tower.*, mm_projector.*) live outside it."""
        if key not in self._cache:
            t = self.index.get(key)
            if t is None:
                raise ContainerError(f"trunk tensor missing: {key}")
            shape = [int(s) for s in t["shape"]]
            rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
            self._cache[key] = self._rows(t, 0, rows).reshape(shape).astype(self.dtype)
        return self._cache[key]

    def vector(self, name, n):
        """The first n values of a small tensor (A_log, dt_bias, conv...)."""
        v = self.tensor(name).reshape(-1)
        if v.size < n:
            raise ContainerError(f"{self.full(name)}: {v.size} values, need {n}")
        return v[:n]

    def embed_row(self, token):
        t = self.entry("model.embed_tokens.weight")
        vocab = int(t["shape"][0])
        if not 0 <= token < vocab:
            raise ContainerError(f"token id {token} outside the vocabulary (0..{vocab - 1})")
        return self._rows(t, token, 1)[0].astype(self.dtype)

    # ---- codebooks and experts -----------------------------------------

    def books(self):
        """All codebooks, [n_books, entries, vec_dim] float64, flushed f16."""
        if self._books is None:
            raw = _read_file(os.path.join(self.path, "codebooks.bin"))
            rec = 16 + self.entries * self.vec_dim * 2
            n = len(raw) // rec
            a = np.frombuffer(raw, dtype=np.uint8, count=n * rec).reshape(n, rec)
            body = np.ascontiguousarray(a[:, 16:]).view("<u2")
            self._books = f16_codebook(body).reshape(n, self.entries, self.vec_dim)
        return self._books

    def expert_dims(self):
        """(rows, cols) of gate, up, down."""
        c = self.cfg
        lat = c.latent if c.latent > 0 else c.hidden
        return [(c.moe_inter, lat), (c.moe_inter, lat), (lat, c.moe_inter)]

    def _record(self, layer, e):
        bank = self.banks.get(layer)
        if bank is None:
            raise ContainerError(f"manifest has no expert bank for layer {layer}")
        n = int(bank["experts"])
        if n != self.cfg.n_experts or int(bank["bytes"]) % n:
            raise ContainerError(f"layer {layer}: bank size/experts inconsistent")
        stride = int(bank["bytes"]) // n
        path = os.path.join(self.path, bank["file"])
        try:
            with open(path, "rb") as f:
                f.seek(e * stride)
                rec = f.read(stride)
        except FileNotFoundError:
            raise ContainerError(f"missing file: {path}") from None
        if len(rec) != stride:
            raise ContainerError(f"expert {e} of layer {layer}: short read")
        return rec, stride

    def expert_parts(self, layer, e):
        """One routed expert as stored: for gate, up, down a VQMatrix
        (indices [M, nv, S], per-row f16 scales, the S codebooks)."""
        if (layer, e) in self._experts:
            return self._experts[(layer, e)]
        rec, stride = self._record(layer, e)
        (magic, hl, he, fmt, _flags, cb, lowrank, _r0, blocks,
         g_off, u_off, d_off, s_off, crc, _r1, _r2) = EXPERT_HDR.unpack_from(rec)
        where = f"expert {e} of layer {layer}"
        if magic != EXPERT_MAGIC or hl != layer or he != e or blocks * 4096 != stride:
            raise ContainerError(f"{where}: record header is not what the bank index describes")
        want = (FMT_VQ4P,) if self.index_bits == 6 else (FMT_VQ3R, FMT_VQ2R)
        if fmt not in want:
            raise ContainerError(f"{where}: record fmt {fmt} does not match "
                                 f"index_bits {self.index_bits}")
        if lowrank != 0:
            raise ContainerError(f"{where}: lowrank_id must be 0 in v0")
        S = self.stages
        books = self.books()
        # the record's codebook_id (= the layer's base) is what the engine uses
        if cb + 3 * S > len(books):
            raise ContainerError(f"{where}: codebook_id {cb} + 3*{S} > {len(books)} books")
        dims = self.expert_dims()
        if not (g_off == 48 < u_off < d_off < s_off <= stride):
            raise ContainerError(f"{where}: payload offsets out of order")
        n_scales = sum(M for M, _ in dims)
        if s_off + 2 * n_scales > stride:
            raise ContainerError(f"{where}: scales run past the record")
        if self.verify_crc and zlib.crc32(rec[48:s_off + 2 * n_scales]) != crc:
            raise ContainerError(f"{where}: checksum mismatch")
        scales = f16_scale(np.frombuffer(rec, dtype="<u2", count=n_scales, offset=s_off))
        parts, r0 = [], 0
        for k, (off, (M, N)) in enumerate(zip((g_off, u_off, d_off), dims)):
            if N % self.vec_dim:
                raise ContainerError(f"{where}: width {N} not a multiple of vec_dim")
            idx = self._indices(rec, off, M, N)               # [M, nv, S]
            if idx.size and idx.max() >= self.entries:
                raise ContainerError(f"{where}: index {idx.max()} >= {self.entries} entries")
            parts.append(VQMatrix(idx, scales[r0:r0 + M].astype(self.dtype),
                                  books[cb + k * S:cb + (k + 1) * S].astype(self.dtype),
                                  packed=self.index_bits == 6))
            r0 += M
        if len(self._experts) >= 1024:
            self._experts.clear()
        self._experts[(layer, e)] = parts
        return parts

    def expert(self, layer, e):
        """(gate, up, down) dequantized to float64 (docs/FORMAT.md §8.1)."""
        return [p.dense() for p in self.expert_parts(layer, e)]

    def _indices(self, rec, off, M, N):
        """Undo the 64-row index blocking -> idx[row, vector, stage].
        Byte ((r//64 * nv + v) * 64 + r%64) * R starts the run of (r, v)."""
        nv = N // self.vec_dim
        nb = (M + 63) // 64
        R = 3 if self.index_bits == 6 else self.stages
        n = nb * nv * 64 * R
        a = np.frombuffer(rec, dtype=np.uint8, count=n, offset=off)
        a = a.reshape(nb, nv, 64, R).transpose(0, 2, 1, 3).reshape(nb * 64, nv, R)[:M]
        if self.index_bits == 8:
            return a.astype(np.int64)
        b0, b1, b2 = (a[:, :, i].astype(np.int64) for i in range(3))
        return np.stack([b0 & 63,
                         ((b0 >> 6) | (b1 << 2)) & 63,
                         ((b1 >> 4) | (b2 << 4)) & 63,
                         b2 >> 2], axis=-1)
