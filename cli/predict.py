"""``jobi-tf predict``: ask an export, in-process or through TensorFlow Serving.

The query's shape picks the signature: ``--head --relation`` asks for tails,
``--relation --tail`` for heads, ``--head --tail`` for relations, all three for the
triple's score. ``--queries FILE`` answers a file of such queries, batched
(`jobi_tf.serving.batch`).
"""

from __future__ import annotations

import json

import click
from jobi_tf.cli._errors import reports_errors, start_tensorflow

__all__ = ["predict"]


def _predictor(model: str | None, server: str | None, model_name: str, model_version: int | None, timeout: float):
    from jobi_tf.serving import client  # imports TensorFlow only for --model and grpc://

    if (model is None) == (server is None):
        raise click.UsageError("give exactly one of --model PATH (in-process) and --server URL")
    if model is not None:
        start_tensorflow()
        return client.LocalPredictor(model)
    if server.startswith("grpc://"):
        return client.GrpcPredictor(server[len("grpc://") :], model_name, model_version, timeout)
    if server.startswith(("http://", "https://")):
        return client.RestPredictor(server, model_name, model_version, timeout)
    raise click.BadParameter("must start with http:// (REST) or grpc:// (gRPC)", param_hint="--server")


def _table(answer) -> str:
    q = answer.query
    shown = f"({q['head'] or '?'}, {q['relation'] or '?'}, {q['tail'] or '?'})"
    probs = answer.probabilities
    if answer.signature == "score":
        return f"{shown}\tscore {answer.scores[0]:.7g}" + ("" if probs is None else f"\tprobability {probs[0]:.4f}")
    slot = {"predict_tail": "tail", "predict_head": "head", "predict_relation": "relation"}[
        answer.signature.removesuffix("_approximate").removesuffix("_typed").removesuffix("_soft")
    ]
    width = max([len(slot)] + [len(name) for name in answer.entities])
    head = f"{'rank':>4}  {slot:<{width}}  score" + ("" if probs is None else "       probability")
    lines = [f"{shown}: top {len(answer.entities)} {slot}s", head]
    for i, (name, score) in enumerate(zip(answer.entities, answer.scores, strict=True), 1):
        if not name:  # a typed answer list shorter than k
            break
        line = f"{i:>4}  {name:<{width}}  {score:<10.7g}"
        lines.append(line.rstrip() if probs is None else f"{line}  {probs[i - 1]:.4f}")
    return "\n".join(lines)


@click.command()
@click.option(
    "--model",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="An export (EXPORT_BASE/N, or EXPORT_BASE for its latest version), loaded in this process.",
)
@click.option(
    "--server",
    default=None,
    metavar="URL",
    help="A running tensorflow_model_server: http://HOST:8501 (REST) or grpc://HOST:8500.",
)
@click.option("--model-name", default="jobi", show_default=True, help="The model's name on the server.")
@click.option("--model-version", type=int, default=None, help="A version on the server. Default: the latest.")
@click.option(
    "--queries",
    type=click.Path(dir_okay=False),
    default=None,
    help="A TSV file of queries whose first line names its columns (head/relation, relation/tail, head/tail "
    "or head/relation/tail); answers stream out as JSON lines (or --tsv), in file order.",
)
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None, help="With --queries: write here.")
@click.option("--tsv", is_flag=True, help="With --queries: TSV rows (query, found, name:score ...) not JSON lines.")
@click.option("--batch-size", type=click.IntRange(min=1), default=512, show_default=True, help="Queries per request.")
@click.option("--head", default=None, help="Head entity name.")
@click.option("--relation", default=None, help="Relation name (leave it out, with --head and --tail, to ask which).")
@click.option("--tail", default=None, help="Tail entity name.")
@click.option("-k", "k", type=click.IntRange(min=1), default=10, show_default=True, help="Answers to list.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON line instead of a table.")
@click.option(
    "--typed",
    is_flag=True,
    help="Tails/heads among the entities seen in that slot of the relation (an export made with --typed).",
)
@click.option(
    "--min-pair-probability",
    type=click.FloatRange(0, 1),
    default=None,
    metavar="P",
    help="Like --typed, and also the entities the pair head places in the slot with probability >= P "
    "(an export of a --joint run made with --typed --pair-head).",
)
@click.option(
    "--probe",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Approximate answers: rank only the rows of the N cells nearest the query (an export made with --cells; "
    "docs/serving.md).",
)
@click.option("--timeout", type=float, default=10.0, show_default=True, help="Seconds per server request.")
@click.pass_context
@reports_errors
def predict(ctx: click.Context, **flags) -> None:
    """Top-k tails of (--head, --relation), heads of (--relation, --tail), relations of (--head,
    --tail), or the score of all three; or the answers of a --queries file.

    Example: jobi-tf predict --model exports/jobi/1 --head Berlin --relation is-capital-of -k 10
    """
    if flags["queries"] is not None:
        if any(flags[slot] is not None for slot in ("head", "relation", "tail")):
            raise click.UsageError("give either --queries FILE or --head/--relation/--tail, not both")
        _answer_file(ctx, flags)
        return
    if flags["relation"] is None and (flags["head"] is None or flags["tail"] is None):
        raise click.UsageError("give --relation with --head, --tail or both; or --head and --tail to rank relations")
    if flags["head"] is None and flags["tail"] is None:
        raise click.UsageError("give --head, --tail, or both")
    if flags["probe"] is not None and (flags["typed"] or flags["min_pair_probability"] is not None):
        raise click.UsageError(
            "--probe (approximate answers) cannot be combined with --typed or --min-pair-probability"
        )
    from jobi_tf.serving.client import ServingError, ask, unknown_names

    predictor = _predictor(
        flags["model"], flags["server"], flags["model_name"], flags["model_version"], flags["timeout"]
    )
    answer = ask(
        predictor,
        flags["head"],
        flags["relation"],
        flags["tail"],
        flags["k"],
        typed=flags["typed"],
        min_pair_probability=flags["min_pair_probability"],
        probe=flags["probe"],
    )
    if not answer.found:
        unknown = unknown_names(predictor, answer.query) or {k: v for k, v in answer.query.items() if v is not None}
        names = ", ".join(f"{slot}={name!r}" for slot, name in unknown.items())
        raise ServingError(
            f"unknown name: {names} {'is' if len(unknown) == 1 else 'are'} not in the export's vocabulary"
        )
    click.echo(json.dumps(answer.to_json()) if flags["as_json"] else _table(answer))


def _answer_file(ctx: click.Context, flags: dict) -> None:
    """``--queries``: check the file, then stream the answers (to ``--out`` only when complete)."""
    from jobi_tf.serving.batch import QueryFileError, answer_queries, format_answer, read_queries

    from jobi_tf.runtime.atomic import replacing

    try:
        queries = read_queries(flags["queries"])
    except QueryFileError as exc:
        raise click.BadParameter(str(exc), param_hint="--queries") from None
    predictor = _predictor(
        flags["model"], flags["server"], flags["model_name"], flags["model_version"], flags["timeout"]
    )
    answers = answer_queries(predictor, queries, k=flags["k"], batch_size=flags["batch_size"])
    show = not ctx.obj["quiet"]
    with click.progressbar(length=len(queries.rows), label="queries", file=click.get_text_stream("stderr")) as bar:

        def write(stream) -> None:
            for i, answer in enumerate(answers, 1):
                stream.write(format_answer(answer, flags["tsv"]) + "\n")
                if show and i % flags["batch_size"] == 0:
                    bar.update(flags["batch_size"])

        if flags["out_path"] is None:
            write(click.get_text_stream("stdout"))
        else:
            with replacing(flags["out_path"]) as tmp, open(tmp, "w", encoding="utf-8") as stream:
                write(stream)
