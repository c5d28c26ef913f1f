"""Summarises scripts/torch-rpc-suite.sh's JUnit files as Markdown: per
class and backend, passed / failed / skipped (a test passes only if it
passed in every run it had), then each test a FERRY backend fails that
TENSORPIPE passes, with the first line of its failure. A backend may have
fewer runs than --runs (TENSORPIPE is the reference and usually runs once):
each cell says how many runs it merges."""

import argparse
import os
import xml.etree.ElementTree as ET

PREFIX = {"tensorpipe": "TensorPipe", "ferry-tcp": "FerryTcp", "ferry-shm": "FerryShm"}


def outcomes(path):
    """{test name: ("passed"|"failed"|"skipped", first line of why)}."""
    if not os.path.exists(path):
        return None
    result = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name")
        status, why = "passed", ""
        for tag in ("failure", "error"):
            node = case.find(tag)
            if node is not None:
                status = "failed"
                text = (node.get("message") or node.text or "").strip()
                why = text.splitlines()[0][:160] if text else tag
        if status == "passed" and case.find("skipped") is not None:
            status = "skipped"
        result[name] = (status, why)
    return result


def merge(runs):
    """A test passes when it passed in every run; else its worst outcome."""
    merged = {}
    for r in runs:
        for name, (status, why) in r.items():
            old = merged.get(name)
            if old is None or (old[0] != "failed" and status == "failed"):
                merged[name] = (status, why)
    return merged


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--backends", required=True)
    ap.add_argument("--classes", required=True)
    a = ap.parse_args()
    backends, classes = a.backends.split(), a.classes.split()
    table = {}
    for b in backends:
        for c in classes:
            runs = [outcomes(os.path.join(a.out, "%s-%s-%d.xml" % (b, c, i)))
                    for i in range(1, a.runs + 1)]
            runs = [r for r in runs if r is not None]
            table[b, c] = (merge(runs), len(runs)) if runs else None

    print("| class | " + " | ".join("%s pass/fail/skip" % b for b in backends) + " |")
    print("|---|" + "---|" * len(backends))
    totals = {b: [0, 0, 0] for b in backends}
    for c in classes:
        cells = []
        for b in backends:
            r = table[b, c]
            if r is None:
                cells.append("not run")
                continue
            merged, nruns = r
            n = [sum(1 for s, _ in merged.values() if s == k)
                 for k in ("passed", "failed", "skipped")]
            totals[b] = [x + y for x, y in zip(totals[b], n)]
            cells.append("%d / %d / %d (%s)" % (*n, "1 run" if nruns == 1 else "%d runs" % nruns))
        print("| %s | %s |" % (c, " | ".join(cells)))
    print("| **total** | %s |" % " | ".join("%d / %d / %d" % tuple(totals[b]) for b in backends))

    if "tensorpipe" in backends:
        for b in backends:
            if b == "tensorpipe":
                continue
            passes_there, not_run_there = [], []
            for c in classes:
                if table[b, c] is None:
                    continue
                ref = table["tensorpipe", c][0] if table["tensorpipe", c] else {}
                for name, (status, why) in sorted(table[b, c][0].items()):
                    if status != "failed":
                        continue
                    there = ref.get(name, ("not run",))[0]
                    if there == "passed":
                        passes_there.append("- %s.%s: %s" % (c, name, why))
                    elif there == "not run":
                        not_run_there.append("- %s.%s: %s" % (c, name, why))
            print("\n%s fails, TENSORPIPE passes:\n" % b)
            print("\n".join(passes_there) or "- none")
            if not_run_there:
                print("\n%s fails, TENSORPIPE not run on it:\n" % b)
                print("\n".join(not_run_there))


if __name__ == "__main__":
    main()
