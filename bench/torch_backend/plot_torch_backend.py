#!/usr/bin/env python3
"""Plots bench_torch_backend.py's JSON: for each measure, how many times
faster than TENSORPIPE each FERRY configuration was in the same run (> 1:
FERRY faster), with the issue's goals (1x everywhere, 3x on the 64 MiB
echo). Usage: plot_torch_backend.py in.json out.png"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from grouped_bars import plot  # noqa: E402

GOALS = {"echo_67108864_us": 3.0}  # every other measure: 1.0


def main():
    src, out = sys.argv[1:]
    with open(src) as f:
        results = json.load(f)["results"]
    ref = results["TENSORPIPE"]
    measures = list(ref)
    series = [(system, [ref[m] / r[m] for m in measures])
              for system, r in results.items() if system != "TENSORPIPE"]
    plot(out, [m.replace("_us", "") for m in measures], series,
         [GOALS.get(m, 1.0) for m in measures], "speedup over TENSORPIPE (x), same run",
         "torch.distributed.rpc on FERRY beside TENSORPIPE; red: goals", log=True)


if __name__ == "__main__":
    main()
