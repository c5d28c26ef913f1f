#!/usr/bin/env python3
"""Plots rpc_vs_torch.py's JSON: torch/ferry speedup per metric, with the
issue's targets. Usage: plot_rpc_vs_torch.py in.json [more.json ...] out.png"""

import json
import sys

from grouped_bars import plot


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
    plot(out, labels, [(mode, [r["speedup"] for r in ratios]) for mode, ratios in runs],
         [r["target"] for r in runs[0][1]], "speedup over torch.distributed.rpc (x)",
         "ferry (shm) beside torch.distributed.rpc (TensorPipe), same run; red: targets")


if __name__ == "__main__":
    main()
