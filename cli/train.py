"""``jobi-tf train``: flags → `RunConfig` → `jobi_tf.training.train` → metrics on stdout."""

from __future__ import annotations

import json
from pathlib import Path

import click
from jobi_tf.cli._errors import progress_to_stderr, reports_errors, start_tensorflow
from jobi_tf.cli.options import eval_options

from jobi_tf.config import (
    CORRUPT_SIDES,
    INITS,
    MONITORS,
    REGULARIZERS,
    STRATEGIES,
    DataConfig,
    DistributeConfig,
    EvalConfig,
    ModelConfig,
    RunConfig,
    SamplerConfig,
    TrainConfig,
)

__all__ = ["train"]


def _default_out(cfg: RunConfig) -> Path:
    source = cfg.data.dataset or Path(cfg.data.data_dir).name
    kind = ("jobi" if cfg.model.joint else "base") + ("-reciprocal" if cfg.model.reciprocal else "")
    return Path("runs") / f"{source}-{cfg.model.model}-{kind}-p{cfg.sampler.p:g}-seed{cfg.seed}"


@click.command()
@click.option(
    "--dataset",
    default=None,
    metavar="NAME",
    help="fb15k-237, fb15k, wn18rr, yago3-10, kinship, umls, nations, or synthetic "
    "(the default when --data-dir is not given either).",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Folder with train.txt, valid.txt, test.txt; with --dataset, its offline local copy.",
)
@click.option("--model", type=click.Choice(["complex", "distmult", "simple"]), default="complex", show_default=True)
@click.option(
    "--dim",
    type=int,
    default=200,
    show_default=True,
    help="Components per part (ComplEx 200 = 200 real + 200 imaginary).",
)
@click.option("--batch-size", type=int, default=500, show_default=True, help="Positive triples per step.")
@click.option("--neg", type=int, default=50, show_default=True, help="Negatives per positive.")
@click.option(
    "--p",
    "p",
    type=float,
    default=0.0,
    show_default=True,
    help="Probability of drawing a negative from the relation's training heads/tails (biased).",
)
@click.option("--joint/--no-joint", default=False, show_default=True, help="Add JoBi's pair head.")
@click.option("--alpha", type=float, default=0.5, show_default=True, help="Weight of the pair loss.")
@click.option(
    "--reciprocal/--no-reciprocal",
    default=False,
    show_default=True,
    help="Give each relation an inverse and rank heads of (?, r, t) as tails of (t, r^-1, ?).",
)
@click.option(
    "--loss", type=click.Choice(["sampled-softmax", "full-softmax"]), default="sampled-softmax", show_default=True
)
@click.option(
    "--label-smoothing",
    type=float,
    default=0.0,
    show_default=True,
    metavar="EPS",
    help="With --loss full-softmax: put 1-EPS on the true entity and spread EPS over all of them.",
)
@click.option(
    "--relation-prediction",
    type=float,
    default=0.0,
    show_default=True,
    metavar="W",
    help="Weight of the auxiliary relation-prediction loss, a softmax over relations for (h, ?, t) "
    "(Chen et al., 2021; 0 = off).",
)
@click.option(
    "--shared-negatives",
    type=int,
    default=0,
    show_default=True,
    metavar="C",
    help="Share the uniform negatives within chunks of C positives (0 = per triple).",
)
@click.option(
    "--init",
    type=click.Choice(INITS),
    default="table-glorot",
    show_default=True,
    help="Embedding init: Glorot-normal over each table (the paper's code) or N(0, 2/width) per row (PyKEEN's).",
)
@click.option(
    "--corrupt-side",
    type=click.Choice(CORRUPT_SIDES),
    default="per-positive",
    show_default=True,
    help="Flip the head-or-tail coin for every negative, or once per positive (each softmax ranks one query).",
)
@click.option(
    "--regularization",
    type=float,
    default=0.0,
    show_default=True,
    help="Weight of the --regularizer penalty (PyKEEN's ComplEx default: l2 0.01).",
)
@click.option(
    "--regularizer",
    type=click.Choice(REGULARIZERS),
    default="l2",
    show_default=True,
    help="l2: normalised L2 norm of every row a batch uses (PyKEEN's); n3: cubed moduli of the "
    "positive's head, relation and tail rows (Lacroix et al., 2018).",
)
@click.option(
    "--optimizer",
    type=click.Choice(["auto", "adam", "lazy-adam", "adagrad"]),
    default="auto",
    show_default=True,
    help="adam (dense, the paper's), lazy-adam (updates only the rows a batch uses), adagrad; "
    "auto: adam below 100,000 entities, lazy-adam from there on.",
)
@click.option("--lr", type=float, default=0.001, show_default=True, help="Learning rate.")
@click.option("--epochs", type=int, default=200, show_default=True, help="Maximum epochs.")
@click.option("--eval-every", type=int, default=5, show_default=True, help="Validate every N epochs.")
@click.option(
    "--patience",
    type=int,
    default=3,
    show_default=True,
    help="Stop after this many validations without a better --monitor.",
)
@click.option(
    "--monitor",
    type=click.Choice(MONITORS),
    default="hits@10",
    show_default=True,
    help="Validation metric for early stopping and best weights (the paper's: hits@10).",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--jit/--no-jit", default=True, show_default=True, help="Compile the train step with XLA.")
@click.option(
    "--strategy",
    type=click.Choice(STRATEGIES),
    default="default",
    show_default=True,
    help="default: one device; mirrored: this machine's GPUs (or logical CPUs); "
    "multi-worker: the cluster in $TF_CONFIG.",
)
@click.option("--gpus", default=None, metavar="LIST", help="GPUs for --strategy mirrored, e.g. 0,1 (default: all).")
@click.option(
    "--logical-cpus",
    type=int,
    default=0,
    show_default=True,
    metavar="N",
    help="Split the CPU into N devices (mirrored without GPUs; also $JOBI_TF_LOGICAL_CPUS).",
)
@click.option("--synthetic-entities", type=int, default=2000, show_default=True)
@click.option("--synthetic-relations", type=int, default=24, show_default=True)
@click.option("--synthetic-triples", type=int, default=40000, show_default=True)
@eval_options
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default=None,
    help="Run folder (rerun the same command to resume). Default: runs/<dataset>-<model>-...",
)
@click.pass_context
@reports_errors
def train(ctx: click.Context, **flags) -> None:
    """Train JoBi (--joint --p 0.3) or a baseline, then print test metrics as JSON.

    Example: jobi-tf train --dataset fb15k-237 --joint --p 0.3
    """
    cfg = RunConfig(
        data=DataConfig(
            dataset=flags["dataset"] or (None if flags["data_dir"] else "synthetic"),
            data_dir=flags["data_dir"],
            synthetic_entities=flags["synthetic_entities"],
            synthetic_relations=flags["synthetic_relations"],
            synthetic_triples=flags["synthetic_triples"],
        ),
        sampler=SamplerConfig(
            batch_size=flags["batch_size"],
            neg=flags["neg"],
            p=flags["p"],
            shared_negatives=flags["shared_negatives"],
            corrupt_side=flags["corrupt_side"],
        ),
        model=ModelConfig(
            model=flags["model"],
            dim=flags["dim"],
            joint=flags["joint"],
            init=flags["init"],
            reciprocal=flags["reciprocal"],
        ),
        train=TrainConfig(
            loss=flags["loss"],
            label_smoothing=flags["label_smoothing"],
            relation_prediction=flags["relation_prediction"],
            alpha=flags["alpha"],
            regularization=flags["regularization"],
            regularizer=flags["regularizer"],
            lr=flags["lr"],
            optimizer=flags["optimizer"],
            epochs=flags["epochs"],
            eval_every=flags["eval_every"],
            patience=flags["patience"],
            monitor=flags["monitor"],
            jit_compile=flags["jit"],
        ),
        eval=EvalConfig(
            eval_batch_size=flags["eval_batch_size"], chunk_size=flags["chunk_size"], rank_type=flags["rank_type"]
        ),
        distribute=DistributeConfig(strategy=flags["strategy"], gpus=flags["gpus"], logical_cpus=flags["logical_cpus"]),
        seed=flags["seed"],
    )
    out = Path(flags["out"]) if flags["out"] else _default_out(cfg)
    start_tensorflow()
    from jobi_tf.training import train as run_training  # imports TensorFlow

    with progress_to_stderr():
        result = run_training(cfg, out, verbose=0 if ctx.obj["quiet"] else None)
    if "test" not in result.metrics:  # a worker of a cluster that is not the chief: it wrote nothing
        click.echo(json.dumps({"run_dir": None, "chief": False, **result.metrics}))
        return
    summary = {
        "run_dir": str(result.run_dir),
        "test": {k: result.metrics["test"][k] for k in ("mrr", "hits@1", "hits@3", "hits@10")},
        "valid": {k: result.metrics["valid"][k] for k in ("mrr", "hits@1", "hits@3", "hits@10")},
        "epochs": result.metrics["epochs"],
        "train_seconds": result.metrics["train_seconds"],
        **{k: result.metrics[k] for k in ("final_weights_sha256",) if k in result.metrics},
    }
    click.echo(json.dumps(summary))
