#!/usr/bin/python3
"""compare_logits.py — how far apart are two raw logits files?

  /usr/bin/python3 scripts/reference/compare_logits.py REF.f64 OTHER.f32 [--tol 1e-4]

Each file is raw little-endian float32 or float64; the type is taken from the
extension (.f32 / .f64) or from --a-dtype/--b-dtype. Prints max |d|, the logit
scale (max |ref|), their ratio, both argmaxes and the top-10 overlap; exits 1
when the ratio exceeds --tol or the argmaxes differ.
"""

import argparse
import sys

import numpy as np


def load(path, dtype):
    if dtype is None:
        dtype = "f4" if path.endswith(".f32") else "f8" if path.endswith(".f64") else None
    if dtype is None:
        raise SystemExit(f"compare_logits: cannot tell the dtype of {path}; pass --a-dtype/--b-dtype")
    return np.fromfile(path, dtype="<" + dtype).astype(np.float64)


def top(x, k=10):
    return sorted(range(len(x)), key=lambda i: (-x[i], i))[:k]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ref")
    ap.add_argument("other")
    ap.add_argument("--a-dtype", choices=("f4", "f8"))
    ap.add_argument("--b-dtype", choices=("f4", "f8"))
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    r, o = load(a.ref, a.a_dtype), load(a.other, a.b_dtype)
    if r.shape != o.shape:
        print(f"compare_logits: sizes differ: {r.size} vs {o.size}", file=sys.stderr)
        return 1
    d = np.abs(r - o).max()
    scale = np.abs(r).max()
    rel = d / scale if scale > 0 else d
    overlap = len(set(top(r)) & set(top(o)))
    print(f"max|d| {d:.3e}  scale {scale:.4f}  rel {rel:.3e}  argmax {top(r, 1)[0]}/{top(o, 1)[0]}"
          f"  top-10 overlap {overlap}/10")
    return 0 if rel <= a.tol and top(r, 1) == top(o, 1) else 1


if __name__ == "__main__":
    sys.exit(main())
