"""`RankingWeights`: the weights a sampled run ranks with, moved after training.

Why they can move: a sampled loss leaves the slot counts and the neighbourhood term out
(`jobi_tf.models.slot_prior`, `jobi_tf.models.neighbourhood`), so the trained tables are the
same whatever weights rank them, and a weight chosen on validation after training is a fair
choice. `Run` takes these methods; ``jobi-tf evaluate`` and ``jobi-tf export`` reach them by
``--prior-weight``, ``--hub-weight`` and ``--neighbourhood``.
"""

from __future__ import annotations

from jobi_tf.runtime.errors import JobiError

__all__ = ["RankingWeights"]


class RankingWeights:
    """The counts' weights (one, or one per query group) and the neighbourhood term's weight of a
    `jobi_tf.api.Run` (which holds ``model``, ``folder``, ``config``, ``data`` and its vocabularies)."""

    def use_slot_prior(self, weight: float) -> None:
        """Rank, predict and export with ``weight`` x the slot counts in place of the run's
        ``--slot-prior`` (and of a second weight chosen for the queries asked from a hub,
        `jobi_tf.models.hub_route`); 0 ranks the tables alone. Only for a sampled run: a 1-vs-all
        run trained with its own weight. The counts are the run folder's, else counted from the
        run's data."""
        from jobi_tf.config.fields import slot_prior_weight

        weight = slot_prior_weight(weight, "prior_weight")  # one line naming evaluate/export's --prior-weight
        self._check_sampled("--prior-weight")
        prior = self._counts() if weight else self.model.prior
        if prior is not None:
            prior.weight, prior.route = weight, None  # one weight for every query, from a hub or not
        self.model.prior = prior if weight else None
        self._scorers.clear()  # a scorer module holds the prior it was built with

    def use_hub_weight(self, weight: float) -> None:
        """Rank the queries asked from a hub (`jobi_tf.models.hub_route`) with ``weight`` x the slot
        counts, and every other query with the run's weight (`use_slot_prior`'s, else its own). The
        groups are the neighbourhood term's, by its hub rule over the run's training triples."""
        from jobi_tf.config.fields import slot_prior_weight
        from jobi_tf.models.hub_route import HubRoute
        from jobi_tf.models.neighbourhood import Neighbourhood

        weight = slot_prior_weight(weight, "hub_weight")
        self._check_sampled("--hub-weight")
        prior = self._counts()
        near = self.model.neighbourhood
        if near is None:  # (the groups only: the term itself stays off)
            near = Neighbourhood(self.data.index.train, len(self._entities), 0.0)
        prior.route = HubRoute.of(near, weight)
        self.model.prior = prior
        self._scorers.clear()

    @property
    def prior_weights(self) -> dict[str, float]:
        """The counts' weights the run ranks with: ``slot_prior`` (0: none) and, where it has one
        (chosen on validation or `use_hub_weight`'s), ``hub_weight``."""
        prior = self.model.prior
        route = getattr(prior, "route", None)
        return {"slot_prior": prior.weight if prior is not None else 0.0} | (
            {} if route is None else {"hub_weight": route.hub_weight}
        )

    def use_neighbourhood(self, weight: float) -> None:
        """Rank with ``weight`` x the neighbourhood term (`jobi_tf.models.neighbourhood`) in place of
        the run's ``--neighbourhood`` (or the weight its validation chose); 0 ranks without it."""
        from jobi_tf.config.fields import slot_prior_weight

        self._neighbourhood_weight = slot_prior_weight(weight, "neighbourhood")
        self._attach_neighbourhood()
        self._scorers.clear()  # a scorer module holds the term it was built with

    @property
    def neighbourhood_weight(self) -> float:
        """The neighbourhood term's weight the run ranks with: `use_neighbourhood`'s, else the one
        validation chose (``neighbourhood.json``), else ``--neighbourhood`` (0: none)."""
        from jobi_tf.models.neighbourhood import read_weight

        if self._neighbourhood_weight is not None:
            return self._neighbourhood_weight
        chosen = read_weight(self.folder.neighbourhood) if self.config.train.neighbourhood else None
        return self.config.train.neighbourhood if chosen is None else chosen

    def _attach_neighbourhood(self) -> None:
        """Give the model its neighbourhood term, built from the run's training triples, when it ranks with one."""
        weight = self.neighbourhood_weight
        if weight and self.model.neighbourhood is None:
            from jobi_tf.models.neighbourhood import Neighbourhood

            self.model.neighbourhood = Neighbourhood(self.data.index.train, len(self._entities), weight)
        elif self.model.neighbourhood is not None:
            self.model.neighbourhood.weight = weight

    def _check_sampled(self, flag: str) -> None:
        from jobi_tf.contracts.objectives import SAMPLED

        if self.model.objective.regime != SAMPLED:
            raise JobiError(
                f"{flag}: {self.path} trained with its prior in the loss ({self.model.loss_kind}); "
                "only a sampled run's weight can change after training"
            )

    def _counts(self):
        """The model's sparse slot counts; where it ranks without them now, the run folder's (else
        counted from the run's data), at weight 0 and with no route until the caller sets them."""
        from jobi_tf.models.slot_prior import SparseSlotPrior

        if self.model.prior is not None:
            return self.model.prior
        prior = SparseSlotPrior(0.0, len(self._entities), len(self._relations))
        if self.folder.slot_counts.exists():
            prior.load(self.folder.slot_counts)
        else:
            prior.fill(self.data.index.train)
        prior.weight, prior.route = 0.0, None
        return prior
