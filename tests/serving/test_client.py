"""The serving client: TF Serving REST/gRPC requests and responses, and the in-process predictor.

No TensorFlow Serving binary runs here. Requests are checked against TF Serving's documented
formats (REST JSON; ``predict_pb2.PredictRequest``), and responses are decoded from recorded
ones in those formats (``recorded/``), also served by a local HTTP server and a local gRPC
``PredictionService`` so that the predictors' transport code runs too.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import math
import socket
import subprocess
import sys
import threading
from concurrent import futures
from pathlib import Path

import numpy as np
import pytest
from jobi_tf.serving import client
from jobi_tf.serving.client import ServingError

RECORDED = Path(__file__).parent / "recorded"
MODELS_CONFIG = Path(__file__).parents[2] / "serving" / "models.config"


@contextlib.contextmanager
def closed_port():
    """A local port that is bound but not listening: connections to it are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


# -- REST ---------------------------------------------------------------------------------
def test_rest_url_follows_tf_servings_layout():
    assert client.rest_url("http://localhost:8501/", "jobi") == "http://localhost:8501/v1/models/jobi:predict"
    assert client.rest_url("http://h:8501", "jobi", 3) == "http://h:8501/v1/models/jobi/versions/3:predict"


def test_rest_requests_are_columnar_and_score_may_use_rows():
    body = client.rest_request("predict_tail", {"head": ["Berlin"], "relation": ["is-capital-of"], "k": 10})
    assert json.loads(json.dumps(body)) == {
        "signature_name": "predict_tail",
        "inputs": {"head": ["Berlin"], "relation": ["is-capital-of"], "k": 10},
    }
    rows = client.rest_request(
        "score", {"head": ["a", "b"], "relation": ["r", "r"], "tail": ["c", "d"]}, row_format=True
    )
    assert rows == {
        "signature_name": "score",
        "instances": [{"head": "a", "relation": "r", "tail": "c"}, {"head": "b", "relation": "r", "tail": "d"}],
    }
    with pytest.raises(ValueError, match="k is a scalar"):
        client.rest_request("predict_head", {"relation": ["r"], "tail": ["t"], "k": 3}, row_format=True)
    with pytest.raises(ValueError, match="predict_head takes inputs"):
        client.rest_request("predict_head", {"head": ["h"], "relation": ["r"], "k": 3})


def test_decode_recorded_rest_responses():
    out = client.decode_rest_response((RECORDED / "predict_tail_columnar.json").read_bytes(), "predict_tail")
    assert out["found"] == [True, False]
    assert out["tails"][0] == ["Germany", "São Paulo", "entity 03"] and out["tails"][1] == ["", "", ""]
    assert out["scores"][0][0] == pytest.approx(2.97897196) and all(math.isnan(s) for s in out["scores"][1])

    out = client.decode_rest_response((RECORDED / "score_rows.json").read_text(), "score")
    assert out["found"] == [True, False] and out["score"][0] == pytest.approx(0.734551251)
    assert math.isnan(out["score"][1])

    with pytest.raises(ServingError, match=r"server error: Servable not found for request: Latest\(jobi\)"):
        client.decode_rest_response((RECORDED / "not_found.json").read_text(), "score")
    with pytest.raises(ServingError, match="lacks outputs"):
        client.decode_rest_response({"outputs": {"scores": [[1.0]]}}, "predict_tail")


class _Recorded(http.server.BaseHTTPRequestHandler):
    """Answers every POST with a recorded file; keeps what it was sent."""

    answers: dict[str, tuple[int, bytes]] = {}
    received: list[tuple[str, dict]] = []

    def do_POST(self):  # noqa: N802 (the stdlib's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.received.append((self.path, body))
        status, payload = self.answers[self.path]
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):  # keep test output clean
        pass


@pytest.fixture
def rest_server():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Recorded)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Recorded.received.clear()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_rest_predictor_posts_the_request_and_decodes_the_answer(rest_server):
    _Recorded.answers = {
        "/v1/models/jobi:predict": (200, (RECORDED / "predict_tail_columnar.json").read_bytes()),
        "/v1/models/other:predict": (404, (RECORDED / "not_found.json").read_bytes()),
    }
    answer = client.ask(client.RestPredictor(rest_server, "jobi"), head="Berlin", relation="is-capital-of", k=3)
    path, body = _Recorded.received[-1]
    assert path == "/v1/models/jobi:predict"
    assert body == {
        "signature_name": "predict_tail",
        "inputs": {"head": ["Berlin"], "relation": ["is-capital-of"], "k": 3},
    }
    assert answer.found and answer.entities == ["Germany", "São Paulo", "entity 03"]
    assert answer.scores == pytest.approx([2.97897196, 2.53669596, 1.81785595])
    with pytest.raises(ServingError, match="HTTP 404: Servable not found"):
        client.RestPredictor(rest_server, "other").predict("predict_tail", {"head": ["a"], "relation": ["r"], "k": 1})


def test_an_unreachable_rest_server_is_one_clear_error():
    with closed_port() as port:
        predictor = client.RestPredictor(f"http://127.0.0.1:{port}", "jobi", timeout=2)
        with pytest.raises(ServingError, match="cannot reach .* is tensorflow_model_server running"):
            predictor.predict("score", {"head": ["a"], "relation": ["r"], "tail": ["b"]})


# -- gRPC ---------------------------------------------------------------------------------
def test_grpc_request_parses_as_a_predict_request():
    from tensorflow_serving.apis import predict_pb2

    request = client.grpc_request("predict_tail", {"head": ["São Paulo"], "relation": ["borders"], "k": 5}, "jobi", 2)
    parsed = predict_pb2.PredictRequest.FromString(request.SerializeToString())
    assert parsed.model_spec.name == "jobi" and parsed.model_spec.version.value == 2
    assert parsed.model_spec.signature_name == "predict_tail"
    head = parsed.inputs["head"]
    assert head.dtype == 7 and [d.size for d in head.tensor_shape.dim] == [1]  # DT_STRING
    assert head.string_val == ["São Paulo".encode()]
    k = parsed.inputs["k"]
    assert k.dtype == 3 and len(k.tensor_shape.dim) == 0 and list(k.int_val) == [5]  # DT_INT32 scalar
    assert set(parsed.inputs) == {"head", "relation", "k"}


def _recorded_grpc_response():
    from google.protobuf import text_format
    from tensorflow_serving.apis import predict_pb2

    return text_format.Parse((RECORDED / "predict_head_response.pbtxt").read_text(), predict_pb2.PredictResponse())


def test_decode_recorded_grpc_responses_in_both_tensor_encodings():
    out = client.decode_grpc_response(_recorded_grpc_response(), "predict_head")
    assert out["found"] == [True, False]
    assert out["heads"] == [["Berlin", "São Paulo"], ["", ""]]
    assert out["scores"][0] == [1.5, -0.25] and all(math.isnan(s) for s in out["scores"][1])

    # The same scores packed in tensor_content (TF Serving's other encoding of numeric outputs).
    response = _recorded_grpc_response()
    scores = response.outputs["scores"]
    packed = np.array([[1.5, -0.25], [np.nan, np.nan]], "<f4").tobytes()
    scores.ClearField("float_val")
    scores.tensor_content = packed
    again = client.decode_grpc_response(response, "predict_head")
    assert again["scores"][0] == [1.5, -0.25] and math.isnan(again["scores"][1][0])


def test_grpc_predictor_talks_to_a_prediction_service():
    import grpc
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    received = []

    class Recorded(prediction_service_pb2_grpc.PredictionServiceServicer):
        def Predict(self, request, context):  # noqa: N802 (the service's name)
            received.append(request)
            return _recorded_grpc_response()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(Recorded(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        answer = client.ask(client.GrpcPredictor(f"127.0.0.1:{port}", "jobi"), relation="borders", tail="Brazil", k=2)
    finally:
        server.stop(None)
    assert received[0].model_spec.signature_name == "predict_head" and received[0].inputs["tail"].string_val == [
        b"Brazil"
    ]
    assert answer.signature == "predict_head" and answer.entities == ["Berlin", "São Paulo"]

    with closed_port() as closed:
        with pytest.raises(ServingError, match=f"cannot reach grpc://127.0.0.1:{closed}: UNAVAILABLE"):
            client.GrpcPredictor(f"127.0.0.1:{closed}", "jobi", timeout=2).predict(
                "score", {"head": ["a"], "relation": ["r"], "tail": ["b"]}
            )


def test_models_config_parses_as_a_model_server_config():
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    config = text_format.Parse(MODELS_CONFIG.read_text(), model_server_config_pb2.ModelServerConfig())
    (model,) = config.model_config_list.config
    assert model.name == "jobi" and model.base_path.startswith("/") and model.model_platform == "tensorflow"


# -- in-process ---------------------------------------------------------------------------
def test_local_predictor_answers_like_the_signatures(random_export):
    import tensorflow as tf

    export = random_export("complex")
    local = client.LocalPredictor(export.path.parent)  # the base folder: its latest version
    assert local.path == export.path
    answer = client.ask(local, head="Berlin", relation="borders", k=4)
    direct = tf.saved_model.load(str(export.path)).signatures["predict_tail"](
        head=tf.constant(["Berlin"]), relation=tf.constant(["borders"]), k=tf.constant(4)
    )
    assert answer.entities == [t.decode() for t in direct["tails"].numpy()[0]]
    np.testing.assert_allclose(answer.scores, direct["scores"].numpy()[0], rtol=1e-6)
    score = client.ask(local, head="Berlin", relation="borders", tail=answer.entities[0])
    assert score.signature == "score" and score.scores[0] == pytest.approx(answer.scores[0], rel=1e-5)
    heads = client.ask(local, relation="borders", tail="São Paulo", k=2)
    assert heads.signature == "predict_head" and len(heads.entities) == 2

    unknown = client.ask(local, head="Atlantis", relation="borders", k=3)
    assert not unknown.found and unknown.entities == ["", "", ""]
    assert unknown.to_json()["scores"] == [None, None, None]  # strict JSON: NaN → null


def test_a_folder_that_is_not_an_export_is_refused(tmp_path):
    with pytest.raises(ServingError, match="not a SavedModel"):
        client.resolve_export(tmp_path)


def test_importing_the_client_does_not_import_tensorflow():
    code = (
        "import sys\nfrom jobi_tf.serving import client\n"
        "client.rest_request('score', {'head': ['a'], 'relation': ['r'], 'tail': ['b']})\n"
        "print('tensorflow' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
