"""The plot of kv_bench.py's JSON: GB/s per request (bytes / p50) of HMC put_blocks, raw UCX posting
the same segments, and the contiguous ceiling (HMC put_remote, raw UCX one put) of the same bytes.
One row of panels per JSON file (its transport): a panel per model (x: context tokens), one for the
synthetic block points (bars).

    /usr/bin/python3 benchmarks/python/kv_plot.py benchmarks/results/kv-shm.json [benchmarks/results/kv-tcp.json] \
        [--out docs/benchmarks-kv.png]
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after the backend is chosen

SERIES = (  # (label, ms key, style)
    ("HMC put_blocks", "hmc_p50_ms", dict(color="tab:blue", marker="o")),
    ("raw UCX scatter (same segments)", "raw_scatter_p50_ms", dict(color="tab:orange", marker="s")),
    ("HMC put_remote, same bytes contiguous", "contig_p50_ms", dict(color="tab:green", marker="^", linestyle="--")),
    ("raw UCX one put, same bytes", "raw_contig_p50_ms", dict(color="tab:gray", marker="v", linestyle=":")),
)


def gbps(row, key):
    ms = row.get(key)
    return None if not ms else row["bytes"] / (ms / 1e3) / 1e9


def panels(rows):
    """[(title, rows)]: one per model with contexts (in run order), then the synthetic points together."""
    models, synthetic = {}, []
    for r in rows:
        if r["context"] is None:
            synthetic.append(r)
        else:
            models.setdefault(r["model"], []).append(r)
    out = [(m, sorted(v, key=lambda r: r["context"])) for m, v in models.items()]
    if synthetic:
        out.append(("synthetic blocks, one region", synthetic))
    return out


def draw_model(ax, rows):
    x = list(range(len(rows)))
    for label, key, style in SERIES:
        pts = [(i, gbps(r, key)) for i, r in zip(x, rows) if gbps(r, key) is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label, **style)
    ax.set_xticks(x, [f"{r['context']}\n{r['segments']} x {r['block_bytes'] >> 10} KiB" for r in rows], fontsize=8)
    ax.set_xlabel("context tokens / blocks x block")


def draw_synthetic(ax, rows):
    width = 0.8 / len(SERIES)
    for k, (label, key, style) in enumerate(SERIES):
        for i, r in enumerate(rows):
            v = gbps(r, key)
            if v is not None:
                x = i + (k - (len(SERIES) - 1) / 2) * width
                ax.bar(x, v, width, color=style["color"], label=label if i == 0 else None,
                       hatch="//" if "contig" in key else None, alpha=0.9)
                ax.annotate(f"{v:.2g}", (x, v), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(rows)), [f"{r['segments']} x {r['block_bytes'] >> 10} KiB" for r in rows], fontsize=8)
    ax.set_xlabel("blocks x block")


def main(argv=None):
    p = argparse.ArgumentParser(description="plot kv_bench.py JSON")
    p.add_argument("json", nargs="+")
    p.add_argument("--out", default="docs/benchmarks-kv.png")
    o = p.parse_args(argv)
    runs = []
    for path in o.json:
        with open(path) as f:
            data = json.load(f)
        runs.append((data["meta"], panels(data["results"])))
    cols = max(len(ps) for _, ps in runs)
    fig, axes = plt.subplots(len(runs), cols, figsize=(4.6 * cols, 4.0 * len(runs)), squeeze=False)
    spare = []  # empty cells: the legend goes in the first
    for row, (meta, ps) in enumerate(runs):
        for col in range(cols):
            ax = axes[row][col]
            if col >= len(ps):
                ax.axis("off")
                spare.append(ax)
                continue
            title, rows = ps[col]
            (draw_synthetic if rows[0]["context"] is None else draw_model)(ax, rows)
            ax.set_title(f"{title} ({meta['tls']})", fontsize=10)
            ax.set_ylim(bottom=0)
            ax.grid(True, axis="y", alpha=0.3)
            if col == 0:
                ax.set_ylabel("GB/s per request (bytes / p50)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.suptitle("KV-cache transfer, two processes, one request at a time", fontsize=11)
    if spare:
        spare[0].legend(handles, labels, loc="center", fontsize=9, frameon=False)
        fig.tight_layout(rect=(0, 0, 1, 0.96))
    else:
        fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=9, frameon=False)
        fig.tight_layout(rect=(0, 0.1, 1, 0.96))
    fig.savefig(o.out, dpi=110)
    print(o.out)


if __name__ == "__main__":
    main()
