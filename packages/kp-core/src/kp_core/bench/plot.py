"""One PNG per op: x = the swept parameter, y = % of the ceiling (or time per call when the op
has no ceiling, e.g. launch-bound sizes), one line per impl."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from . import metrics


def plot_op(result: dict[str, Any], op: str, path: Path) -> Path | None:
    """Write the plot of `op`; None when there is nothing to plot or matplotlib is missing."""
    rows = [r for r in result["rows"] if r["op"] == op and r["status"] == "ok"]
    if not rows:
        return None
    try:
        from matplotlib.figure import Figure  # no pyplot: no global state, no display needed
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        return None
    key = metrics.sweep_key(rows)
    ceiling_name = next((r["ceiling"] for r in rows if r["ceiling"]), None)
    with_pct = [r for r in rows if r["pct_of_ceiling"] is not None]
    use_pct = ceiling_name is not None and bool(with_pct)
    if use_pct:
        rows = with_pct
    values = list(dict.fromkeys(r["params"].get(key) for r in rows))
    numeric = all(isinstance(v, (int, float)) and v > 0 for v in values)
    pos = {v: v if numeric else i for i, v in enumerate(values)}
    # Colours by the impl's position in the whole run, so an impl keeps its colour in every plot.
    order = list(dict.fromkeys(r["impl"] for r in result["rows"]))

    fig = Figure(figsize=(7.5, 4.5), layout="constrained")
    ax = fig.add_subplot()
    for impl in dict.fromkeys(r["impl"] for r in rows):
        mine = sorted((r for r in rows if r["impl"] == impl), key=lambda r: pos[r["params"].get(key)])
        xs = [pos[r["params"].get(key)] for r in mine]
        style = dict(color=f"C{order.index(impl) % 10}", marker="o", markersize=4,
                     linewidth=2.2 if mine[0]["kp"] else 1.4)
        sustained = [(x, r) for x, r in zip(xs, mine) if r.get("sustained_ms")]
        if use_pct:
            ax.plot(xs, [r["pct_of_ceiling"] for r in mine], label=impl, **style)
            if sustained:  # the same work at the sustained time per call
                ax.plot(*zip(*[(x, r["pct_of_ceiling"] * r["ms"] / r["sustained_ms"]) for x, r in sustained]),
                        label=f"{impl} sustained", linestyle="--", **{**style, "marker": "^"})
        else:
            if sustained:
                ax.plot(*zip(*[(x, r["sustained_ms"] * 1e3) for x, r in sustained]), label=f"{impl} sustained",
                        linestyle="--", **{**style, "marker": "^"})
            ax.plot(xs, [r["ms"] * 1e3 for r in mine], label=impl, **style)
            host = [(x, r["host_ms"] * 1e3) for x, r in zip(xs, mine) if r["host_ms"] is not None]
            if host:
                ax.plot(*zip(*host), label=f"{impl} host", linestyle=":",
                        **{**style, "marker": "s"})
    if use_pct:
        c = result["ceilings"][ceiling_name]
        ax.axhline(100, color="black", linewidth=1, linestyle="--",
                   label=f"{ceiling_name} ceiling = {c['value']:,.0f} {c['unit']}")
        ax.set_ylabel(f"% of the {ceiling_name} ceiling")
        ax.set_ylim(bottom=0, top=max(110, *(r["pct_of_ceiling"] * max(1, r["ms"] / (r.get("sustained_ms") or r["ms"])) + 5
                                             for r in rows)))
    else:
        ax.set_ylabel("time per call (µs)")
        times = [r["ms"] for r in rows] + [r[k] for r in rows for k in ("host_ms", "sustained_ms") if r.get(k)]
        if max(times) / min(times) > 20:  # log only where linear would squash the small ones
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        else:
            ax.set_ylim(bottom=0, top=1.1 * max(times) * 1e3)
    if numeric and len(values) > 1 and max(values) / min(values) >= 8:
        ax.set_xscale("log", base=2)
    ax.set_xticks([pos[v] for v in values], [_tick(v) for v in values])
    ax.minorticks_off()
    ax.set_xlabel(key or "")
    fixed = {k: v for k, v in rows[0]["params"].items()
             if k != key and k not in metrics.varying_params(rows)}
    where = result["env"].get("gpu") or "CPU smoke run"
    ax.set_title(f"{op} on {where}" + (f" ({', '.join(f'{k}={v}' for k, v in fixed.items())})"
                                       if fixed else ""), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.savefig(path, dpi=110)
    return path


def _tick(v: Any) -> str:
    if isinstance(v, int) and v >= 1024 and v % 1024 == 0:
        return f"{v // 1024}K"
    return str(v)
