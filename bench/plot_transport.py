#!/usr/bin/python3
"""Plots ferry-bench-transport's JSON: ferry beside each reference.

One column per polling mode (busy, sleep); rows:
  1. round-trip latency vs message size (median solid, p99 dotted; a batch
     reference such as fi_pingpong has only a mean: crosses), log-log;
  2. bandwidth vs message size (from the round trip solid, streaming
     dashed), log-log;
  3. ferry/reference ratios vs size, one colour per reference (latency
     circles, bandwidth squares; medians, or means for batch references),
     with the targets as reference lines.

Usage: plot_transport.py RESULTS.json OUT.png [--title TEXT]
                         [--latency-target 1.2] [--bandwidth-target 0.9]
                         [--markdown]
--markdown also prints the figures as Markdown tables (what
docs/benchmarks/README.md records), so the tables come from the same JSON.
Reads schema 1 (ferry beside "raw" TCP) and schema 2 (references by id).
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
REFERENCE_COLOURS = ["tab:gray", "tab:orange", "tab:green", "tab:purple",
                     "tab:brown"]


def size_label(n, _pos=None):
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g}{unit}"
    return f"{n:g}"


def upgrade(data):
    """Schema 1 (one raw TCP floor) in schema 2's shape."""
    if data.get("schema_version", 1) >= 2:
        return data
    for suite in data["suites"]:
        suite["references"] = [{"id": "raw_tcp", "label": "raw TCP",
                                "batch": False}]
        for r in suite["results"]:
            r["references"] = {"raw_tcp": r.pop("raw")}
            r["ratios"] = {"raw_tcp": r.pop("ratio")}
    return data


def get(value, *path):
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
        if value is None:
            return None
    return value


def series(results, side, *path):
    """(sizes, values) of ferry (side None) or of reference `side`."""
    xs, ys = [], []
    for r in results:
        base = r["ferry"] if side is None else r["references"].get(side, {})
        value = get(base, *path)
        if value is not None:
            xs.append(r["size"])
            ys.append(value)
    return xs, ys


def ratio_series(results, ref_id, key):
    xs, ys = [], []
    for r in results:
        value = get(r, "ratios", ref_id, key)
        if value is not None:
            xs.append(r["size"])
            ys.append(value)
    return xs, ys


def plot_side(lat, bw, results, side, colour, label, batch):
    if batch:
        x, mean = series(results, side, "rtt_ns", "mean")
        lat.plot(x, [v / 1e3 for v in mean], "x--", color=colour,
                 label=f"{label} mean")
        x, rt = series(results, side, "bw_rtt_mean_Bps")
        bw.plot(x, [v / 1e9 for v in rt], "x--", color=colour,
                label=f"{label}, from mean round trip")
        return
    x, med = series(results, side, "rtt_ns", "median")
    _, p99 = series(results, side, "rtt_ns", "p99")
    lat.plot(x, [v / 1e3 for v in med], "o-", color=colour,
             label=f"{label} median")
    lat.plot(x, [v / 1e3 for v in p99], ":", color=colour,
             label=f"{label} p99")
    x, rt = series(results, side, "bw_rtt_Bps")
    bw.plot(x, [v / 1e9 for v in rt], "o-", color=colour,
            label=f"{label}, from round trip")
    x, st = series(results, side, "stream_Bps", "median")
    if x:
        bw.plot(x, [v / 1e9 for v in st], "s--", color=colour,
                label=f"{label}, streaming")


def plot_suite(axes, suite, plugin, colours, args):
    results = suite["results"]
    mode = suite["mode"]
    lat, bw, ratio = axes

    plot_side(lat, bw, results, None, FERRY, plugin, False)
    for ref in suite["references"]:
        colour = colours[ref["id"]]
        plot_side(lat, bw, results, ref["id"], colour, ref["label"],
                  ref["batch"])
        lat_key, bw_key = (("rtt_mean", "bw_rtt_mean") if ref["batch"]
                           else ("rtt_median", "bw_rtt"))
        basis = "means" if ref["batch"] else "medians"
        x, r = ratio_series(results, ref["id"], lat_key)
        ratio.plot(x, r, "o-", color=colour,
                   label=f"latency / {ref['label']} ({basis})")
        x, r = ratio_series(results, ref["id"], bw_key)
        ratio.plot(x, r, "s--", color=colour,
                   label=f"bandwidth / {ref['label']} ({basis})")
        x, r = ratio_series(results, ref["id"], "bw_stream")
        if x:
            ratio.plot(x, r, "^:", color=colour,
                       label=f"streaming / {ref['label']}")
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
    ratio.set_title(f"{mode} mode: ferry / reference")
    ratio.set_ylabel("ratio")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(size_label))
        ax.set_xlabel("message size (bytes)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    lat.set_yscale("log")
    bw.set_yscale("log")


def fmt(value, scale=1.0, decimals=2):
    return "-" if value is None else f"{value / scale:.{decimals}f}"


def markdown_tables(data):
    out = []
    for suite in data["suites"]:
        results = suite["results"]
        out.append(f"**{suite['mode']} mode** ({suite['mode_description']})\n")
        out.append("ferry:\n")
        out.append("| size | n | median µs | p99 µs | mean µs | rt bw MB/s "
                   "| stream MB/s |")
        out.append("|" + "---:|" * 7)
        for r in results:
            f = r["ferry"]
            out.append(
                f"| {size_label(r['size'])} | {r['iters']} "
                f"| {fmt(get(f, 'rtt_ns', 'median'), 1e3)} "
                f"| {fmt(get(f, 'rtt_ns', 'p99'), 1e3)} "
                f"| {fmt(get(f, 'rtt_ns', 'mean'), 1e3)} "
                f"| {fmt(f.get('bw_rtt_Bps'), 1e6, 1)} "
                f"| {fmt(get(f, 'stream_Bps', 'median'), 1e6, 0)} |")
        out.append("")
        for ref in suite["references"]:
            rid = ref["id"]
            if ref["batch"]:
                out.append(f"{ref['label']} (means only; ratios ferry mean / "
                           "its mean):\n")
                out.append("| size | mean µs | rt bw (mean) MB/s "
                           "| ferry mean µs | latency ratio (means) "
                           "| bandwidth ratio (means) |")
                out.append("|" + "---:|" * 6)
                for r in results:
                    w = r["references"].get(rid, {})
                    out.append(
                        f"| {size_label(r['size'])} "
                        f"| {fmt(get(w, 'rtt_ns', 'mean'), 1e3)} "
                        f"| {fmt(w.get('bw_rtt_mean_Bps'), 1e6, 1)} "
                        f"| {fmt(get(r, 'ferry', 'rtt_ns', 'mean'), 1e3)} "
                        f"| {fmt(get(r, 'ratios', rid, 'rtt_mean'))} "
                        f"| {fmt(get(r, 'ratios', rid, 'bw_rtt_mean'))} |")
            else:
                out.append(f"{ref['label']} (ratios ferry / it):\n")
                out.append("| size | median µs | p99 µs | rt bw MB/s "
                           "| stream MB/s | latency ratio (median) "
                           "| rt bw ratio | stream ratio |")
                out.append("|" + "---:|" * 8)
                for r in results:
                    w = r["references"].get(rid, {})
                    out.append(
                        f"| {size_label(r['size'])} "
                        f"| {fmt(get(w, 'rtt_ns', 'median'), 1e3)} "
                        f"| {fmt(get(w, 'rtt_ns', 'p99'), 1e3)} "
                        f"| {fmt(w.get('bw_rtt_Bps'), 1e6, 1)} "
                        f"| {fmt(get(w, 'stream_Bps', 'median'), 1e6, 0)} "
                        f"| {fmt(get(r, 'ratios', rid, 'rtt_median'))} "
                        f"| {fmt(get(r, 'ratios', rid, 'bw_rtt'))} "
                        f"| {fmt(get(r, 'ratios', rid, 'bw_stream'))} |")
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
        data = upgrade(json.load(f))
    suites = data["suites"]
    if not suites:
        sys.exit(f"{args.json}: no suites to plot")
    plugin = f'ferry {data["plugin"]["name"]} {data["plugin"]["version"]}'
    provider = get(data, "method", "fabric_provider")
    if provider:
        plugin += f" ({provider})"

    # One colour per reference in every column (a mode may lack one).
    colours, labels = {}, []
    for suite in suites:
        for ref in suite["references"]:
            if ref["id"] not in colours:
                colours[ref["id"]] = REFERENCE_COLOURS[
                    len(colours) % len(REFERENCE_COLOURS)]
                labels.append(ref["label"])
    fig, grid = plt.subplots(3, len(suites), figsize=(6.5 * len(suites), 14),
                             squeeze=False)
    for col, suite in enumerate(suites):
        plot_suite([grid[row][col] for row in range(3)], suite, plugin,
                   colours, args)
    m = data["machine"]
    title = args.title or (
        f"ferry-bench-transport: {plugin} vs {', '.join(labels) or 'nothing'}, "
        f"{m['nproc']} x {m['cpu_model']}, {m['kernel'].split(' ')[1]}, "
        f"{data['date_utc'][:10]}")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(args.png, dpi=110)
    print(f"wrote {args.png}")
    if args.markdown:
        print(markdown_tables(data))


if __name__ == "__main__":
    main(sys.argv[1:])
