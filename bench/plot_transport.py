#!/usr/bin/python3
"""Plots ferry-bench-transport's JSON: ferry beside each of its references.

One column per polling mode (busy, sleep); rows:
  1. round-trip latency vs message size (median solid, p99 dotted), log-log;
  2. bandwidth vs message size (from the round trip solid, streaming
     dashed), log-log;
  3. ferry / reference ratios vs size (one colour per reference; latency
     circles, bandwidth squares), with the targets as reference lines.

Reads schema 2 (any number of references: tcp has raw TCP; shm has the raw
shm ring and TensorPipe's shm; fabric the raw libfabric floor and
fi_pingpong) and schema 1 (ferry and raw TCP only). A batch reference
(fi_pingpong: "batch": true) has only a mean, of its loop timed whole:
crosses, and ratios to ferry's loop mean (as many round trips again, timed
as one loop; files without loop means fall back to ferry's plain mean).

Usage: plot_transport.py RESULTS.json OUT.png [--title TEXT]
                         [--latency-target 1.2] [--bandwidth-target 0.9]
                         [--latency-limit-us US] [--markdown]
A target of 0 draws no line; --latency-limit-us draws an absolute latency
line on the latency plots. --markdown also prints the figures as Markdown
tables (what docs/benchmarks/README.md records), so the tables come from the
same JSON. Needs python3 and matplotlib (Debian: python3-matplotlib).
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")  # files only: no display needed
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

FERRY = "tab:blue"
REFERENCE_COLORS = ["tab:gray", "tab:orange", "tab:green", "tab:purple",
                    "tab:brown"]


def size_label(n, _pos=None):
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g}{unit}"
    return f"{n:g}"


def normalise(data):
    """Schema 1 has one reference, "raw" (raw TCP), and a flat "ratio".
    Files without loop means compare batch references by plain means."""
    if data.get("schema_version", 1) < 2:
        data["references"] = [{"key": "raw", "label": "raw TCP",
                               "measured": True}]
        for suite in data["suites"]:
            for r in suite["results"]:
                r["ratio"] = {"raw": r.get("ratio", {})}
    for suite in data["suites"]:
        for r in suite["results"]:
            for ratio in r["ratio"].values():
                ratio.setdefault("rtt_loop_mean", ratio.get("rtt_mean"))
                ratio.setdefault("bw_loop_mean", ratio.get("bw_rtt_mean"))
            for side in ["ferry"] + [ref["key"] for ref in data["references"]]:
                impl = r.get(side)
                if isinstance(impl, dict):
                    impl.setdefault("bw_loop_Bps", impl.get("bw_rtt_mean_Bps"))
    return data


def measured(data):
    return [r for r in data["references"] if r.get("measured", True)]


def value_at(record, *path):
    for key in path:
        record = record.get(key) if isinstance(record, dict) else None
        if record is None:
            return None
    return record


def series(results, side, *path):
    xs, ys = [], []
    for r in results:
        v = value_at(r.get(side), *path)
        # A side not measured (--only) has zero medians: leave it out.
        if v is not None and v > 0:
            xs.append(r["size"])
            ys.append(v)
    return xs, ys


def ratio_series(results, ref, key):
    xs, ys = [], []
    for r in results:
        v = value_at(r["ratio"], ref, key)
        if v is not None:
            xs.append(r["size"])
            ys.append(v)
    return xs, ys


def keys_for(ref):
    """(latency statistic, bandwidth figure, latency ratio, bandwidth ratio):
    medians for round-trip references, loop means for batch ones
    (fi_pingpong reports only the mean of its loop timed whole, so ferry is
    compared with it by the mean of its own loop timed whole)."""
    if ref.get("batch"):
        return "mean", "bw_loop_Bps", "rtt_loop_mean", "bw_loop_mean"
    return "median", "bw_rtt_Bps", "rtt_median", "bw_rtt"


def plot_suite(axes, suite, plugin, refs, args):
    results = suite["results"]
    mode = suite["mode"]
    lat, bw, ratio = axes
    sides = [("ferry", FERRY, plugin, {})] + [
        (ref["key"], REFERENCE_COLORS[i % len(REFERENCE_COLORS)], ref["label"],
         ref) for i, ref in enumerate(refs)]

    for side, color, label, ref in sides:
        if ref.get("batch"):
            x, mean = series(results, side, "rtt_ns", "mean")
            lat.plot(x, [v / 1e3 for v in mean], "x--", color=color,
                     label=f"{label} mean")
            x, rt = series(results, side, "bw_loop_Bps")
            bw.plot(x, [v / 1e9 for v in rt], "x--", color=color,
                    label=f"{label}, from mean round trip")
            continue
        if side == "ferry" and any(r.get("batch") for r in refs):
            x, loop = series(results, side, "loop_rtt_ns")
            lat.plot(x, [v / 1e3 for v in loop], "x--", color=color,
                     label=f"{label} loop mean")
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

    for key, color, label, ref in sides[1:]:
        _, _, lat_key, bw_key = keys_for(ref)
        basis = " (loop means)" if ref.get("batch") else ""
        x, r = ratio_series(results, key, lat_key)
        ratio.plot(x, r, "o-", color=color, label=f"latency / {label}{basis}")
        x, r = ratio_series(results, key, bw_key)
        ratio.plot(x, r, "s--", color=color,
                   label=f"bandwidth (round trip) / {label}{basis}")
    ratio.axhline(1.0, color="black", linewidth=0.8)
    if args.latency_target:
        ratio.axhline(args.latency_target, color="tab:red", linewidth=0.8,
                      alpha=0.5, linestyle="-.",
                      label=f"latency target <= {args.latency_target:g}x")
    if args.bandwidth_target:
        ratio.axhline(args.bandwidth_target, color="tab:green", linewidth=0.8,
                      alpha=0.5, linestyle="-.",
                      label=f"bandwidth target >= {args.bandwidth_target:g}x")
    if args.latency_limit_us:
        lat.axhline(args.latency_limit_us, color="tab:red", linewidth=0.8,
                    alpha=0.5, linestyle="-.",
                    label=f"target <= {args.latency_limit_us:g} µs")

    lat.set_title(f"{mode} mode: round-trip latency")
    lat.set_ylabel("round trip (µs)")
    bw.set_title(f"{mode} mode: bandwidth")
    bw.set_ylabel("GB/s (1e9 B/s)")
    ratio.set_title(f"{mode} mode: {plugin} / reference")
    ratio.set_ylabel("ratio")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(size_label))
        ax.set_xlabel("message size (bytes)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    lat.set_yscale("log")
    bw.set_yscale("log")
    ratio.set_yscale("log")


def fmt(v, scale=1.0, digits=2):
    return "-" if v is None or v == 0 else f"{v / scale:.{digits}f}"


def markdown_tables(data):
    refs = measured(data)
    out = []
    for suite in data["suites"]:
        out.append(f"**{suite['mode']} mode** ({suite['mode_description']})\n")
        batch = any(ref.get("batch") for ref in refs)
        head = "| size | n | ferry median µs | ferry p99 µs |"
        if batch:
            head += " ferry loop mean µs |"
        for ref in refs:
            stat = keys_for(ref)[0]
            basis = "loop means" if ref.get("batch") else stat
            head += (f" {ref['label']} {stat} µs | p99 µs "
                     f"| ferry / {ref['label']} ({basis}) |")
        out.append(head)
        out.append("|" + "---:|" * (4 + batch + 3 * len(refs)))
        for r in suite["results"]:
            row = (f"| {size_label(r['size'])} | {r['iters']} "
                   f"| {fmt(value_at(r, 'ferry', 'rtt_ns', 'median'), 1e3)} "
                   f"| {fmt(value_at(r, 'ferry', 'rtt_ns', 'p99'), 1e3)} |")
            if batch:
                row += f" {fmt(value_at(r, 'ferry', 'loop_rtt_ns'), 1e3)} |"
            for ref in refs:
                k = ref["key"]
                stat, _, lat_key, _ = keys_for(ref)
                row += (f" {fmt(value_at(r, k, 'rtt_ns', stat), 1e3)} "
                        f"| {fmt(value_at(r, k, 'rtt_ns', 'p99'), 1e3)} "
                        f"| {fmt(value_at(r['ratio'], k, lat_key))} |")
            out.append(row)
        out.append("")
        head = "| size | ferry rt MB/s |"
        for ref in refs:
            head += f" {ref['label']} rt MB/s | ferry / {ref['label']} |"
        head += " ferry stream MB/s |"
        for ref in refs:
            head += f" {ref['label']} stream MB/s | ferry / {ref['label']} |"
        out.append(head)
        out.append("|" + "---:|" * (3 + 4 * len(refs)))
        for r in suite["results"]:
            row = (f"| {size_label(r['size'])} "
                   f"| {fmt(value_at(r, 'ferry', 'bw_rtt_Bps'), 1e6, 0)} |")
            for ref in refs:
                k = ref["key"]
                _, bw_figure, _, bw_key = keys_for(ref)
                row += (f" {fmt(value_at(r, k, bw_figure), 1e6, 0)} "
                        f"| {fmt(value_at(r['ratio'], k, bw_key))} |")
            row += (f" {fmt(value_at(r, 'ferry', 'stream_Bps', 'median'), 1e6, 0)}"
                    " |")
            for ref in refs:
                k = ref["key"]
                row += (f" {fmt(value_at(r, k, 'stream_Bps', 'median'), 1e6, 0)} "
                        f"| {fmt(value_at(r['ratio'], k, 'bw_stream'))} |")
            out.append(row)
        out.append("")
    return "\n".join(out)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json")
    parser.add_argument("png")
    parser.add_argument("--title")
    parser.add_argument("--latency-target", type=float, default=1.2)
    parser.add_argument("--bandwidth-target", type=float, default=0.9)
    parser.add_argument("--latency-limit-us", type=float, default=0)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)

    with open(args.json) as f:
        data = normalise(json.load(f))
    suites = data["suites"]
    if not suites:
        sys.exit(f"{args.json}: no suites to plot")
    plugin = f'ferry {data["plugin"]["name"]} {data["plugin"]["version"]}'
    refs = measured(data)

    fig, grid = plt.subplots(3, len(suites), figsize=(7.5 * len(suites), 15),
                             squeeze=False)
    for col, suite in enumerate(suites):
        plot_suite([grid[row][col] for row in range(3)], suite, plugin, refs,
                   args)
    m = data["machine"]
    against = ", ".join(r["label"] for r in refs)
    title = args.title or (
        f"ferry-bench-transport: {plugin} vs {against}, "
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
