"""The bridge's settings from the environment: defaults match manifests/bridge, bad values name
the variable."""

from __future__ import annotations

import pytest

from queue_bridge import settings


def test_defaults_match_the_deployment() -> None:
    config = settings.Settings.from_env({"KONTINUE_POD_NAME": "bridge-7f9c"})
    assert config.identity == "bridge-7f9c"
    assert config.namespace == "kontinue-system"
    assert config.lease_name == "kontinue-bridge"
    assert config.health_port == 8081
    assert config.admission_check is True


def test_values_are_read() -> None:
    config = settings.Settings.from_env(
        {
            "KONTINUE_NAMESPACE": "ops",
            "KONTINUE_BRIDGE_WORKERS": "8",
            "KONTINUE_FINALIZER_MARGIN_SECONDS": "12.5",
            "KONTINUE_ADMISSION_CHECK": "false",
            "KONTINUE_ADOPT_UNLABELLED_PODS": "false",
        }
    )
    assert (config.namespace, config.workers, config.finalizer_margin_seconds) == ("ops", 8, 12.5)
    assert config.admission_check is False
    assert config.adopt_unlabelled_pods is False
    assert settings.Settings.from_env({}).adopt_unlabelled_pods is True


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"KONTINUE_BRIDGE_WORKERS": "many"}, "KONTINUE_BRIDGE_WORKERS: 'many' is not a whole"),
        ({"KONTINUE_BRIDGE_WORKERS": "0"}, "KONTINUE_BRIDGE_WORKERS: must be >= 1"),
        ({"KONTINUE_SETTLE_SECONDS": "soon"}, "KONTINUE_SETTLE_SECONDS: 'soon' is not a number"),
        (
            {"KONTINUE_HEALTH_PORT_NUMBER": "70000"},
            "KONTINUE_HEALTH_PORT_NUMBER: 70000 is not a port",
        ),
        ({"KONTINUE_ADMISSION_CHECK": "yes"}, "KONTINUE_ADMISSION_CHECK: 'yes' is not true or"),
        (
            {"KONTINUE_ADOPT_UNLABELLED_PODS": "1"},
            "KONTINUE_ADOPT_UNLABELLED_PODS: '1' is not true or",
        ),
        ({"KONTINUE_LEASE_RENEW_SECONDS": "20"}, "need KONTINUE_LEASE_RENEW_SECONDS <"),
        ({"KONTINUE_FINALIZER_MARGIN_SECONDS": "0"}, "KONTINUE_FINALIZER_MARGIN_SECONDS: must"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        settings.Settings.from_env(env)
