"""Build AR×K: the AR reference trace replicated K times along DP, written as parquet +
metadata into a folder that git ignores.

Copy k gets dp_rank + 4k and rank + 64k. (The issue says rank + 16k, but AR's ranks are
global GPU ranks, 4·(4·stage + dp_rank) with tp = 4, spanning 0..60: + 16k would give two
workers the same rank, which the validator rightly rejects. + 64k = + world_size keeps
every rank unique and the order of ranks within a copy unchanged.)"""

from __future__ import annotations

import argparse
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

REF = Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "traces"


def make_arx(k: int, out: Path, ref: Path = REF) -> tuple[Path, Path]:
    table = pq.read_table(ref / "trace-AR.parquet")
    meta = yaml.safe_load((ref / "meta-AR.yaml").read_text())
    dp = meta["dp_size"]
    parts = []
    for i in range(k):
        t = table
        for name, off in (("dp_rank", dp * i), ("rank", meta["world_size"] * i)):
            col = t.column(name)
            wide = col.cast(pa.int32())
            t = t.set_column(t.column_names.index(name), name,
                             pa.compute.add(wide, pa.scalar(off, pa.int32())))
        parts.append(t)
    out.mkdir(parents=True, exist_ok=True)
    trace = out / f"trace-ARx{k}.parquet"
    pq.write_table(pa.concat_tables(parts), trace)
    meta = dict(meta, dp_size=dp * k, trial_name=f"ARx{k}",
                world_size=meta["world_size"] * k)
    meta_path = out / f"meta-ARx{k}.yaml"
    meta_path.write_text(yaml.safe_dump(meta, sort_keys=False))
    return trace, meta_path


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-k", type=int, default=64)
    ap.add_argument("--out", type=Path, default=Path("bench/out"))
    a = ap.parse_args()
    print(*make_arx(a.k, a.out))
