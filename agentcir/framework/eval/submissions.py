"""Test-server submission files for CIRR and CIRCO, validated against the official format.

- CIRR (https://cirr.cecs.anu.edu.au): two JSON files,
  ``{"version": "rc2", "metric": "recall", "<pairid>": [top 50 image names]}`` and
  ``{"version": "rc2", "metric": "recall_subset", "<pairid>": [top 3 of the set members]}``;
  the reference is removed first, the subset ranks ``img_set.members`` minus the reference.
- CIRCO (https://circo.micc.unifi.it): one JSON object ``{"<query id>": [top 50 image ids]}``
  covering every test query (ids 0..N-1).

Every writer validates before writing: all query ids present and no others, exactly the
required length, no duplicates, no reference in a CIRR list. A violation raises
:class:`~agentcir.framework.errors.InputError` naming the query.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import InputError
from .metrics import check_no_duplicates, remove_ids, subset_ranking

CIRR_TOP = 50
CIRR_SUBSET_TOP = 3
CIRCO_TOP = 50


def cirr_submission(
    rankings: Mapping[str, Sequence[str]], references: Mapping[str, str], members: Mapping[str, Sequence[str]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The CIRR ``recall`` and ``recall_subset`` objects from full rankings per pairid."""
    recall: dict[str, Any] = {"version": "rc2", "metric": "recall"}
    subset: dict[str, Any] = {"version": "rc2", "metric": "recall_subset"}
    _same_ids(rankings, references, "CIRR")
    for pid, ref in references.items():
        r = remove_ids(list(rankings[pid]), [ref])
        check_no_duplicates(r, f"CIRR ranking of pairid {pid}")
        recall[pid] = r[:CIRR_TOP]
        sub, unranked = subset_ranking(r, members[pid], ref)
        if unranked:
            raise InputError(
                f"CIRR pairid {pid}: {unranked} of its subset members are not in the ranking, so the "
                f"recall_subset top {CIRR_SUBSET_TOP} is undefined; rank the whole gallery (raise top_k)"
            )
        subset[pid] = sub[:CIRR_SUBSET_TOP]
    validate_cirr(recall, references, members)
    validate_cirr(subset, references, members)
    return recall, subset


def validate_cirr(
    sub: Mapping[str, Any], references: Mapping[str, str], members: Mapping[str, Sequence[str]] | None = None
) -> None:
    """Check a CIRR submission object (either metric) against the split's pairids."""
    if sub.get("version") != "rc2":
        raise InputError(f"CIRR submission: 'version' must be 'rc2', got {sub.get('version')!r}")
    metric = sub.get("metric")
    if metric not in ("recall", "recall_subset"):
        raise InputError(f"CIRR submission: 'metric' must be 'recall' or 'recall_subset', got {metric!r}")
    need = CIRR_TOP if metric == "recall" else CIRR_SUBSET_TOP
    preds = {k: v for k, v in sub.items() if k not in ("version", "metric")}
    _same_ids(preds, references, f"CIRR {metric} submission")
    for pid, lst in preds.items():
        where = f"CIRR {metric} submission, pairid {pid}"
        if not isinstance(lst, list) or not all(isinstance(x, str) for x in lst):
            raise InputError(f"{where}: predictions must be a list of image names")
        if len(lst) != need:
            raise InputError(f"{where}: needs exactly {need} predictions, got {len(lst)}")
        check_no_duplicates(lst, where)
        if references[pid] in lst:
            raise InputError(f"{where}: the reference image '{references[pid]}' must be removed")
        if metric == "recall_subset" and members is not None:
            bad = [x for x in lst if x not in set(members[pid])]
            if bad:
                raise InputError(f"{where}: '{bad[0]}' is not a member of the query's image set")


def circo_submission(rankings: Mapping[str, Sequence[str]], query_ids: Sequence[str]) -> dict[str, list[int]]:
    """The CIRCO object ``{query id: top 50 image ids}`` (ids as integers, as the server reads them)."""
    _same_ids(rankings, {q: None for q in query_ids}, "CIRCO")
    sub = {}
    for q in query_ids:
        r = list(rankings[q])[:CIRCO_TOP]
        try:
            sub[str(q)] = [int(x) for x in r]
        except ValueError:
            raise InputError(f"CIRCO query {q}: image ids must be COCO integer ids, got {r[:3]}") from None
    validate_circo(sub, query_ids)
    return sub


def validate_circo(sub: Mapping[str, Any], query_ids: Sequence[str]) -> None:
    """Check a CIRCO submission object: every query id, exactly 50 unique ids each."""
    _same_ids(sub, {str(q): None for q in query_ids}, "CIRCO submission")
    for q, lst in sub.items():
        where = f"CIRCO submission, query {q}"
        if not isinstance(lst, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in lst):
            raise InputError(f"{where}: predictions must be a list of integer image ids")
        if len(lst) != CIRCO_TOP:
            raise InputError(f"{where}: needs exactly {CIRCO_TOP} predictions, got {len(lst)}")
        check_no_duplicates([str(x) for x in lst], where)


def _same_ids(got: Mapping[str, Any], want: Mapping[str, Any], what: str) -> None:
    g, w = set(map(str, got)), set(map(str, want))
    missing, extra = sorted(w - g), sorted(g - w)
    if missing:
        raise InputError(
            f"{what}: {len(missing)} query id(s) missing (e.g. {missing[0]}); a submission must cover every query"
        )
    if extra:
        raise InputError(f"{what}: {len(extra)} unknown query id(s) (e.g. {extra[0]})")


def write_json(obj: Any, path: str | os.PathLike) -> Path:
    """Write ``obj`` as JSON atomically; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj))
    tmp.replace(path)
    return path
