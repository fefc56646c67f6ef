"""Argparse ``type=`` functions for numeric options, shared by every command.

Each one parses the option's text and raises :class:`argparse.ArgumentTypeError` with a
short reason when the value is not finite or outside its meaningful range (NaN, inf, a
negative or zero value where it makes no sense), so that argparse ends with exit 2 and one
line naming the option (``stragglers synth: error: argument --jitter: ...``)::

    p.add_argument("--jitter", type=non_negative_float, default=0.0)
    p.add_argument("--slow-worker", type=worker_factor, action="append", default=[])

The range factories (``finite_range``, ``int_range``) make a type for any other range; the
composite types (``worker_factor``, ``prob_seconds``, ``rank_value``, ``rank_factor``,
``slowdown_factors``, ``span``, ``key_value``, ``rank_list``, ``rank_pair``,
``cost_coefficients``) check each part the same way.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

#: Largest integer an option accepts (larger ones are always a typo or an attack on memory;
#: the sizes they stand for are bounded again by :mod:`stragglers.limits`).
MAX_INT = 2**62


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _integer(text: str) -> int:
    stripped = text.strip()
    if len(stripped.lstrip("+-")) > 18:
        raise argparse.ArgumentTypeError(f"integer too large: {text[:40]!r}")
    try:
        return int(stripped)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def finite_float(text: str) -> float:
    """Any finite number."""
    return _number(text)


def positive_float(text: str) -> float:
    """A finite number > 0."""
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number >= 0."""
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def probability(text: str) -> float:
    """A number in [0, 1]."""
    value = _number(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a probability in [0, 1], got {text!r}")
    return value


def factor(text: str) -> float:
    """A multiplicative factor: a finite number > 0 (1 means unchanged)."""
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a factor > 0, got {text!r}")
    return value


def slowdown_factor(text: str) -> float:
    """A factor >= 1 (a straggler is never faster than its peers)."""
    value = _number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a factor >= 1, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """An integer >= 0."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def nice_increment(text: str) -> int:
    """A scheduling-priority increment: an integer in [0, 19] (nice's range)."""
    value = _integer(text)
    if not 0 <= value <= 19:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, 19], got {text!r}")
    return value


def any_int(text: str) -> int:
    """Any integer of at most 18 digits."""
    return _integer(text)


def finite_range(low: float, *, inclusive: bool = True, high: float | None = None
                 ) -> Callable[[str], float]:
    """The type of a finite number ``>= low`` (``> low`` unless ``inclusive``), at most
    ``high`` when given: ``finite_range(0, inclusive=False, high=3600)``."""
    rng = f"{'>=' if inclusive else '>'} {low:g}" + ("" if high is None else f" and <= {high:g}")

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        ok = math.isfinite(value) and (value >= low if inclusive else value > low)
        if not ok or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"expected a finite number {rng}, got {text!r}")
        return value

    return parse


def int_range(low: int, high: int | None = None) -> Callable[[str], int]:
    """The type of an integer ``>= low``, at most ``high`` when given: ``int_range(1, 256)``."""
    rng = f">= {low}" + ("" if high is None else f" and <= {high}")

    def parse(text: str) -> int:
        value = _integer(text)
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"expected an integer {rng}, got {text!r}")
        return value

    return parse


def port(text: str) -> int:
    """A TCP port, 0-65535 (0: any free port)."""
    value = _integer(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port 0-65535, got {text!r}")
    return value


def _pair(text: str, sep: str, shape: str) -> tuple[str, str]:
    parts = text.split(sep)
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"expected {shape}, got {text!r}")
    return parts[0], parts[1]


def _part(parse: Callable[[str], float | int], text: str, what: str, whole: str
          ) -> float | int:
    try:
        return parse(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{what} in {whole!r}: {exc}") from None


def loader_delay(text: str) -> tuple[int, float, float]:
    """``D:SECONDS[:PROB]``: a DP rank (integer >= 0), a delay > 0 and a probability in
    (0, 1] (default 1: every step)."""
    shape = "D:SECONDS[:PROB]"
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise argparse.ArgumentTypeError(f"expected {shape}, got {text!r}")
    d = int(_part(non_negative_int, parts[0], "DP rank", text))
    sec = float(_part(finite_range(0.0, inclusive=False), parts[1], "seconds", text))
    prob = 1.0
    if len(parts) == 3:
        prob = float(_part(probability, parts[2], "probability", text))
        if prob == 0:
            raise argparse.ArgumentTypeError(f"probability in {text!r}: must be above 0")
    return d, sec, prob


def worker_factor(text: str) -> tuple[int, int, float]:
    """``D,S:FACTOR``: DP rank, stage (integers >= 0) and a factor > 0."""
    shape = "DP,STAGE:FACTOR"
    where, fac = _pair(text, ":", shape)
    d, s = _pair(where, ",", shape)
    return (int(_part(non_negative_int, d, "DP rank", text)),
            int(_part(non_negative_int, s, "stage", text)),
            float(_part(factor, fac, "factor", text)))


def prob_seconds(text: str) -> tuple[float, float]:
    """``PROB:SECONDS``: a probability in [0, 1] and a duration >= 0."""
    p, sec = _pair(text, ":", "PROB:SECONDS")
    return (float(_part(probability, p, "probability", text)),
            float(_part(non_negative_float, sec, "seconds", text)))


def rank_value(text: str) -> tuple[int, float]:
    """``RANK:VALUE``: a rank (an integer >= 0) and a number > 0."""
    rank, value = _pair(text, ":", "RANK:VALUE")
    return (int(_part(non_negative_int, rank, "rank", text)),
            float(_part(positive_float, value, "value", text)))


def rank_factor(text: str) -> tuple[int, float]:
    """``RANK:FACTOR``: a rank (an integer >= 0) and a slowdown factor >= 1."""
    rank, fac = _pair(text, ":", "RANK:FACTOR")
    return (int(_part(non_negative_int, rank, "rank", text)),
            float(_part(slowdown_factor, fac, "factor", text)))


def slowdown_factors(text: str) -> list[float]:
    """Comma-separated factors >= 1 (``1.2,1.5,2.0``), at least one."""
    try:
        values = [slowdown_factor(s) for s in text.split(",") if s.strip()]
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"expected factors >= 1 like 1.2,1.5,2.0: {exc}"
                                         ) from None
    if not values:
        raise argparse.ArgumentTypeError("no factor given")
    return values


def span(text: str) -> tuple[int, int]:
    """``MIN-MAX``: two integers >= 0 (their order is the caller's to check)."""
    lo, hi = _pair(text, "-", "MIN-MAX (integers)")
    return (int(_part(non_negative_int, lo, "MIN", text)),
            int(_part(non_negative_int, hi, "MAX", text)))


def key_value(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` with a non-empty key (the value may be empty or hold ``=``)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def rank_list(text: str) -> list[int]:
    """``R1,R2,...``: integers (empty items skipped; which ranks exist is the job's to
    check)."""
    out = []
    for i, tok in enumerate(t for t in text.split(",") if t.strip()):
        try:
            out.append(int(tok))
        except ValueError:
            raise argparse.ArgumentTypeError(f"rank {i + 1} {tok[:40]!r} is not an integer"
                                             ) from None
    return out


def rank_pair(text: str) -> tuple[int, int]:
    """``A,B``: the two ranks of a link (integers, as :func:`rank_list`)."""
    ranks = rank_list(text)
    if len(ranks) != 2:
        raise argparse.ArgumentTypeError(f"expected two ranks A,B, got {len(ranks)}")
    return ranks[0], ranks[1]


def cost_coefficients(text: str) -> tuple[float, float, float]:
    """``A,B,C``: the coefficients of a micro-batch cost ``a*sum L^2 + b*sum L + c``, finite
    numbers >= 0, ``a`` and ``b`` not both 0."""
    parts = text.split(",")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"expected A,B,C (three numbers), got {text[:60]!r}")
    vals = []
    for name, tok in zip("abc", parts, strict=True):
        try:
            v = float(tok)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} {tok[:40]!r} is not a number") from None
        if not math.isfinite(v) or v < 0:
            raise argparse.ArgumentTypeError(f"{name} must be a finite number >= 0, got "
                                             f"{tok[:40]!r}")
        vals.append(v)
    if vals[0] == 0 and vals[1] == 0:
        raise argparse.ArgumentTypeError("a and b are both 0: every sequence would cost "
                                         "nothing")
    return vals[0], vals[1], vals[2]


def add_later(parser: argparse.ArgumentParser,
              adder: Callable[[argparse.ArgumentParser], None]) -> None:
    """Call ``adder(parser)`` to add the parser's arguments only when the parser is used
    (its command is parsed, or its ``--help`` shown), not when the command line is built:
    for arguments whose definitions live in a heavy module (start-up of every other
    command)."""
    plain_parse, plain_help, plain_usage = (parser.parse_known_args, parser.format_help,
                                            parser.format_usage)
    done = False

    def ensure() -> None:
        nonlocal done
        if not done:
            done = True
            adder(parser)

    def parse_known_args(*args: object, **kwargs: object) -> tuple[argparse.Namespace,
                                                                     list[str]]:
        ensure()
        return plain_parse(*args, **kwargs)  # type: ignore[arg-type]

    def format_help() -> str:  # the generated CLI reference asks for it without parsing
        ensure()
        return plain_help()

    def format_usage() -> str:
        ensure()
        return plain_usage()

    # instance methods, replaced on this parser only
    setattr(parser, "parse_known_args", parse_known_args)  # noqa: B010
    setattr(parser, "format_help", format_help)  # noqa: B010
    setattr(parser, "format_usage", format_usage)  # noqa: B010
