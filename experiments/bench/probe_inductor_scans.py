"""Which prefix-scan shapes Inductor compiles on this device: cumsum of an int64 or float64 row, plain or
reversed (flip -> cumsum -> flip, the suffix-sum idiom of the optimal i.i.d. step), at the test's shape
[8, 400] and the serving shape [1, 262 144]. torch 2.11's Triton code generator failed on a split scan
of a flipped int64 input (an InductorError in codegen); this records, per variant, "ok" or the error,
so the compiled steps can avoid what fails.

    python experiments/bench/probe_inductor_scans.py --out experiments/bench/out/inductor_scans
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import torch

__all__ = ["main"]


def _variants():
    def plain(x):
        return torch.cumsum(x, 1)

    def reversed_(x):
        return torch.flip(torch.cumsum(torch.flip(x, [1]), 1), [1])

    def suffix_by_total(x):
        return x.sum(1, keepdim=True) - torch.cumsum(x, 1) + x

    return {"plain": plain, "flipped": reversed_, "total_minus_prefix": suffix_by_total}


def probe(device: str) -> list[dict]:
    rows = []
    for shape in ((8, 400), (1, 262_144)):
        for dtype in (torch.int64, torch.float64):
            x = (torch.rand(shape, device=device) < 0.3).to(dtype)
            for name, fn in _variants().items():
                torch._dynamo.reset()
                try:
                    got = torch.compile(fn, fullgraph=True, dynamic=False)(x)
                    ok = bool(torch.equal(got, fn(x))) if dtype == torch.int64 else bool(torch.allclose(got, fn(x)))
                    status = "ok" if ok else "wrong values"
                except Exception as exc:  # noqa: BLE001 - the probe records every failure
                    status = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                rows.append({"shape": list(shape), "dtype": str(dtype).replace("torch.", ""), "variant": name, "status": status})
                print(rows[-1], flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="experiments/bench/out/inductor_scans")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        rev = ""
    meta = {
        "command": " ".join(["python", *sys.argv]),
        "revision": rev,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
    }
    rows = probe(args.device)
    with open(os.path.join(args.out, "inductor_scans.json"), "w") as fh:
        json.dump({"meta": meta, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
