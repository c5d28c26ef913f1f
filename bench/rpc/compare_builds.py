#!/usr/bin/env python3
"""`ferry bench rpc` of two builds of ferry, side by side in one run.

A change that should not move performance (a reorganisation, a refactor) is
judged by running the benchmark of the build before it and of the build
after it in turn, several times, on the same machine in the same minutes,
and comparing medians: a single run each is at the mercy of the VM's minute.

    bench/rpc/compare_builds.py BEFORE_BUILD AFTER_BUILD [--pairs 5]
        [--transport tcp] [--mode busy|sleep|both] [--json out.json]
        [-- extra ferry-bench-rpc arguments]

Each build directory must hold bin/ferry-bench-rpc (scripts/build.sh DIR).
Prints, per figure, the median over the pairs for each build and after/before
(below 1.0 is faster for times, above 1.0 is faster for rates).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

# (label, path into one suite of the benchmark's JSON, unit, higher is better)
FIGURES = [
    ("transport ping-pong 64 B", ("transport_pingpong_64B", "ferry_median_ns"), "us", False),
    ("rpc_sync no-op", ("rpc_sync_noop", "median_ns"), "us", False),
    ("rpc_sync no-op p99", ("rpc_sync_noop", "p99_ns"), "us", False),
    ("core over the transport", ("rpc_sync_noop", "overhead_over_transport_ns"), "us", False),
    ("rpc_async 1 in flight", ("rpc_async_calls_per_s", "1"), "calls/s", True),
    ("rpc_async 8 in flight", ("rpc_async_calls_per_s", "8"), "calls/s", True),
    ("rpc_async 64 in flight", ("rpc_async_calls_per_s", "64"), "calls/s", True),
    ("tensor echo 1 KiB", ("tensor_echo", 1024), "us", False),
    ("tensor echo 1 MiB", ("tensor_echo", 1048576), "us", False),
    ("tensor echo 64 MiB", ("tensor_echo", 67108864), "us", False),
    ("RRef create+delete", ("rref_create_delete_us",), "us", False),
    ("join 4 workers", ("join_ms", "4"), "ms", False),
]


def figure(suite, path, unit):
    """One figure of one suite, in `unit`, or None when the run lacks it."""
    key = path[0]
    if key not in suite:
        return None
    value = suite[key]
    if key == "tensor_echo":
        value = next((e["median_ns"] for e in value if e["bytes"] == path[1]), None)
        return None if value is None else value / 1000.0
    for k in path[1:]:
        value = value.get(k) if isinstance(value, dict) else None
        if value is None:
            return None
    if key == "rref_create_delete_us" or key == "join_ms" or unit == "calls/s":
        return float(value)
    return value / 1000.0  # ns -> us


def run_once(build, args, extra):
    exe = os.path.join(build, "bin", "ferry-bench-rpc")
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [exe, "--transport", args.transport, "--mode", args.mode, "--json", out] + extra
    try:
        run = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if run.returncode != 0:
            sys.exit(f"compare_builds: {' '.join(cmd)} failed (exit {run.returncode}):\n"
                     + run.stderr[-4000:])
        with open(out) as f:
            data = json.load(f)
    finally:
        os.unlink(out)
    return {s["mode"]: s for s in data["suites"]}


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--transport", default="tcp")
    p.add_argument("--mode", default="both", choices=["busy", "sleep", "both"])
    p.add_argument("--json")
    args = p.parse_args(argv)
    for b in (args.before, args.after):
        if not os.access(os.path.join(b, "bin", "ferry-bench-rpc"), os.X_OK):
            sys.exit(f"compare_builds: no bin/ferry-bench-rpc in {b}; build it first "
                     "(scripts/build.sh DIR)")

    runs = {"before": [], "after": []}
    for i in range(args.pairs):
        # Alternate which build goes first, so neither always runs on a
        # machine the other has just warmed (or disturbed).
        order = ["before", "after"] if i % 2 == 0 else ["after", "before"]
        for which in order:
            runs[which].append(run_once(getattr(args, which), args, extra))
        print(f"pair {i + 1}/{args.pairs} done", file=sys.stderr)

    report = {"transport": args.transport, "pairs": args.pairs,
              "before": args.before, "after": args.after, "modes": {}}
    for mode in runs["before"][0]:
        print(f"== {mode} mode, {args.transport}, median of {args.pairs} runs each")
        print(f"  {'figure':28s} {'before':>12s} {'after':>12s}  after/before")
        rows = []
        for label, path, unit, higher_better in FIGURES:
            b = [figure(r[mode], path, unit) for r in runs["before"]]
            a = [figure(r[mode], path, unit) for r in runs["after"]]
            b = [x for x in b if x is not None]
            a = [x for x in a if x is not None]
            if not a or not b:
                continue
            mb, ma = statistics.median(b), statistics.median(a)
            ratio = ma / mb if mb else float("nan")
            print(f"  {label:28s} {mb:12.2f} {ma:12.2f}  {ratio:5.2f}  {unit}"
                  f"{' (higher is better)' if higher_better else ''}")
            rows.append({"figure": label, "unit": unit, "higher_is_better": higher_better,
                         "before": b, "after": a, "before_median": mb,
                         "after_median": ma, "after_over_before": ratio})
        report["modes"][mode] = rows
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
