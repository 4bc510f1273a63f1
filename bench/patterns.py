"""Template mining: our grouping accuracy and speed against Drain's published accuracy and drain3.

Reproduce (from the repository root, after ``pip install drain3``)::

    python bench/patterns.py                 # loghub 2k samples from tests/fixtures/corpus/loghub
    python bench/patterns.py --repeat 100    # the large run: the four samples repeated 100 times
    observe demo --dir /tmp/demo && python bench/patterns.py --store /tmp/demo/store   # plus a store

Per dataset: our accuracy (``queries.patterns.template_ids`` on loghub's ``Content``), Drain's
published accuracy on the same sample (Zhu et al., ICSE-SEIP 2019), drain3's accuracy and lines/s
(its default ``TemplateMinerConfig`` plus the masking of drain3's example ``drain3.ini``), ours, and
the speed ratio. Then the same for all four samples concatenated and repeated to about 200k lines
(the repeats are exact, so after masking they add no distinct messages: this times the per-line
polars work), and for 200k synthetic lines whose variables are random words that no mask catches
(nearly every line distinct: this times the clustering of distinct messages).
"""
from __future__ import annotations

import argparse
import random
import string
import sys
import time
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from queries.patterns import grouping_accuracy, template_ids

LOGHUB = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "corpus" / "loghub"
DRAIN = {"HPC": 0.887, "BGL": 0.963, "Thunderbird": 0.955, "Linux": 0.690}
# drain3's example drain3.ini masking (without its `executed cmd` rule)
DRAIN3_MASKS = [
    (r"((?<=[^A-Za-z0-9])|^)(([0-9a-f]{2,}:){3,}([0-9a-f]{2,}))((?=[^A-Za-z0-9])|$)", "ID"),
    (r"((?<=[^A-Za-z0-9])|^)(\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})((?=[^A-Za-z0-9])|$)", "IP"),
    (r"((?<=[^A-Za-z0-9])|^)([0-9a-f]{6,} ?){3,}((?=[^A-Za-z0-9])|$)", "SEQ"),
    (r"((?<=[^A-Za-z0-9])|^)([0-9A-F]{4} ?){4,}((?=[^A-Za-z0-9])|$)", "SEQ"),
    (r"((?<=[^A-Za-z0-9])|^)(0x[a-f0-9A-F]+)((?=[^A-Za-z0-9])|$)", "HEX"),
    (r"((?<=[^A-Za-z0-9])|^)([\-\+]?\d+)((?=[^A-Za-z0-9])|$)", "NUM"),
]


def drain3(lines: list[str]) -> tuple[list[int], float]:
    """drain3's cluster id per line and the seconds it took."""
    from drain3 import TemplateMiner
    from drain3.masking import MaskingInstruction
    from drain3.template_miner_config import TemplateMinerConfig

    config = TemplateMinerConfig()
    config.masking_instructions = [MaskingInstruction(p, m) for p, m in DRAIN3_MASKS]
    miner = TemplateMiner(config=config)
    t0 = time.perf_counter()
    ids = [miner.add_log_message(line)["cluster_id"] for line in lines]
    return ids, time.perf_counter() - t0


def ours(content: pl.Series, runs: int = 3) -> tuple[pl.Series, float]:
    """Our template id per line and the best of ``runs`` timings."""
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        ids = template_ids(content).get_column("template_id")
        best = min(best, time.perf_counter() - t0)
    return ids, best


def row(name: str, content: pl.Series, truth: pl.Series | None, drain: float | None) -> None:
    ids, t_ours = ours(content)
    d3, t_d3 = drain3(content.to_list())
    n = content.len()
    nan = float("nan")
    acc, acc_d3 = (nan, nan) if truth is None else (grouping_accuracy(ids, truth), grouping_accuracy(pl.Series(d3), truth))
    print(f"{name:14s} {n:>8,d} {acc:8.3f} {drain if drain is not None else nan:7.3f} {acc_d3:7.3f} "
          f"{n / t_ours:>12,.0f} {n / t_d3:>12,.0f} {t_d3 / t_ours:7.1f}x")


FREE_TEXT = [
    "session opened for user {w} by {w}",
    "cannot open file {w} for {w} {w}",
    "connection from {w}.example.com port {n} closed by {w}",
    "job {w} of user {w} finished in partition {w}",
]


def free_text(n: int, seed: int = 0) -> pl.DataFrame:
    """``n`` lines of the FREE_TEXT templates with random words for variables; EventId = template index."""
    rng = random.Random(seed)
    word = lambda: "".join(rng.choices(string.ascii_lowercase, k=rng.randint(4, 10)))
    rows = [(i, FREE_TEXT[i].replace("{n}", str(rng.randint(1, 65535))))
            for i in (rng.randrange(len(FREE_TEXT)) for _ in range(n))]
    lines = [t.replace("{w}", "%s") % tuple(word() for _ in range(t.count("{w}"))) for _, t in rows]
    return pl.DataFrame({"Content": lines, "EventId": [str(i) for i, _ in rows]})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=25, help="repeats of the four samples for the large run")
    ap.add_argument("--store", help="also time both on the messages of this observe store (e.g. observe demo's)")
    args = ap.parse_args()
    print(f"{'dataset':14s} {'lines':>8s} {'ours':>8s} {'Drain':>7s} {'drain3':>7s} "
          f"{'ours lines/s':>12s} {'drain3 l/s':>12s} {'speedup':>8s}")
    frames = []
    for name, drain in DRAIN.items():
        df = pl.read_csv(LOGHUB / f"{name}_2k.log_structured.csv", infer_schema=False)
        df = df.select(pl.col("Content"), (pl.lit(name + ":") + pl.col("EventId")).alias("EventId"))
        frames.append(df)
        row(name, df.get_column("Content"), df.get_column("EventId"), drain)
    big = pl.concat([pl.concat(frames)] * args.repeat)
    row(f"all x{args.repeat}", big.get_column("Content"), big.get_column("EventId"), None)
    free = free_text(big.height)
    row("free text", free.get_column("Content"), free.get_column("EventId"), None)
    if args.store:
        from observe.store import Store

        messages = Store(args.store).scan().select("message").collect().get_column("message").fill_null("")
        row("store", messages, None, None)


if __name__ == "__main__":
    main()
