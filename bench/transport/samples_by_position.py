#!/usr/bin/python3
"""Where in its round each implementation's slow round trips fall.

Reads a `ferry-bench-transport --samples FILE` file and prints, per mode,
size and implementation, the share of round trips slower than twice that
implementation's median, by twentieth of the round (all rounds together),
and how much each twentieth adds to the mean. A tail that sits at the start
of every round is state that went cold during another implementation's
turn (the fabric plugin's receive buffers did: rx_path.cc); one spread
evenly is the machine's or the implementation's steady behaviour.

Usage: samples_by_position.py FILE [--buckets N]
"""
import argparse
import collections
import statistics


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--buckets", type=int, default=20,
                    help="parts of a round (fewer when rounds are shorter)")
    args = ap.parse_args()
    rounds = collections.defaultdict(list)  # (mode, size, label) -> [[ns]]
    with open(args.file) as f:
        for n, line in enumerate(f, 1):
            head, sep, values = line.rstrip("\n").partition("\t")
            fields = head.split(" ", 3)
            if not sep or len(fields) != 4:
                raise SystemExit(f"{args.file}:{n}: not a --samples line")
            mode, size, _round, label = fields
            rounds[(mode, int(size), label)].append(
                [float(v) for v in values.split()])
    for (mode, size, label), rs in sorted(rounds.items()):
        rs = [r for r in rs if r]
        if not rs:
            continue
        every = [v for r in rs for v in r]
        nb = min(args.buckets, min(len(r) for r in rs))
        median = statistics.median(every)
        slow, count, excess = [0] * nb, [0] * nb, [0.0] * nb
        for r in rs:
            for i, v in enumerate(r):
                b = i * nb // len(r)
                count[b] += 1
                excess[b] += v - median
                slow[b] += v > 2 * median
        print(f"{mode} {size} B  {label}: {len(rs)} rounds, median {median:.0f} ns, "
              f"mean {statistics.fmean(every):.0f} ns")
        print("  % over 2x median:", " ".join(
            f"{100 * s / c:4.1f}" if c else "   -" for s, c in zip(slow, count)))
        print("  mean - median, ns:", " ".join(
            f"{e / c:4.0f}" if c else "   -" for e, c in zip(excess, count)))


if __name__ == "__main__":
    main()
