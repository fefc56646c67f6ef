"""Crash blame of the recovery driver on jobs whose ranks exit together (docs/guides/recover.md).

A fake job of 4 ranks without torch (``tests/recover/fake_rank.py``: heartbeats, one process
per rank under ``stragglers.recover.driver``), rank 2 (or, frozen, rank 1) the culprit, in
``--repeats`` fresh runs per case:

* ``crash-together``: rank 2 exits with status 3 (``os._exit``, nothing reported); the three
  others exit with status 1 some 30 ms later, reporting nothing;
* ``crash-same-code``: the same, rank 2 exiting with status 1 too: only exit times tell;
* ``crash-reported``: the others report ``comm_error`` before they exit;
* ``frozen-timeout``: rank 1 freezes; the others time out in their call 3 s later and exit,
  reporting ``comm_error``: only its stale heartbeat names it.

It prints, per case, how often exactly the culprit was blamed, the rule that named it, and the
spread of the exit times the driver measured (``pidfd``).

    python bench/bench_blame.py [--repeats 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path

from stragglers.recover.driver import DriverConfig, run_driver

FAKE = str(Path(__file__).resolve().parents[1] / "tests" / "recover" / "fake_rank.py")
CASES = {"crash-together": [2], "crash-same-code": [2], "crash-reported": [2],
         "frozen-timeout": [1]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()
    print(f"fake job of 4 ranks under stragglers run (heartbeat 0.2 s, timeout 4 s), "
          f"{args.repeats} runs per case")
    print("| case | culprit blamed alone | blamed by | others' exits after the first (ms, "
          "median) |")
    print("| --- | ---: | --- | ---: |")
    for case, culprit in CASES.items():
        right, rules, gaps = 0, Counter(), []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as tmp:
                res = run_driver(DriverConfig(
                    (sys.executable, FAKE, case), slots=4, ckpt_dir=f"{tmp}/ck",
                    out_dir=f"{tmp}/out", heartbeat_s=0.2, timeout_s=4.0, poll_s=0.05,
                    max_restarts=0, fr_wait_s=0.5))
            inc = res.incidents[0].to_dict()
            right += inc["culprit_ranks"] == culprit
            rules[inc["evidence"].get("blamed_by", inc["evidence"].get("localised_by"))] += 1
            after = [t for t in inc["evidence"].get("exit_after_first_s", {}).values() if t > 0]
            if after:
                gaps.append(statistics.median(after) * 1000)
        gap = f"{statistics.median(gaps):.0f}" if gaps else "-"
        print(f"| {case} | {right}/{args.repeats} | "
              f"{', '.join(f'{k} {v}' for k, v in rules.most_common())} | {gap} |")


if __name__ == "__main__":
    main()
