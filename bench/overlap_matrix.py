"""Overlapping causes with a known answer: the confusion matrix of the verdict (issue 20).

    python bench/overlap_matrix.py            # every case, then the matrix (Markdown)
    python bench/overlap_matrix.py --only seq>last --evidence

Each case (``stragglers.synth.overlap.CASES``) is generated with both causes, then without
each; the truth is the cause whose removal leaves the smaller S. A few seconds.
"""

from __future__ import annotations

import argparse
import sys

from stragglers.synth.overlap import CASES, evaluate, matrix_markdown


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None, help="case names (default: all)")
    ap.add_argument("--evidence", action="store_true", help="print each verdict's evidence")
    args = ap.parse_args(argv)
    names = {c.name for c in CASES}
    unknown = set(args.only or ()) - names
    if unknown:
        print(f"overlap_matrix: unknown case(s) {', '.join(sorted(unknown))}; known: "
              + ", ".join(sorted(names)), file=sys.stderr)
        return 2
    rows = []
    for case in CASES:
        if args.only and case.name not in args.only:
            continue
        row = evaluate(case)
        rows.append(row)
        if args.evidence:
            print(f"## {case.name}: truth {row.truth.truth}, verdict {row.verdict}")
            print("\n".join(f"  - {e}" for e in row.evidence))
    print(matrix_markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
