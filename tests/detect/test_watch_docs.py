"""The watch guide states the defaults of the options it documents as the code has them (the
parser's defaults and the probe's), so that docs and defaults cannot drift apart (issue 29)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from stragglers.cli import build_parser
from stragglers.probe.settings import ProbeConfig

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "watch.md"


def _watch_parser() -> argparse.ArgumentParser:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["watch"]


def _default(option: str) -> object:
    p = _watch_parser()
    return next(a.default for a in p._actions if option in a.option_strings)


def _shown(value: object) -> str:
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def test_the_guide_states_the_option_defaults_of_the_code() -> None:
    text = " ".join(GUIDE.read_text().split())
    for option in ("--poll", "--idle-timeout", "--wait-timeout", "--window"):
        want = _shown(_default(option))
        found = re.findall(rf"`{option}[^`]*` \(default ([^),;:]+)", text)
        assert found, f"the guide gives no default for {option}"
        assert all(f == want for f in found), (option, found, want)


def test_the_guide_states_the_probe_defaults_of_the_code() -> None:
    text = " ".join(GUIDE.read_text().split())
    cfg = ProbeConfig()
    for name in ("live", "flush_interval_s", "push_live"):
        found = re.findall(rf"`{name}` \(default `?([^)`]+)`?\)", text)
        assert found, f"the guide gives no default for ProbeConfig.{name}"
        assert all(f == _shown(getattr(cfg, name)) for f in found), (name, found)
