"""Answer a file of queries against an export, batched: ``jobi-tf predict --queries FILE``.

The file is UTF-8 TSV whose first line names its columns, which says what is asked:

===================  =====================  =====================
header               asks                   signature
===================  =====================  =====================
head, relation       the top-k tails        ``predict_tail``
relation, tail       the top-k heads        ``predict_head``
head, tail           the top-k relations    ``predict_relation``
head, relation, tail the triple's score     ``score``
===================  =====================  =====================

Every later line holds one query with as many fields as the header. The whole file is
checked before anything is asked or written (a line with another number of fields is a
one-line error naming the file and line); unknown names are not errors: their answer says
``"found": false``, and the other queries are answered. Answers stream out in file order,
one JSON line (or TSV row) per query, ``batch_size`` queries per request.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["QUERY_SIGNATURES", "QueryFile", "QueryFileError", "read_queries", "answer_queries", "format_answer"]

#: Header columns → the signature that answers them.
QUERY_SIGNATURES: dict[tuple[str, ...], str] = {
    ("head", "relation"): "predict_tail",
    ("relation", "tail"): "predict_head",
    ("head", "tail"): "predict_relation",
    ("head", "relation", "tail"): "score",
}


class QueryFileError(ValueError):
    """A query file that cannot be read: the message names the file and line."""


class QueryFile:
    """A checked query file: its columns, its signature and its queries (one tuple per line)."""

    def __init__(self, path: Path, columns: tuple[str, ...], rows: list[tuple[str, ...]], lines: list[int]) -> None:
        self.path, self.columns, self.rows, self.lines = path, columns, rows, lines
        self.signature = QUERY_SIGNATURES[columns]


def read_queries(path: str | os.PathLike[str]) -> QueryFile:
    """Read and check the whole file (header, field counts, encoding) before anything is asked."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise QueryFileError(f"{path}: no such file") from None
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise QueryFileError(f"{path}:{line}: not UTF-8") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise QueryFileError(f"{path}: empty; the first line names the columns, e.g. head<TAB>relation")
    columns = tuple(field.strip().lower() for field in lines[0].rstrip("\r").split("\t"))
    if columns not in QUERY_SIGNATURES:
        known = "; ".join("<TAB>".join(c) for c in QUERY_SIGNATURES)
        raise QueryFileError(f"{path}:1: header {lines[0]!r} names no query; use one of: {known}")
    rows, numbers = [], []
    for number, line in enumerate(lines[1:], 2):
        fields = tuple(line.rstrip("\r").split("\t"))
        if fields == ("",):
            continue  # a blank line asks nothing
        if len(fields) != len(columns) or any(not f for f in fields):
            raise QueryFileError(
                f"{path}:{number}: expected {len(columns)} non-empty tab-separated fields "
                f"({', '.join(columns)}), found {len(fields)}"
            )
        rows.append(fields)
        numbers.append(number)
    if not rows:
        raise QueryFileError(f"{path}: no queries after the header")
    return QueryFile(path, columns, rows, numbers)


def answer_queries(predictor, queries: QueryFile, k: int = 10, batch_size: int = 512) -> Iterator[dict]:
    """One answer dict per query, in file order: ``line``, the query's names, ``found`` and
    ``entities`` (or ``relations``) with ``scores``, or ``score`` for triples."""
    answer_key = {"predict_tail": "tails", "predict_head": "heads", "predict_relation": "relations"}
    signature = queries.signature
    for start in range(0, len(queries.rows), batch_size):
        batch = queries.rows[start : start + batch_size]
        inputs = {column: [row[i] for row in batch] for i, column in enumerate(queries.columns)}
        if signature != "score":
            inputs["k"] = k
        out = predictor.predict(signature, inputs)
        for j, row in enumerate(batch):
            answer = {"line": queries.lines[start + j], **dict(zip(queries.columns, row, strict=True))}
            answer["found"] = bool(out["found"][j])
            if signature == "score":
                answer["score"] = _finite(out["score"][j])
            else:
                names = out[answer_key[signature]][j]
                answer["answers" if signature != "predict_relation" else "relations"] = names if answer["found"] else []
                answer["scores"] = [_finite(s) for s in out["scores"][j]] if answer["found"] else []
            yield answer


def format_answer(answer: dict, as_tsv: bool) -> str:
    """A JSON line, or a TSV row: the query, found, then ``name:score`` pairs (or the score)."""
    if not as_tsv:
        return json.dumps(answer, ensure_ascii=False)
    names = answer.get("answers", answer.get("relations"))
    query = [str(answer[c]) for c in ("head", "relation", "tail") if c in answer]
    if names is None:
        tail = [] if answer["score"] is None else [f"{answer['score']:.7g}"]
    else:
        tail = [f"{n}:{'' if s is None else format(s, '.7g')}" for n, s in zip(names, answer["scores"], strict=True)]
    return "\t".join([str(answer["line"]), *query, "found" if answer["found"] else "unknown", *tail])


def _finite(value: float) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None
