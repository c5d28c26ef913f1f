#!/usr/bin/env python3
"""Plots rpc_vs_torch.py's JSON: torch/ferry speedup per metric, with the
issue's targets. Usage: plot_rpc_vs_torch.py in.json [more.json ...] out.png"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    *inputs, out = sys.argv[1:]
    runs = []
    for path in inputs:
        with open(path) as f:
            report = json.load(f)
        mode = "ferry busy-poll" if report["config"]["busy_poll"] else "ferry sleeping"
        runs.append((mode, report["ratios"]))
    labels = [r["metric"].replace(" median (us)", "").replace(" amortized (us)", "")
              .replace(" (calls/s)", "") for r in runs[0][1]]
    fig, ax = plt.subplots(figsize=(11, 5))
    width = 0.8 / len(runs)
    for i, (mode, ratios) in enumerate(runs):
        xs = [j + i * width for j in range(len(ratios))]
        ax.bar(xs, [r["speedup"] for r in ratios], width, label=mode)
    for j, r in enumerate(runs[0][1]):
        if r["target"]:
            ax.plot([j - width / 2, j + width * len(runs) - width / 2], [r["target"]] * 2, "r--")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xticks([j + width * (len(runs) - 1) / 2 for j in range(len(labels))])
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("speedup over torch.distributed.rpc (x)")
    ax.set_title("ferry (shm) beside torch.distributed.rpc (TensorPipe), same run; red: targets")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
