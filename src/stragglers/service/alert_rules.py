"""Alert rules: a YAML file given to ``stragglers serve --alerts FILE``.

::

    webhook: http://127.0.0.1:9000/hook   # where alerts are POSTed (a rule may override it)
    alertmanager: http://127.0.0.1:9093   # an Alertmanager: alerts go to its /api/v2/alerts
    timeout_s: 5                          # per request, each destination on its own
    resend_s: 60                          # open alerts sent again to the Alertmanager
    stale_s: 3600                         # a job quiet this long: its open alerts close
    realert_s: 3600                       # re-alert interval per culprit (job, rule,
                                          # cause; an onset rule's: job, rule, rank)
    rules:
      - name: slow-training                # S >= 1.2 for jobs matching a pattern
        jobs: "train-*"
        slowdown: 1.2
      - name: bad-worker                   # a 'worker' verdict with confidence >= 0.8
        cause: worker
        confidence: 0.8
      - name: fail-slow                    # a detection onset losing >= 15% throughput
        onset: 0.15

A session rule (``slowdown``, ``cause``, ``confidence``: each given one must hold) is
checked when a session's analysis is done; an onset rule when the detector reports an
onset. Every problem is one line naming the file and the field.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from stragglers.analysis.verdict import Cause
from stragglers.errors import InputError
from stragglers.inputs import load_yaml

SESSION_KEYS = ("slowdown", "cause", "confidence")
RULE_KEYS = ("name", "jobs", "webhook", "realert_s", "onset", *SESSION_KEYS)
FILE_KEYS = ("webhook", "alertmanager", "realert_s", "timeout_s", "resend_s", "stale_s",
             "rules")
DEFAULT_REALERT_S = 3600.0


@dataclass(frozen=True)
class Rule:
    name: str
    jobs: str = "*"
    slowdown: float | None = None
    cause: str | None = None
    confidence: float | None = None
    onset: float | None = None
    webhook: str | None = None
    realert_s: float = DEFAULT_REALERT_S

    @property
    def on_sessions(self) -> bool:
        return self.onset is None

    def matches_job(self, job: str) -> bool:
        return fnmatch.fnmatchcase(job, self.jobs)

    def matches_session(self, slowdown: float, cause: str, confidence: float) -> bool:
        return (self.on_sessions
                and (self.slowdown is None or slowdown >= self.slowdown)
                and (self.cause is None or cause == self.cause)
                and (self.confidence is None or confidence >= self.confidence))


@dataclass(frozen=True)
class AlertConfig:
    rules: tuple[Rule, ...] = ()
    webhook: str | None = None
    timeout_s: float = 5.0
    alertmanager: str | None = None
    resend_s: float = 60.0
    stale_s: float = 3600.0  # 0: open alerts of quiet jobs stay open

    @classmethod
    def from_file(cls, path: str | Path) -> AlertConfig:
        return cls.from_dict(load_yaml(path, "alert rules file"), str(path))

    @classmethod
    def from_dict(cls, doc: Any, source: str) -> AlertConfig:
        r = _Reader(source)
        doc = r.mapping(doc, "(document)", FILE_KEYS)
        webhook = r.url(doc.get("webhook"), "webhook")
        realert = r.number(doc.get("realert_s", DEFAULT_REALERT_S), "realert_s", 0.0)
        timeout = r.number(doc.get("timeout_s", 5.0), "timeout_s", 0.1, 3600.0)
        alertmanager = r.url(doc.get("alertmanager"), "alertmanager")
        resend = r.number(doc.get("resend_s", 60.0), "resend_s", 1.0, 86400.0)
        stale = r.number(doc.get("stale_s", 3600.0), "stale_s", 0.0, 365 * 86400.0)
        raw_rules = doc.get("rules", [])
        if not isinstance(raw_rules, list):
            raise InputError(f"{source}: field 'rules' must be a list of rules")
        rules = []
        names: set[str] = set()
        for i, raw in enumerate(raw_rules):
            where = f"rules[{i}]"
            rd = r.mapping(raw, where, RULE_KEYS)
            name = rd.get("name", f"rule-{i + 1}")
            if not isinstance(name, str) or not name or len(name) > 64:
                raise InputError(f"{source}: field '{where}.name' must be a string of 1-64 "
                                 "characters")
            if name in names:
                raise InputError(f"{source}: field '{where}.name': {name!r} is used twice")
            names.add(name)
            jobs = rd.get("jobs", "*")
            if not isinstance(jobs, str) or not jobs:
                raise InputError(f"{source}: field '{where}.jobs' must be a glob pattern")
            cause = rd.get("cause")
            if cause is not None and cause not in {c.value for c in Cause}:
                raise InputError(f"{source}: field '{where}.cause': {cause!r} is not a verdict "
                                 f"cause ({', '.join(c.value for c in Cause)})")
            rule = Rule(
                name=name, jobs=jobs,
                slowdown=r.optional(rd.get("slowdown"), f"{where}.slowdown", 1.0),
                cause=cause,
                confidence=r.optional(rd.get("confidence"), f"{where}.confidence", 0.0, 1.0),
                onset=r.optional(rd.get("onset"), f"{where}.onset", 0.0, 1.0),
                webhook=r.url(rd.get("webhook"), f"{where}.webhook") or webhook,
                realert_s=r.number(rd.get("realert_s", realert), f"{where}.realert_s", 0.0))
            given = [k for k in SESSION_KEYS if rd.get(k) is not None]
            if rule.onset is not None and given:
                raise InputError(f"{source}: field '{where}': an onset rule cannot also have "
                                 f"{', '.join(given)}")
            if rule.onset is None and not given:
                raise InputError(f"{source}: field '{where}': give at least one of slowdown, "
                                 "cause, confidence or onset")
            rules.append(rule)
        return cls(rules=tuple(rules), webhook=webhook, timeout_s=timeout,
                   alertmanager=alertmanager, resend_s=resend, stale_s=stale)


class _Reader:
    def __init__(self, source: str) -> None:
        self.source = source

    def mapping(self, value: Any, field: str, keys: tuple[str, ...]) -> dict[str, Any]:
        if value is None and field == "(document)":
            return {}
        if not isinstance(value, dict):
            raise InputError(f"{self.source}: field '{field}' must be a mapping")
        unknown = [k for k in value if k not in keys]
        if unknown:
            raise InputError(f"{self.source}: field '{field}': unknown key {unknown[0]!r} "
                             f"(known: {', '.join(keys)})")
        return value

    def number(self, value: Any, field: str, low: float, high: float = math.inf) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InputError(f"{self.source}: field '{field}' must be a number, got "
                             f"{value!r:.40}")
        x = float(value)
        if not (math.isfinite(x) or high == math.inf) or not low <= x <= high:
            raise InputError(f"{self.source}: field '{field}' must be between {low:g} and "
                             f"{high:g}, got {value!r:.40}")
        return x

    def optional(self, value: Any, field: str, low: float, high: float = math.inf
                 ) -> float | None:
        return None if value is None else self.number(value, field, low, high)

    def url(self, value: Any, field: str) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or urlsplit(value).scheme not in ("http", "https") \
                or not urlsplit(value).netloc:
            raise InputError(f"{self.source}: field '{field}' must be an http(s) URL, got "
                             f"{value!r:.60}")
        return value
