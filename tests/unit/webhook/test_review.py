"""The AdmissionReview envelope and the webhook's settings."""

from __future__ import annotations

import base64
import json

import pytest

from tests.unit.webhook import support
from webhook import review, settings


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"{not json", "not JSON"),
        (b"[]", "not a JSON object"),
        (b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}', "apiVersion"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "request"),
        (
            json.dumps(
                {
                    **support.recorded("03-"),
                    "request": {**support.recorded("03-")["request"], "uid": ""},
                }
            ).encode(),
            "request.uid",
        ),
        (
            json.dumps(
                {
                    **support.recorded("03-"),
                    "request": {**support.recorded("03-")["request"], "operation": "PATCH"},
                }
            ).encode(),
            "request.operation",
        ),
    ],
)
def test_malformed_reviews_name_the_cause(body: bytes, says: str) -> None:
    with pytest.raises(review.MalformedReview, match=says):
        review.parse(body)


@pytest.mark.parametrize("path", sorted(support.ADMISSION.glob("*.json")), ids=lambda p: p.stem)
def test_every_recorded_review_parses(path: object) -> None:
    parsed = review.parse(path.read_bytes())  # type: ignore[attr-defined]
    assert parsed.request.uid


def test_allowed_response_echoes_uid_and_carries_base64_json_patch() -> None:
    ops = [{"op": "add", "path": "/metadata/finalizers/-", "value": "x"}]
    answer = review.response("u-1", review.allow(ops, ["careful"]))
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == "u-1"
    assert answer["response"]["allowed"] is True
    assert answer["response"]["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(answer["response"]["patch"])) == ops
    assert answer["response"]["warnings"] == ["careful"]
    assert "status" not in answer["response"]


def test_no_op_response_has_no_patch_at_all() -> None:
    assert review.response("u-2", review.allow()) == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "u-2", "allowed": True},
    }


@pytest.mark.parametrize(
    ("verdict", "code", "reason"),
    [(review.invalid("bad"), 422, "Invalid"), (review.forbidden("no"), 403, "Forbidden")],
)
def test_denial_carries_status(verdict: review.Verdict, code: int, reason: str) -> None:
    answer = review.response("u-3", verdict)["response"]
    assert answer["allowed"] is False
    assert answer["status"] == {"code": code, "reason": reason, "message": verdict.message}
    assert "patch" not in answer


def test_settings_from_env() -> None:
    config = settings.Settings.from_env(
        {
            "KONTINUE_NAMESPACE": "ops",
            "KONTINUE_WEBHOOK_PORT_NUMBER": "8443",
            "KONTINUE_WEBHOOK_CERT_MODE": "files",
            "KONTINUE_QUEUE_SYSTEMS": "kueue",
            "KONTINUE_TRUSTED_USERS": "a, b",
        }
    )
    assert config.port == 8443
    assert config.cert_mode is settings.CertMode.FILES
    assert config.queue_systems == ("kueue",)
    assert "system:serviceaccount:ops:kontinue-webhook" in config.own_users
    assert {"a", "b"} <= config.own_users
    assert config.hostnames[-1] == "kontinue-webhook.ops.svc.cluster.local"
    assert settings.Settings.from_env({}) == settings.Settings()


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"KONTINUE_WEBHOOK_PORT_NUMBER": "http"}, "KONTINUE_WEBHOOK_PORT_NUMBER"),
        ({"KONTINUE_WEBHOOK_PORT_NUMBER": "70000"}, "KONTINUE_WEBHOOK_PORT_NUMBER"),
        ({"KONTINUE_WEBHOOK_CERT_MODE": "acme"}, "KONTINUE_WEBHOOK_CERT_MODE"),
        ({"KONTINUE_QUEUE_SYSTEMS": "kueue,slurm"}, "slurm"),
        ({"KONTINUE_WEBHOOK_DRAIN_SECONDS": "soon"}, "KONTINUE_WEBHOOK_DRAIN_SECONDS"),
        ({"KONTINUE_WEBHOOK_LIVE_READ_SECONDS": "5"}, "between 0 and 3 .*timeoutSeconds"),
        ({"KONTINUE_WEBHOOK_LIVE_READ_SECONDS": "-1"}, "KONTINUE_WEBHOOK_LIVE_READ_SECONDS"),
    ],
)
def test_bad_settings_name_the_variable(env: dict[str, str], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        settings.Settings.from_env(env)
