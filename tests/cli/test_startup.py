"""Start-up: building the command line imports no library of the commands (issue 23, item 6).

``stragglers --help`` took 0.95 s of CPU and an import of a tiny profiler trace 1.2 s, most
of it scipy (detect, mitigate), the simulator and synthetic generator (synth), pandas and
pyarrow, imported to build the parser. The commands import them when they run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from stragglers.cli import defaults

HEAVY = ("scipy", "pandas", "pyarrow", "stragglers.synth.generator", "stragglers.sim",
         "stragglers.evaluation.bocd", "stragglers.testbed.job", "stragglers.trace.io")


def _modules(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json\n"
                          "print(json.dumps(sorted(sys.modules)))"],
                         check=True, capture_output=True, text=True).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


def test_the_parser_imports_no_heavy_library() -> None:
    mods = _modules("from stragglers.cli import build_parser\nbuild_parser()")
    assert not [m for m in HEAVY if m in mods]


def test_import_kineto_of_a_tiny_trace_imports_neither_scipy_nor_pandas(tmp_path: Path
                                                                        ) -> None:
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
           "ts": 0.0, "dur": 100.0, "args": {}},
          {"ph": "X", "cat": "user_annotation", "name": "forward_step mb=0", "pid": 1,
           "tid": 1, "ts": 1.0, "dur": 10.0, "args": {}},
          {"ph": "X", "cat": "user_annotation", "name": "optimizer", "pid": 1, "tid": 1,
           "ts": 20.0, "dur": 10.0, "args": {}}]
    (tmp_path / "r0.json").write_text(json.dumps({"distributedInfo": {"rank": 0,
                                                                      "world_size": 1},
                                                  "traceEvents": ev}))
    (tmp_path / "m.yaml").write_text("dp_size: 1\npp_size: 1\n")
    mods = _modules(f"from stragglers.cli import main\nassert main(['import', 'kineto', "
                    f"{str(tmp_path / 'r0.json')!r}, '--meta', {str(tmp_path / 'm.yaml')!r}, "
                    f"'--out', {str(tmp_path / 'out')!r}]) == 0")
    assert (tmp_path / "out" / "trace.parquet").exists()
    assert not [m for m in ("scipy", "pandas", "stragglers.sim", "stragglers.synth.generator")
                if m in mods]


def test_the_parser_defaults_are_the_libraries() -> None:
    from stragglers.detect.detector import DEFAULT_METHOD
    from stragglers.detect.robust import RobustLevelDetector
    from stragglers.detect.warmup import DEFAULT_MIN_ITERS, DEFAULT_WARMUP_ITERS
    from stragglers.evaluation.bocd import METHODS
    from stragglers.synth.fleet import DEFAULT_MIX
    from stragglers.synth.generator import MAX_SIGMA

    assert defaults.DETECT_METHODS == tuple(METHODS)
    assert defaults.DETECT_DEFAULT_METHOD == DEFAULT_METHOD
    assert defaults.WARMUP_MIN_ITERS == DEFAULT_MIN_ITERS
    assert defaults.ROBUST_WARMUP_ITERS == DEFAULT_WARMUP_ITERS
    assert RobustLevelDetector.default_warmup_iters == DEFAULT_WARMUP_ITERS
    robust = RobustLevelDetector()
    assert {k: getattr(robust, k) for k in defaults.ROBUST_DEFAULTS} == dict(
        defaults.ROBUST_DEFAULTS)
    assert defaults.SYNTH_MAX_SIGMA == MAX_SIGMA
    assert dict(defaults.FLEET_DEFAULT_MIX) == dict(DEFAULT_MIX)


def test_the_example_job_options_are_added_when_the_command_is_used() -> None:
    from stragglers.cli import build_parser

    args = build_parser().parse_args(["probe", "example", "--out-dir", "x", "--dp", "2"])
    assert args.dp == 2 and args.out_dir == "x"
