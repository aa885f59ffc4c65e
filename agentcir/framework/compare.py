"""Tables of finished runs for a paper (``agentcir eval --compare``): one table per benchmark,
rows labelled by what differs between the runs' recipes, the paper's number beside the
reproduced one, exported as markdown, CSV or LaTeX (booktabs).

- FashionIQ: one row per recipe (runs that differ only in ``dataset.category``), R@10 and R@50
  per category (dress, shirt, toptee) and their plain average when all three are there.
- CIRR: R@1/5/10/50, the subset recall R_subset@1/2/3 and Avg ((R@5 + R_subset@1) / 2).
- CIRCO: mAP@5/10/25/50.
- any other benchmark: the numeric metrics its runs report.

A recipe that reproduces a paper's row says so in ``run.paper``, written
``"SOURCE: METRIC VALUE, METRIC VALUE"`` (e.g. ``"OCTOPUS Table 1, CIRCO (ViT-L/14): mAP@5 28.18,
mAP@10 28.66"``; the experiment bundles under ``agentcir/recipes/experiment/`` set it): its row is
followed by a ``paper`` row with those numbers. For FashionIQ the paper's numbers are the
category average.
"""

from __future__ import annotations

import csv
import io
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InputError
from .report import RunInfo, override_labels

log = logging.getLogger(__name__)

#: the columns each benchmark's table shows, in the order papers print them
BENCHMARK_METRICS: dict[str, tuple[str, ...]] = {
    "fashioniq": ("R@10", "R@50"),
    "cirr": ("R@1", "R@5", "R@10", "R@50", "R_subset@1", "R_subset@2", "R_subset@3", "Avg"),
    "circo": ("mAP@5", "mAP@10", "mAP@25", "mAP@50"),
}
TITLES = {
    "fashioniq": "FashionIQ",
    "cirr": "CIRR",
    "circo": "CIRCO",
    "webvid_covr": "WebVid-CoVR",
    "disbench": "DISBench",
}
AVERAGE = "average"

Column = tuple[str, str]  # (group, metric): group is a FashionIQ category, "average", or ""


@dataclass
class Row:
    """One line of a table: a run (or FashionIQ recipe), or the paper's numbers for the row above."""

    label: str
    values: dict[Column, float]
    paper: bool = False
    runs: list[str] = field(default_factory=list)


@dataclass
class Table:
    """One benchmark's comparison."""

    benchmark: str
    columns: list[Column]
    rows: list[Row]

    @property
    def title(self) -> str:
        """The benchmark's name as papers print it (``CIRR``, ``FashionIQ``; else the registry key)."""
        return TITLES.get(self.benchmark, self.benchmark)

    def best(self) -> dict[Column, float]:
        """The highest reproduced value per column (the paper rows do not compete)."""
        out: dict[Column, float] = {}
        for r in self.rows:
            if not r.paper:
                for c, v in r.values.items():
                    if c in self.columns:
                        out[c] = max(out.get(c, v), v)
        return out


def parse_paper(text: str, where: str = "run.paper") -> tuple[str, dict[str, float]]:
    """``"SOURCE: METRIC VALUE, METRIC VALUE"`` -> (source, {metric: value}); an empty text gives
    ``("", {})``. Anything else is an :class:`InputError` naming ``where`` and the expected form."""
    text = (text or "").strip()
    if not text:
        return "", {}
    source, sep, numbers = text.rpartition(":")
    out: dict[str, float] = {}
    for part in numbers.split(","):
        m = re.fullmatch(r"\s*(\S+)\s+(-?\d+(?:\.\d+)?)\s*", part)
        if not sep or not source.strip() or m is None:
            raise InputError(
                f"{where} = {text!r}: expected 'SOURCE: METRIC VALUE, METRIC VALUE' "
                f"(e.g. 'OCTOPUS Table 1, CIRCO: mAP@5 28.18, mAP@10 28.66')"
            )
        out[m.group(1)] = float(m.group(2))
    return source.strip(), out


def _paper_of(run: RunInfo) -> tuple[str, dict[str, float]]:
    return parse_paper(str((run.recipe.get("run") or {}).get("paper") or ""), f"'{run.dir}/recipe.yaml' run.paper")


def _benchmark(run: RunInfo) -> str:
    return str((run.recipe.get("dataset") or {}).get("name") or "") or "runs"


def _numeric(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _without_category(run: RunInfo) -> RunInfo:
    ds = {k: v for k, v in (run.recipe.get("dataset") or {}).items() if k != "category"}
    return RunInfo(run.dir, run.metrics, {**run.recipe, "dataset": ds} if run.recipe else {})


def _fashioniq_rows(runs: list[RunInfo]) -> list[tuple[RunInfo, dict[Column, float], list[str]]]:
    """Per recipe (the runs that differ only in the category): a representative run, the values
    per (category, metric) plus the average when dress, shirt and toptee are all there, the run names."""
    from .eval.metrics import FASHIONIQ_CATEGORIES, fashioniq_average
    from .hashing import stable_hash
    from .recipe import VOLATILE_RUN_FIELDS

    def key(r: RunInfo) -> str:
        rec = _without_category(r).recipe
        run = {k: v for k, v in (rec.get("run") or {}).items() if k not in VOLATILE_RUN_FIELDS}
        return stable_hash({**rec, "run": run}, n=12)

    groups: dict[str, dict[str, RunInfo]] = {}
    for r in runs:
        cat = str((r.recipe.get("dataset") or {}).get("category") or "")
        g = groups.setdefault(key(r), {})
        if cat in g:
            log.warning(
                "two FashionIQ runs of one recipe for category '%s' (%s, %s): the first one is shown",
                cat,
                g[cat].name,
                r.name,
            )
            continue
        g[cat] = r
    out = []
    for g in groups.values():
        values: dict[Column, float] = {}
        for cat, r in g.items():
            for m, v in _numeric(r.metrics.get("final") or {}).items():
                values[(cat, m)] = v
        if all(c in g for c in FASHIONIQ_CATEGORIES):
            avg = fashioniq_average({c: g[c].metrics.get("final") or {} for c in FASHIONIQ_CATEGORIES})
            values.update({(AVERAGE, m): float(v) for m, v in avg.items()})
        out.append((next(iter(g.values())), values, [r.name for r in g.values()]))
    return out


def comparison_tables(runs: list[RunInfo]) -> list[Table]:
    """One :class:`Table` per benchmark (dataset registry key) of ``runs``, in the order the
    benchmarks first appear; rows labelled by what differs between the runs of that table."""
    by_bench: dict[str, list[RunInfo]] = {}
    for r in runs:
        by_bench.setdefault(_benchmark(r), []).append(r)
    tables = []
    for bench, group in by_bench.items():
        if bench == "fashioniq":
            entries = _fashioniq_rows(group)
            labels = override_labels([_without_category(rep) for rep, _, _ in entries])
        else:
            entries = [
                (r, {("", m): v for m, v in _numeric(r.metrics.get("final") or {}).items()}, [r.name]) for r in group
            ]
            labels = override_labels(group)
        rows: list[Row] = []
        for label, (rep, values, names) in zip(labels, entries):
            rows.append(Row(label, values, runs=names))
            source, paper = _paper_of(rep)
            if paper:
                group_ = AVERAGE if bench == "fashioniq" else ""
                rows.append(Row(f"paper ({source})", {(group_, m): v for m, v in paper.items()}, paper=True))
        tables.append(Table(bench, _columns(bench, rows), rows))
    return tables


def _columns(bench: str, rows: list[Row]) -> list[Column]:
    present = [c for r in rows for c in r.values]
    wanted = BENCHMARK_METRICS.get(bench)
    if bench == "fashioniq":
        from .eval.metrics import FASHIONIQ_CATEGORIES

        cols = [(g, m) for g in (*FASHIONIQ_CATEGORIES, AVERAGE) for m in wanted or ()]
        extra = [c for c in dict.fromkeys(present) if c[0] == AVERAGE and c not in cols]  # a paper metric
    elif wanted:
        cols = [("", m) for m in wanted]
        extra = [c for c in dict.fromkeys(present) if c not in cols and any(r.paper and c in r.values for r in rows)]
    else:
        cols, extra = list(dict.fromkeys(present)), []
    return [c for c in cols if c in present] + extra


# -- renderings -----------------------------------------------------------------------------
def _num(v: float | None) -> str:
    return "" if v is None else f"{v:.2f}"


def _header(c: Column) -> str:
    return f"{c[0]} {c[1]}" if c[0] else c[1]


def to_markdown(table: Table) -> str:
    """``## Title`` and a markdown table; the best reproduced value per column in bold."""
    best = table.best()
    out = [
        f"## {table.title}",
        "",
        "| | " + " | ".join(_header(c) for c in table.columns) + " |",
        "|---|" + "---|" * len(table.columns),
    ]
    for r in table.rows:
        cells = []
        for c in table.columns:
            v = r.values.get(c)
            cells.append(f"**{_num(v)}**" if v is not None and not r.paper and v == best.get(c) else _num(v))
        out.append(f"| {r.label} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def to_csv(table: Table) -> str:
    """One header line (``benchmark, row, paper, <columns>``), one line per row."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["benchmark", "row", "paper", *(_header(c) for c in table.columns)])
    for r in table.rows:
        w.writerow(
            [table.benchmark, r.label, "yes" if r.paper else "", *(_num(r.values.get(c)) for c in table.columns)]
        )
    return buf.getvalue()


_TEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def tex_escape(text: str) -> str:
    """``text`` with LaTeX's special characters escaped."""
    return "".join(_TEX.get(ch, ch) for ch in text)


def to_latex(table: Table) -> str:
    """A booktabs ``table`` (``\\toprule``/``\\midrule``/``\\bottomrule``); FashionIQ's categories as
    column groups (``\\multicolumn`` + ``\\cmidrule``); the best reproduced value per column in
    bold; the paper's rows in italics."""
    best = table.best()
    cols = table.columns
    out = [
        r"\begin{table}[t]",
        r"\centering",
        f"\\caption{{{tex_escape(table.title)}}}",
        r"\begin{tabular}{l" + "r" * len(cols) + "}",
        r"\toprule",
    ]
    groups: list[tuple[str, int]] = []
    for g, _ in cols:
        if groups and groups[-1][0] == g:
            groups[-1] = (g, groups[-1][1] + 1)
        else:
            groups.append((g, 1))
    if any(g for g, _ in groups):
        heads, rules, at = [], [], 2
        for g, n in groups:
            heads.append(f"\\multicolumn{{{n}}}{{c}}{{{tex_escape(g.capitalize())}}}" if g else " & " * (n - 1))
            if g:
                rules.append(f"\\cmidrule(lr){{{at}-{at + n - 1}}}")
            at += n
        out.append(" & " + " & ".join(heads) + r" \\")
        out.append(" ".join(rules))
    out.append(" & " + " & ".join(tex_escape(m) for _, m in cols) + r" \\")
    out.append(r"\midrule")
    for r in table.rows:
        cells = []
        for c in cols:
            v = r.values.get(c)
            s = _num(v)
            if v is not None and r.paper:
                s = f"\\textit{{{s}}}"
            elif v is not None and v == best.get(c):
                s = f"\\textbf{{{s}}}"
            cells.append(s)
        label = f"\\textit{{{tex_escape(r.label)}}}" if r.paper else tex_escape(r.label)
        out.append(f"{label} & " + " & ".join(cells) + r" \\")
    out += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(out) + "\n"


def export_paths(path: str | Path, tables: list[Table]) -> list[Path]:
    """Where each table's CSV goes: ``path`` itself for one table; ``<stem>-<benchmark><suffix>``
    beside it for several."""
    p = Path(path)
    if len(tables) == 1:
        return [p]
    return [p.with_name(f"{p.stem}-{t.benchmark}{p.suffix}") for t in tables]


def write_csv(tables: list[Table], path: str | Path) -> list[Path]:
    """One CSV per table (:func:`export_paths`); returns the files written."""
    out = []
    for t, p in zip(tables, export_paths(path, tables)):
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(to_csv(t))
        out.append(p)
    return out


def write_latex(tables: list[Table], path: str | Path) -> Path:
    """Every table, one after the other, in one ``.tex`` file (needs ``\\usepackage{booktabs}``)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("% needs \\usepackage{booktabs}\n" + "\n".join(to_latex(t) for t in tables))
    return p


def plot_rows(table: Table) -> dict[str, dict[str, Any]]:
    """The rows of a table as :func:`~agentcir.framework.report.plot_comparison` takes them."""
    return {r.label: {_header(c): v for c, v in r.values.items()} for r in table.rows}
