#!/usr/bin/python3
"""waste_ref — independent float64 numerical reference for WASTE containers.

  /usr/bin/python3 scripts/reference/waste_ref.py MODEL_DIR --ids 1,2,3
      [--logits-out FILE] [--greedy N] [--json]

Feeds the ids one at a time from position 0 and computes the logits in
float64 (trunk tensors and routed experts dequantized to float64). The math
is docs/MODEL.md §1–§8, the container reading docs/FORMAT.md §1–§7 and §8.1.

  --logits-out FILE  last prompt position's logits, raw little-endian float64
  --greedy N         then continue greedily N tokens (argmax, ties -> lowest id)
  --json             print {"token_ids": [generated...], "top": [[id, logit] x10]}
  --dump-hidden FILE residual stream after every layer (last prompt position)
  --exact-vq4p       VQ4P experts: exact product, not the engine's int8 table
  --float32          same math in float32 (estimates the f32 noise floor)
  --trace            print each MoE layer's routing and selection margin to stderr
"""

import argparse
import json
import os
import sys

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

from container import Container, ContainerError  # noqa: E402
import model  # noqa: E402
from model import Model  # noqa: E402


def parse_ids(s):
    try:
        ids = [int(t) for t in s.replace(" ", "").split(",") if t != ""]
    except ValueError:
        raise SystemExit(f"waste_ref: --ids must be comma-separated integers, got {s!r}")
    if not ids:
        raise SystemExit("waste_ref: --ids is empty")
    return ids


def argmax_lowest(logits):
    """argmax; np.argmax already returns the first (lowest) index on ties."""
    return int(np.argmax(logits))


def top10(logits):
    order = sorted(range(len(logits)), key=lambda i: (-logits[i], i))[:10]
    return [[i, float(logits[i])] for i in order]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="container directory (<name>.waste/)")
    ap.add_argument("--ids", required=True, help="comma-separated token ids")
    ap.add_argument("--logits-out", metavar="FILE")
    ap.add_argument("--greedy", type=int, default=0, metavar="N")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--trace", action="store_true")
    ap.add_argument("--dump-hidden", metavar="FILE",
                    help="write the residual stream after every layer of the last "
                         "prompt position, float64 [layers, hidden] (cf. the "
                         "engine's WASTE_DUMP_HIDDEN, float32)")
    ap.add_argument("--exact-vq4p", action="store_true",
                    help="VQ4P experts: exact dequantized product instead of the "
                         "engine's int8 lookup table (docs/FORMAT.md §8.3)")
    ap.add_argument("--float32", action="store_true",
                    help="run the same math in float32 instead of float64: the "
                         "difference between the two estimates the float noise "
                         "an f32 engine can show on this container and prompt")
    ap.add_argument("--no-verify", action="store_true",
                    help="skip the CRC-32 check of expert records")
    a = ap.parse_args(argv)
    if a.greedy < 0:
        ap.error("--greedy must be >= 0")
    ids = parse_ids(a.ids)

    try:
        ct = Container(a.model, verify_crc=not a.no_verify,
                       dtype=np.float32 if a.float32 else np.float64)
        vocab = ct.cfg.vocab
        for t in ids:
            if not 0 <= t < vocab:
                raise ContainerError(f"token id {t} outside the vocabulary (0..{vocab - 1})")
        model.EXACT_VQ4P[0] = a.exact_vq4p
        m = Model(ct)
        if a.trace:
            m.trace = []
        if a.dump_hidden:
            m.hidden = []
        logits = None
        for t in ids:
            logits = m.step(t)
            _print_trace(m)
        prompt_logits = logits
        if a.dump_hidden:
            with open(a.dump_hidden, "wb") as f:
                f.write(np.asarray(m.hidden, dtype="<f8").tobytes())
            m.hidden = None
        if a.logits_out:
            with open(a.logits_out, "wb") as f:
                f.write(np.asarray(prompt_logits, dtype="<f8").tobytes())
        generated = []
        for _ in range(a.greedy):
            nxt = argmax_lowest(logits)
            generated.append(nxt)
            logits = m.step(nxt)
            _print_trace(m)
    except ContainerError as e:
        print(f"waste_ref: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"waste_ref: {e}", file=sys.stderr)
        return 1

    if a.json:
        print(json.dumps({"token_ids": generated, "top": top10(prompt_logits)}))
    else:
        if a.greedy:
            print(",".join(str(t) for t in generated))
        elif not a.logits_out:
            for i, v in top10(prompt_logits):
                print(f"{i:8d} {v:+.9f}")
    return 0


def _print_trace(m):
    if m.trace is None:
        return
    for L, ids, margin in m.trace:
        print(f"pos {m.pos - 1} layer {L}: experts {ids} margin {margin:.3e}",
              file=sys.stderr)
    m.trace.clear()


if __name__ == "__main__":
    sys.exit(main())
