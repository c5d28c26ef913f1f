#!/usr/bin/python3
"""Plots ferry-bench-transport's JSON: ferry beside the raw TCP floor.

One column per polling mode (busy, sleep); rows:
  1. round-trip latency vs message size (median solid, p99 dotted), log-log;
  2. bandwidth vs message size (from the round trip solid, streaming
     dashed), log-log;
  3. ferry/raw ratios vs size, with the targets as reference lines.

Usage: plot_transport.py RESULTS.json OUT.png [--title TEXT]
                         [--latency-target 1.2] [--bandwidth-target 0.9]
                         [--markdown]
--markdown also prints the figures as Markdown tables (what
docs/benchmarks/README.md records), so the tables come from the same JSON.
Needs python3 and matplotlib (Debian: python3-matplotlib).
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")  # files only: no display needed
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

FERRY = "tab:blue"
RAW = "tab:gray"


def size_label(n, _pos=None):
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g}{unit}"
    return f"{n:g}"


def series(results, side, *path):
    xs, ys = [], []
    for r in results:
        value = r[side]
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
            if value is None:
                break
        if value is not None:
            xs.append(r["size"])
            ys.append(value)
    return xs, ys


def ratio_series(results, key):
    xs, ys = [], []
    for r in results:
        if key in r["ratio"] and r["ratio"][key] is not None:
            xs.append(r["size"])
            ys.append(r["ratio"][key])
    return xs, ys


def plot_suite(axes, suite, plugin, args):
    results = suite["results"]
    mode = suite["mode"]
    lat, bw, ratio = axes

    for side, color, label in (("ferry", FERRY, plugin), ("raw", RAW, "raw TCP")):
        x, med = series(results, side, "rtt_ns", "median")
        _, p99 = series(results, side, "rtt_ns", "p99")
        lat.plot(x, [v / 1e3 for v in med], "o-", color=color,
                 label=f"{label} median")
        lat.plot(x, [v / 1e3 for v in p99], ":", color=color,
                 label=f"{label} p99")
        x, rt = series(results, side, "bw_rtt_Bps")
        bw.plot(x, [v / 1e9 for v in rt], "o-", color=color,
                label=f"{label}, from round trip")
        x, st = series(results, side, "stream_Bps", "median")
        if x:
            bw.plot(x, [v / 1e9 for v in st], "s--", color=color,
                    label=f"{label}, streaming")

    x, r = ratio_series(results, "rtt_median")
    ratio.plot(x, r, "o-", color="tab:red", label="latency (median)")
    x, r = ratio_series(results, "rtt_p99")
    ratio.plot(x, r, ":", color="tab:red", label="latency (p99)")
    x, r = ratio_series(results, "bw_rtt")
    ratio.plot(x, r, "o-", color="tab:green", label="bandwidth (round trip)")
    x, r = ratio_series(results, "bw_stream")
    if x:
        ratio.plot(x, r, "s--", color="tab:green", label="bandwidth (streaming)")
    ratio.axhline(1.0, color="black", linewidth=0.8)
    if args.latency_target:
        ratio.axhline(args.latency_target, color="tab:red", linewidth=0.8,
                      alpha=0.5, linestyle="-.",
                      label=f"latency target <= {args.latency_target:g}x")
    if args.bandwidth_target:
        ratio.axhline(args.bandwidth_target, color="tab:green", linewidth=0.8,
                      alpha=0.5, linestyle="-.",
                      label=f"bandwidth target >= {args.bandwidth_target:g}x")

    lat.set_title(f"{mode} mode: round-trip latency")
    lat.set_ylabel("round trip (µs)")
    bw.set_title(f"{mode} mode: bandwidth")
    bw.set_ylabel("GB/s (1e9 B/s)")
    ratio.set_title(f"{mode} mode: {plugin} / raw TCP")
    ratio.set_ylabel("ratio")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(size_label))
        ax.set_xlabel("message size (bytes)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    lat.set_yscale("log")
    bw.set_yscale("log")


def fmt_ratio(r, key):
    v = r["ratio"].get(key)
    return "-" if v is None else f"{v:.2f}"


def markdown_tables(data):
    out = []
    for suite in data["suites"]:
        out.append(f"**{suite['mode']} mode** ({suite['mode_description']})\n")
        out.append("| size | n | ferry median µs | ferry p99 µs | raw median µs "
                   "| raw p99 µs | latency ratio (median) | rt bw ferry MB/s "
                   "| rt bw raw MB/s | rt bw ratio | stream ferry MB/s "
                   "| stream raw MB/s | stream ratio |")
        out.append("|" + "---:|" * 13)
        for r in suite["results"]:
            f, w = r["ferry"], r["raw"]
            stream = ("-", "-", "-")
            if "stream_Bps" in f:
                stream = (f"{f['stream_Bps']['median'] / 1e6:.0f}",
                          f"{w['stream_Bps']['median'] / 1e6:.0f}",
                          fmt_ratio(r, "bw_stream"))
            out.append(
                f"| {size_label(r['size'])} | {r['iters']} "
                f"| {f['rtt_ns']['median'] / 1e3:.2f} "
                f"| {f['rtt_ns']['p99'] / 1e3:.2f} "
                f"| {w['rtt_ns']['median'] / 1e3:.2f} "
                f"| {w['rtt_ns']['p99'] / 1e3:.2f} "
                f"| {fmt_ratio(r, 'rtt_median')} "
                f"| {f['bw_rtt_Bps'] / 1e6:.1f} | {w['bw_rtt_Bps'] / 1e6:.1f} "
                f"| {fmt_ratio(r, 'bw_rtt')} "
                f"| {stream[0]} | {stream[1]} | {stream[2]} |")
        out.append("")
    return "\n".join(out)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json")
    parser.add_argument("png")
    parser.add_argument("--title")
    parser.add_argument("--latency-target", type=float, default=1.2)
    parser.add_argument("--bandwidth-target", type=float, default=0.9)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)

    with open(args.json) as f:
        data = json.load(f)
    suites = data["suites"]
    if not suites:
        sys.exit(f"{args.json}: no suites to plot")
    plugin = f'ferry {data["plugin"]["name"]} {data["plugin"]["version"]}'

    fig, grid = plt.subplots(3, len(suites), figsize=(6.5 * len(suites), 13),
                             squeeze=False)
    for col, suite in enumerate(suites):
        plot_suite([grid[row][col] for row in range(3)], suite, plugin, args)
    m = data["machine"]
    title = args.title or (
        f"ferry-bench-transport: {plugin} vs raw TCP, "
        f"{m['nproc']} x {m['cpu_model']}, {m['kernel'].split(' ')[1]}, "
        f"{data['date_utc'][:10]}")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(args.png, dpi=110)
    print(f"wrote {args.png}")
    if args.markdown:
        print(markdown_tables(data))


if __name__ == "__main__":
    main(sys.argv[1:])
