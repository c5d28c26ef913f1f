#!/usr/bin/env python3
"""Plots bench_torch_backend.py's JSON: for each measure, how many times
faster than TENSORPIPE each FERRY transport was in the same run (> 1:
FERRY faster), with the issue's goals (1x everywhere, 3x on the 64 MiB
echo). Usage: plot_torch_backend.py in.json out.png"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

GOALS = {"echo_67108864_us": 3.0}  # every other measure: 1.0


def main():
    src, out = sys.argv[1:]
    with open(src) as f:
        results = json.load(f)["results"]
    ref = results["TENSORPIPE"]
    measures = list(ref)
    systems = [s for s in results if s != "TENSORPIPE"]
    fig, ax = plt.subplots(figsize=(11, 5))
    width = 0.8 / len(systems)
    for i, system in enumerate(systems):
        xs = [j + i * width for j in range(len(measures))]
        ax.bar(xs, [ref[m] / results[system][m] for m in measures], width, label=system)
    for j, m in enumerate(measures):
        goal = GOALS.get(m, 1.0)
        ax.plot([j - width / 2, j + width * len(systems) - width / 2], [goal] * 2, "r--")
    ax.set_xticks([j + width * (len(systems) - 1) / 2 for j in range(len(measures))])
    ax.set_xticklabels([m.replace("_us", "") for m in measures], rotation=30, ha="right",
                       fontsize=8)
    ax.set_ylabel("speedup over TENSORPIPE (x), same run")
    ax.set_yscale("log")
    ax.set_title("torch.distributed.rpc on FERRY beside TENSORPIPE; red: goals")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
