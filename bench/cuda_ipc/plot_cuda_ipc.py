#!/usr/bin/env python3
"""Plots the cuda_ipc benchmarks' JSON into one PNG:
left, ferry-bench-cuda's bandwidth (ferry, process to process, beside the
in-process cuMemcpyDtoD) per size with the 0.9x goal from 64 MiB; right,
bench_torch.py's device-tensor rpc_sync echo median per size, ferry beside
torch.distributed.rpc, with ferry's no-op for scale.

    plot_cuda_ipc.py [--cuda bench-cuda.json] [--torch bench-torch.json] out.png

Either input may be left out (its panel says so). Same style as
bench/python/plot_rpc_vs_torch.py (matplotlib, Agg)."""

import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def size_name(n):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return "%d%s" % (n >> shift, unit)
    return str(n)


def bandwidth_panel(ax, report):
    sizes = report["bandwidth"]["sizes"]
    xs = list(range(len(sizes)))
    ferry = [s["ferry_GBps"] for s in sizes]
    d2d = [s["d2d_GBps"] for s in sizes]
    ax.plot(xs, d2d, "o-", color="gray", label="cuMemcpyDtoD, one process")
    ax.plot(xs, ferry, "o-", color="C0", label="ferry %s, A -> B's GPU" % report["transport"])
    goal_from = report["bandwidth"]["goal_from_bytes"]
    for x, s in zip(xs, sizes):
        ax.annotate("%.2fx" % s["ratio"], (x, s["ferry_GBps"]), textcoords="offset points",
                    xytext=(0, -14), ha="center", fontsize=8,
                    color=("red" if s["goal"] and not s["met"] else "black"))
        if s["bytes"] >= goal_from:
            ax.plot([x - 0.3, x + 0.3], [0.9 * s["d2d_GBps"]] * 2, "r--", lw=1)
    ax.set_xticks(xs)
    ax.set_xticklabels([size_name(s["bytes"]) for s in sizes])
    ax.set_yscale("log")
    ax.set_xlabel("device tensor size")
    ax.set_ylabel("GB/s (bytes counted once)")
    ax.set_title("%s: bandwidth, %d in flight\n(red: 0.9x goal; labels: ferry / copy)"
                 % (report["gpu"]["name"], report["window"]), fontsize=9)
    ax.legend(fontsize=8)


def latency_panel(ax, report):
    res = report["results"]
    keys = sorted(res.get("ferry", res.get("torch", {})).get("device_echo", {}), key=int)
    xs = list(range(len(keys)))
    for name, color in (("ferry", "C0"), ("torch", "C1")):
        echo = res.get(name, {}).get("device_echo")
        if not echo:
            continue
        info = res[name].get("info", {})
        label = name if name == "ferry" else "torch.distributed.rpc (%s)" % (
            "device map" if info.get("device_map") else
            "host tensors" if report["config"]["framework"] == "host" else "staged via host")
        ax.plot(xs, [echo[k]["median_us"] for k in keys], "o-", color=color, label=label)
    noop = res.get("ferry", {}).get("rpc_sync_noop")
    if noop:
        ax.axhline(noop["median_us"], color="C0", ls=":", lw=1,
                   label="ferry no-op (%.1f us)" % noop["median_us"])
        ax.axhline(2 * noop["median_us"], color="red", ls="--", lw=1,
                   label="goal at 4 KiB: 2x no-op")
    for g in report.get("goals", []):
        if g["speedup"] is not None and str(g["bytes"]) in keys:
            ax.annotate("%.1fx" % g["speedup"], (keys.index(str(g["bytes"])), g["ferry"]),
                        textcoords="offset points", xytext=(0, -14), ha="center", fontsize=8,
                        color="black" if g["met"] else "red")
    ax.set_xticks(xs)
    ax.set_xticklabels([size_name(int(k)) for k in keys])
    ax.set_yscale("log")
    ax.set_xlabel("device tensor size")
    ax.set_ylabel("rpc_sync echo median (us)")
    cfg = report["config"]
    ax.set_title("Python, %s tensors, ferry %s%s\n(labels: torch / ferry; goal 3x to 1 MiB, 1x above)"
                 % (cfg["framework"], cfg["ferry_backend"],
                    ", busy-poll" if cfg["busy_poll"] else ""), fontsize=9)
    ax.legend(fontsize=8)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cuda", help="ferry-bench-cuda --json output")
    p.add_argument("--torch", help="bench_torch.py --json output")
    p.add_argument("out")
    args = p.parse_args()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    for ax, path, draw in ((left, args.cuda, bandwidth_panel), (right, args.torch, latency_panel)):
        if path:
            with open(path) as f:
                draw(ax, json.load(f))
        else:
            ax.text(0.5, 0.5, "not measured", ha="center", va="center")
            ax.set_axis_off()
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print("wrote %s" % args.out)


if __name__ == "__main__":
    main()
