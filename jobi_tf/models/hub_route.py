"""`HubRoute`: a second weight of the slot counts, for the queries asked from a hub.

Why: the neighbourhood term (`jobi_tf.models.neighbourhood`) tells look-alike answers apart
only for a query whose given entity it steps from. A query asked from a hub (over
`MAX_DEGREE` neighbours) or from an entity with no training triple gets no term: beside the
tables it has only the counts, and it wants more of them. At 1.85M entities the best weight
was 0.375 for the queries the term reaches and 0.75 for those asked from a hub; one weight for
both cost the copied answers or the hub answers, and the two weights met both goals
(docs/replicated-graph.md, "The counts' weight by whether the term reaches the query").

So a query asked from an entity in ``from_hub`` ranks with ``hub_weight`` x the counts and
every other query with the prior's own ``weight``; both are chosen on validation
(`jobi_tf.training.prior_weight`). The groups follow the term's own hub rule, not the graph's
answers, so they are known before any query is asked. A triple's score, asked as one, takes the
tail query's weight (from its head), as the term does.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from jobi_tf.config.fields import slot_prior_weight
from jobi_tf.models.neighbourhood import Neighbourhood
from jobi_tf.runtime.errors import JobiError

__all__ = ["HubRoute", "queries_from_hub"]


class HubRoute:
    """Which entities ask from a hub, and the counts' weight for their queries.

    Args:
        hub_weight: ``W`` of a query asked from an entity of ``from_hub``.
        from_hub: bool ``[E]`` (a NumPy array, or a tensor inside an export's graph).
    """

    def __init__(self, hub_weight: float, from_hub) -> None:
        self.hub_weight = slot_prior_weight(hub_weight, "hub_weight")
        self.from_hub = from_hub
        self._mask = tf.convert_to_tensor(from_hub, tf.bool)  # once, not per ranked batch

    @classmethod
    def of(cls, near: Neighbourhood, hub_weight: float) -> HubRoute:
        """The route of ``near``'s graph: the entities its term never steps from."""
        return cls(hub_weight, near.shares == 0)

    def groups(self, given) -> tf.Tensor:
        """int64, ``given``'s shape: 1 where the query's given entity asks from a hub, else 0."""
        return tf.cast(tf.gather(self._mask, tf.cast(given, tf.int64)), tf.int64)

    def renumbered(self, new_id: np.ndarray) -> HubRoute:
        """The same route with entity ``e`` numbered ``new_id[e]`` (`jobi_tf.export.cells.cell_order`)."""
        moved = np.empty(len(new_id), bool)
        moved[np.asarray(new_id, np.int64)] = np.asarray(self.from_hub, bool)
        return HubRoute(self.hub_weight, moved)

    def arrays(self) -> dict[str, np.ndarray]:
        """What a run's ``slot_counts.npz`` keeps of it (`from_arrays` reads it back)."""
        from_hub = np.asarray(self.from_hub, bool)
        return {"hub_weight": np.float64(self.hub_weight), "from_hub": np.packbits(from_hub), "entities": len(from_hub)}

    @classmethod
    def from_arrays(cls, data, num_entities: int, path) -> HubRoute | None:
        """The route `arrays` wrote into ``data`` (an open ``.npz``), or None where there is none."""
        if "hub_weight" not in data.files:
            return None
        if int(data["entities"]) != num_entities:
            raise JobiError(f"{path}: the hub route holds {int(data['entities'])} entities, not {num_entities}")
        return cls(float(data["hub_weight"]), np.unpackbits(data["from_hub"], count=num_entities).astype(bool))


def queries_from_hub(near: Neighbourhood, triples: np.ndarray) -> np.ndarray:
    """bool ``[2N]``: which queries of ``triples`` are asked from a hub, head queries first, as
    `jobi_tf.evaluation.ranking.FilteredEvaluator.ranks` orders them (a head query asks from its tail)."""
    triples = np.asarray(triples, np.int64)
    return near.shares[np.concatenate([triples[:, 2], triples[:, 0]])] == 0
