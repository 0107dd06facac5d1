"""Ask an exported jobi-tf model questions: TensorFlow Serving by REST or gRPC, or in-process.

An export (`jobi_tf.export.savedmodel`) has signatures that take and return *names*; their inputs and
outputs are `jobi_tf.serving.contract`'s (``score``: head, relation, tail → score, found;
``predict_tail``/``predict_head``/``predict_relation``: two names and ``k`` → the top ``k``
names, their scores and found).

A row with a name the export does not know has ``found = False``, NaN scores and empty
names; nothing raises. The three backends share one method,
``predict(signature, inputs) -> {output: nested list}``:

* `RestPredictor`: ``POST /v1/models/NAME[/versions/N]:predict`` with the stdlib only.
  ``k`` is a scalar, so predict requests use TF Serving's columnar ``inputs`` format (the
  row ``instances`` format needs every input to share the batch dimension; ``score`` may
  use either). Scores of unknown rows come back as the ``NaN`` token TF Serving writes,
  which Python's `json` reads.
* `GrpcPredictor`: ``PredictionService.Predict`` from ``tensorflow-serving-api`` (which
  imports TensorFlow; imported only when used).
* `LocalPredictor`: loads the SavedModel in this process (imports TensorFlow when built).

Importing this module never imports TensorFlow, so a REST client runs on any machine.
"""

from __future__ import annotations

import dataclasses
import json
import math
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from jobi_tf.serving.contract import FLOAT_INPUTS, INPUTS, OPTIONAL_OUTPUTS, OUTPUTS, STRING_INPUTS

__all__ = [
    "ServingError",
    "Answer",
    "rest_url",
    "rest_request",
    "decode_rest_response",
    "grpc_request",
    "decode_grpc_response",
    "RestPredictor",
    "GrpcPredictor",
    "LocalPredictor",
    "resolve_export",
    "ask",
]


def _scalar(name: str, value):
    """A scalar input as its signature declares it: ``k`` int32, ``min_pair_probability`` float32."""
    return float(value) if name in FLOAT_INPUTS else int(value)


class ServingError(Exception):
    """A server cannot be reached or refuses a request, or a path is not an export.

    The message is one line naming the server or path; the CLI prints it as ``Error: ...``.
    """


def _check_inputs(signature: str, inputs: dict) -> None:
    if signature not in INPUTS:
        raise ValueError(f"signature must be one of {sorted(INPUTS)}. Received: signature={signature!r}")
    expected = set(INPUTS[signature])
    if set(inputs) != expected:
        raise ValueError(f"{signature} takes inputs {sorted(expected)}. Received: {sorted(inputs)}")


# -- REST ---------------------------------------------------------------------------------
def rest_url(server: str, model_name: str, version: int | None = None) -> str:
    """``http://host:8501/v1/models/NAME[/versions/N]:predict`` for a server URL ``http://host:8501``."""
    base = server.rstrip("/")
    name = urllib.parse.quote(model_name, safe="")
    return f"{base}/v1/models/{name}" + (f"/versions/{int(version)}" if version is not None else "") + ":predict"


def rest_request(signature: str, inputs: dict, *, row_format: bool = False) -> dict:
    """The JSON body of a TF Serving REST predict call.

    Args:
        signature: ``score``, ``predict_tail`` or ``predict_head``.
        inputs: ``{input name: list of names}`` plus ``k`` (an int) for predict signatures.
        row_format: send ``instances`` (one object per row) instead of the columnar
            ``inputs``; only for ``score``, whose inputs all share the batch dimension.

    >>> rest_request("predict_tail", {"head": ["Berlin"], "relation": ["capital-of"], "k": 3})
    {'signature_name': 'predict_tail', 'inputs': {'head': ['Berlin'], 'relation': ['capital-of'], 'k': 3}}
    """
    _check_inputs(signature, inputs)
    columns = {
        name: [str(v) for v in inputs[name]] if name in STRING_INPUTS else _scalar(name, inputs[name])
        for name in inputs
    }
    if not row_format:
        return {"signature_name": signature, "inputs": columns}
    if signature != "score":
        raise ValueError(f"{signature}: k is a scalar, so use the columnar format (row_format=False)")
    names = INPUTS[signature]
    rows = [dict(zip(names, values, strict=True)) for values in zip(*(columns[n] for n in names), strict=True)]
    return {"signature_name": signature, "instances": rows}


def decode_rest_response(body: str | bytes | dict, signature: str) -> dict[str, list]:
    """``{output name: nested list}`` from a TF Serving REST predict response.

    Accepts the columnar answer (``{"outputs": {...}}``), the row answer
    (``{"predictions": [{...}, ...]}``) and raises `ServingError` on ``{"error": ...}``.
    """
    data = json.loads(body) if isinstance(body, (str, bytes)) else body
    if "error" in data:
        raise ServingError(f"server error: {data['error']}")
    names = OUTPUTS[signature]
    if "outputs" in data:
        outputs = data["outputs"]
    elif "predictions" in data:
        present = [*names, *(n for n in OPTIONAL_OUTPUTS if data["predictions"] and n in data["predictions"][0])]
        outputs = {name: [row[name] for row in data["predictions"]] for name in present}
    else:
        raise ServingError(f"not a TF Serving predict response (keys {sorted(data)})")
    missing = [name for name in names if name not in outputs]
    if missing:
        raise ServingError(f"{signature}: the response lacks outputs {missing}; is the model a jobi-tf export?")
    return {name: outputs[name] for name in (*names, *(n for n in OPTIONAL_OUTPUTS if n in outputs))}


class RestPredictor:
    """TF Serving's REST API (default port 8501), stdlib only.

    Args:
        server: ``http://host:8501``.
        model_name: the model's name on the server (``models.config``'s ``name``).
        version: a version number, or None for the latest.
        timeout: seconds per request.
    """

    def __init__(self, server: str, model_name: str, version: int | None = None, timeout: float = 10.0) -> None:
        self.url = rest_url(server, model_name, version)
        self.timeout = timeout

    def predict(self, signature: str, inputs: dict) -> dict[str, list]:
        body = json.dumps(rest_request(signature, inputs)).encode("utf-8")
        request = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return decode_rest_response(response.read(), signature)
        except urllib.error.HTTPError as exc:  # TF Serving explains refusals as {"error": ...}
            detail = exc.read().decode("utf-8", "replace")
            try:
                detail = json.loads(detail).get("error", detail)
            except (ValueError, AttributeError):
                pass
            raise ServingError(f"{self.url}: HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ServingError(f"cannot reach {self.url}: {reason}; is tensorflow_model_server running?") from None


# -- gRPC ---------------------------------------------------------------------------------
def grpc_request(signature: str, inputs: dict, model_name: str, version: int | None = None):
    """A ``tensorflow_serving.apis.predict_pb2.PredictRequest`` (imports TensorFlow)."""
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2

    _check_inputs(signature, inputs)
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = signature
    if version is not None:
        request.model_spec.version.value = int(version)
    for name, value in inputs.items():
        if name in STRING_INPUTS:
            proto = tf.make_tensor_proto([str(v).encode("utf-8") for v in value], dtype=tf.string, shape=[len(value)])
        else:
            dtype = tf.float32 if name in FLOAT_INPUTS else tf.int32
            proto = tf.make_tensor_proto(_scalar(name, value), dtype=dtype)
        request.inputs[name].CopyFrom(proto)
    return request


def decode_grpc_response(response, signature: str) -> dict[str, list]:
    """``{output name: nested list}`` from a ``PredictResponse`` (strings decoded from UTF-8)."""
    import tensorflow as tf

    names = OUTPUTS[signature]
    missing = [name for name in names if name not in response.outputs]
    if missing:
        raise ServingError(f"{signature}: the response lacks outputs {missing}; is the model a jobi-tf export?")
    return {name: _to_lists(tf.make_ndarray(response.outputs[name])) for name in names}


class GrpcPredictor:
    """TF Serving's gRPC ``PredictionService`` (default port 8500).

    Args:
        target: ``host:8500``.
        model_name, version, timeout: as for `RestPredictor`.
    """

    def __init__(self, target: str, model_name: str, version: int | None = None, timeout: float = 10.0) -> None:
        import grpc
        from tensorflow_serving.apis import prediction_service_pb2_grpc

        self.target, self.model_name, self.version, self.timeout = target, model_name, version, timeout
        self._grpc = grpc
        self._stub = prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(target))

    def predict(self, signature: str, inputs: dict) -> dict[str, list]:
        request = grpc_request(signature, inputs, self.model_name, self.version)
        try:
            response = self._stub.Predict(request, timeout=self.timeout)
        except self._grpc.RpcError as exc:
            code = exc.code()
            if code in (self._grpc.StatusCode.UNAVAILABLE, self._grpc.StatusCode.DEADLINE_EXCEEDED):
                raise ServingError(
                    f"cannot reach grpc://{self.target}: {code.name}; is tensorflow_model_server running?"
                ) from None
            raise ServingError(f"grpc://{self.target}: {code.name}: {exc.details()}") from None
        return decode_grpc_response(response, signature)


# -- in-process ---------------------------------------------------------------------------
def resolve_export(path: str | Path) -> Path:
    """The SavedModel folder of ``path``: itself, or its highest numbered version.

    Raises:
        ServingError: ``path`` holds neither ``saved_model.pb`` nor numbered versions.
    """
    path = Path(path)
    if (path / "saved_model.pb").is_file():
        return path
    versions = sorted((int(p.name), p) for p in path.glob("*") if p.name.isdigit() and (p / "saved_model.pb").is_file())
    if not versions:
        raise ServingError(f"{path}: not a SavedModel (no saved_model.pb) nor a folder of numbered versions")
    return versions[-1][1]


class LocalPredictor:
    """The SavedModel loaded in this process with ``tf.saved_model.load`` (no server).

    Args:
        path: a version folder ``EXPORT_BASE/N``, or ``EXPORT_BASE`` (its latest version).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = resolve_export(path)
        import tensorflow as tf

        self._tf = tf
        self._model = tf.saved_model.load(str(self.path))
        available = self._model.signatures
        self._signatures = {name: available[name] for name in INPUTS if name in available}

    def predict(self, signature: str, inputs: dict) -> dict[str, list]:
        _check_inputs(signature, inputs)
        if signature not in self._signatures:
            if signature.endswith("_soft_typed"):
                hint = " (export a --joint run with --typed --pair-head)"
            elif signature.endswith("_typed"):
                hint = " (export the run with --typed)"
            elif signature.endswith("_approximate"):
                hint = " (export the run with --cells auto)"
            else:
                hint = " (an older export: export again)"
            raise ServingError(f"{self.path}: the export has no {signature} signature{hint}")
        tf = self._tf
        tensors = {
            name: tf.constant([str(v) for v in value], tf.string)
            if name in STRING_INPUTS
            else tf.constant(_scalar(name, value), tf.float32 if name in FLOAT_INPUTS else tf.int32)
            for name, value in inputs.items()
        }
        outputs = self._signatures[signature](**tensors)
        names = (*OUTPUTS[signature], *(n for n in OPTIONAL_OUTPUTS if n in outputs))
        return {name: _to_lists(outputs[name].numpy()) for name in names}


def _to_lists(values):
    """A NumPy array (or what its ``tolist`` gave) → nested Python lists, bytes decoded as UTF-8."""
    values = values.tolist() if hasattr(values, "tolist") else values
    if isinstance(values, list):
        return [_to_lists(v) for v in values]
    return values.decode("utf-8") if isinstance(values, bytes) else values


# -- one question, whatever the backend ----------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Answer:
    """One row of an answer.

    Attributes:
        signature: which signature answered.
        query: ``{"head", "relation", "tail"}`` with None in the asked-for slot.
        found: False when a name of the query is not in the export's vocabulary.
        entities: the top-k names (predict) or ``[]`` (score).
        scores: their scores, or ``[score]`` for the score signature (NaN when not found).
        probabilities: calibrated probabilities of the same (a calibrated export), else None.
    """

    signature: str
    query: dict
    found: bool
    entities: list[str]
    scores: list[float]
    probabilities: list[float] | None = None

    def to_json(self) -> dict:
        """A strict-JSON dict: NaN and -inf scores (unknown names, filtered facts) become null."""
        scores = [s if math.isfinite(s) else None for s in self.scores]
        return {
            "signature": self.signature,
            **self.query,
            "found": self.found,
            "entities": self.entities,
            "scores": scores,
            **({} if self.probabilities is None else {"probabilities": _finite_or_none(self.probabilities)}),
        }


def _finite_or_none(values: list[float]) -> list[float | None]:
    return [v if math.isfinite(v) else None for v in values]


def ask(
    predictor,
    head: str | None = None,
    relation: str | None = None,
    tail: str | None = None,
    k: int = 10,
    typed: bool = False,
    min_pair_probability: float | None = None,
    probe: int | None = None,
):
    """Answer one query; which of ``head``/``relation``/``tail`` is None picks the signature.

    ``(head, relation, ?)`` → ``predict_tail``, ``(?, relation, tail)`` → ``predict_head``,
    ``(head, ?, tail)`` → ``predict_relation``, all three → ``score``. ``typed`` asks the
    ``*_typed`` signatures of a ``--typed`` export for tails and heads (type-aware answers);
    ``min_pair_probability`` the ``*_soft_typed`` ones of a ``--typed --pair-head`` export,
    which also admit the entities the pair head places in the slot; ``probe`` the
    ``*_approximate`` ones of a ``--cells`` export, which rank the rows of ``probe`` cells.

    Returns:
        An `Answer`.
    """
    if relation is None and head is not None and tail is not None:
        query = {"head": head, "relation": None, "tail": tail}
        out = predictor.predict("predict_relation", {"head": [head], "tail": [tail], "k": k})
        scores = [float(s) for s in out["scores"][0]]
        return Answer("predict_relation", query, bool(out["found"][0]), out["relations"][0], scores)
    if relation is None or (head is None and tail is None):
        raise ValueError("give a relation and a head, a tail, or both; or a head and a tail")
    query = {"head": head, "relation": relation, "tail": tail}
    if head is not None and tail is not None:
        out = predictor.predict("score", {"head": [head], "relation": [relation], "tail": [tail]})
        probability = [float(out["probability"][0])] if "probability" in out else None
        return Answer("score", query, bool(out["found"][0]), [], [float(out["score"][0])], probability)
    if probe is not None and (typed or min_pair_probability is not None):
        raise ValueError("probe (approximate answers) cannot be combined with typed answers")
    suffix = "_soft_typed" if min_pair_probability is not None else "_typed" if typed else ""
    suffix = "_approximate" if probe is not None else suffix
    if tail is None:
        signature, inputs, answers = "predict_tail" + suffix, {"head": [head], "relation": [relation]}, "tails"
    else:
        signature, inputs, answers = "predict_head" + suffix, {"relation": [relation], "tail": [tail]}, "heads"
    inputs["k"] = k
    if min_pair_probability is not None:
        inputs["min_pair_probability"] = min_pair_probability
    if probe is not None:
        inputs["probe"] = probe
    out = predictor.predict(signature, inputs)
    probabilities = [float(p) for p in out["probabilities"][0]] if "probabilities" in out else None
    scores = [float(s) for s in out["scores"][0]]
    return Answer(signature, query, bool(out["found"][0]), out[answers][0], scores, probabilities)


def unknown_names(predictor, query: dict) -> dict[str, str]:
    """``{slot: name}`` of the names of a not-found ``query`` that the export does not know.

    Why: an answer says only that *some* name is unknown. Each entity is asked alone (the
    relations of ``(name, ?, name)``), then the relation with a known entity on both sides;
    with no known entity the relation cannot be asked, and only the entities are named.
    """
    unknown, known_entity = {}, None
    for slot in ("head", "tail"):
        name = query.get(slot)
        if name is None:
            continue
        out = predictor.predict("predict_relation", {"head": [name], "tail": [name], "k": 1})
        if bool(out["found"][0]):
            known_entity = name
        else:
            unknown[slot] = name
    relation = query.get("relation")
    if relation is not None and known_entity is not None:
        out = predictor.predict("score", {"head": [known_entity], "relation": [relation], "tail": [known_entity]})
        if not bool(out["found"][0]):
            unknown["relation"] = relation
    return unknown
