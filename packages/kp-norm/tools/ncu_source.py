"""Where a norm kernel's warps wait, per SASS instruction: Nsight Compute's warp-state sampling.

    python packages/kp-norm/tools/ncu_source.py run OP HIDDEN DIR [--kernel REGEX] [--csv out.csv]   (GPU machine)
    python packages/kp-norm/tools/ncu_source.py show file.csv [--top 30]                             (anywhere)

`run` profiles the 3rd launch of the kernel matching REGEX (default: fwd_ring for fwd, bwd_ring for
bwd) in one `kp_norm` call (bf16, 256 MiB of x, backend cuda) with `--page source --print-source
sass --csv`, keeps the CSV and prints the summary that `show` prints: the share of stall samples
per reason, then the instructions with the most samples, each with its two main reasons. A
long-scoreboard wait sits on the first instruction that uses a global/local load's result, a
barrier wait on the branch after BAR.SYNC. Clocks are left as they are (--clock-control none).
"""
from __future__ import annotations

import argparse
import collections
import csv
import subprocess
import sys
import tempfile

_DRIVER = """
import sys, torch, kp_norm
op, hidden, direction = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = (256 << 20) // (hidden * 2)
g = direction == "bwd"
x = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=g)
w = torch.randn(hidden, device="cuda", dtype=torch.bfloat16, requires_grad=g)
b = torch.randn(hidden, device="cuda", dtype=torch.bfloat16, requires_grad=g)
fn = (lambda: kp_norm.rms_norm(x, w, backend="cuda")) if op == "rms" else (lambda: kp_norm.layer_norm(x, w, b, backend="cuda"))
for _ in range(4):
    y = fn()
    if g:
        y.backward(torch.ones_like(y))
torch.cuda.synchronize()
"""


def _rows(path: str):
    lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"Address"')), None)
    if start is None:
        sys.exit(f"{path}: no source table (did ncu fail? its messages are in the file)")
    table = list(csv.reader(lines[start:]))
    header = table[0]
    return header, [r for r in table[1:] if len(r) == len(header)]


def show(path: str, top: int = 30) -> None:
    header, rows = _rows(path)
    ix = {h: i for i, h in enumerate(header)}
    samples = "Warp Stall Sampling (All Samples)"
    total = sum(int(r[ix[samples]] or 0) for r in rows) or 1
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    by_reason = collections.Counter()
    for r in rows:
        for h in reasons:
            by_reason[h] += int(r[ix[h]] or 0)
    print(f"{len(rows)} instructions, {total} samples")
    print("by reason: " + ", ".join(f"{k[6:]} {100 * v / total:.1f}%" for k, v in by_reason.most_common(8)))
    hot = sorted(range(len(rows)), key=lambda i: -int(rows[i][ix[samples]] or 0))[:top]
    for i in sorted(hot):
        r = rows[i]
        main = sorted(((int(r[ix[h]] or 0), h[6:]) for h in reasons), reverse=True)[:2]
        why = ", ".join(f"{name} {n}" for n, name in main if n)
        print(f"{i:5d} {100 * int(r[ix[samples]] or 0) / total:5.1f}%  {r[ix['Source']].strip()[:64]:64s} {why}")


def run(op: str, hidden: int, direction: str, kernel: str | None, out: str | None) -> None:
    kernel = kernel or f"{direction}_ring"
    if out is None:
        with tempfile.NamedTemporaryFile(suffix=".csv", delete=False) as f:
            out = f.name
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(_DRIVER)
    cmd = ["ncu", "--clock-control", "none", "--target-processes", "all", "--kernel-name", f"regex:{kernel}",
           "--launch-skip", "2", "--launch-count", "1", "--section", "SourceCounters", "--section",
           "WarpStateStats", "--page", "source", "--print-source", "sass", "--csv",
           sys.executable, f.name, op, str(hidden), direction]
    with open(out, "w") as fh:
        subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, check=False)
    print(f"source table: {out}")
    show(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("op", choices=("rms", "layer"))
    r.add_argument("hidden", type=int)
    r.add_argument("direction", choices=("fwd", "bwd"))
    r.add_argument("--kernel", default=None, help="regex of the kernel name")
    r.add_argument("--csv", default=None, help="where to keep ncu's table")
    s = sub.add_parser("show")
    s.add_argument("csv")
    s.add_argument("--top", type=int, default=30)
    a = p.parse_args(argv)
    if a.cmd == "run":
        run(a.op, a.hidden, a.direction, a.kernel, a.csv)
    else:
        show(a.csv, a.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
