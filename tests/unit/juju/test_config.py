"""Config options into checked values: every option's good and bad values, and no crash."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from juju.config import CharmConfig, ConfigError
from scalesets.spec import Settings
from tests.options import DEFAULTS, OPTIONS, charm_config

WHOLE = "must be a whole number"
URL_SHAPE = "must be an absolute http:// or https:// URL with a host, e.g. http://10.0.0.5:9997"
URL_CHARACTERS = "must be printable ASCII without spaces (write a domain as xn--...)"

# (option, value, what the config reads as)
GOOD: list[tuple[str, object, Any]] = [
    ("scaleset-name-budget", 6, lambda c: c.settings.name_budget == 6),
    ("scaleset-name-budget", 64, lambda c: c.settings.name_budget == 64),
    ("handover-timeout-minutes", 0, lambda c: c.settings.handover_timeout == timedelta(0)),
    ("handover-timeout-minutes", 1440, lambda c: c.settings.handover_timeout == timedelta(days=1)),
    ("drain-deadline-minutes", 0, lambda c: c.settings.drain_deadline == timedelta(0)),
    ("drain-deadline-minutes", 43200, lambda c: c.settings.drain_deadline == timedelta(days=30)),
    ("api-port", 1, lambda c: c.api_port == 1),
    ("api-port", 80, lambda c: c.api_port == 80),
    ("api-port", 65535, lambda c: c.api_port == 65535),
    ("external-url", "", lambda c: c.external_url == ""),
    ("external-url", "http://10.0.0.5:9997", lambda c: c.external_url == "http://10.0.0.5:9997"),
    ("external-url", "https://garm.example/", lambda c: c.external_url == "https://garm.example"),
    ("external-url", "https://proxy/garm//", lambda c: c.external_url == "https://proxy/garm"),
    ("external-url", "http://[fd00::5]:80", lambda c: c.external_url == "http://[fd00::5]:80"),
    ("external-url", "HTTP://X:1", lambda c: c.external_url == "HTTP://X:1"),
    ("reconcile-interval", 0, lambda c: c.reconcile_interval == 0),
    ("reconcile-interval", 10, lambda c: c.reconcile_interval == 10),
    ("reconcile-interval", 3600, lambda c: c.reconcile_interval == 3600),
    ("refresh-idle-runners", True, lambda c: c.settings.refresh_idle_runners is True),
    ("refresh-idle-runners", False, lambda c: c.settings.refresh_idle_runners is False),
    ("paused", True, lambda c: c.paused is True),
    ("paused", False, lambda c: c.paused is False),
]

# (option, value, why it is refused)
BAD: list[tuple[str, object, str]] = [
    ("scaleset-name-budget", 5, "must be 6-64"),
    ("scaleset-name-budget", 65, "must be 6-64"),
    ("scaleset-name-budget", "10", WHOLE),
    ("handover-timeout-minutes", -5, "must be 0-1440"),
    ("handover-timeout-minutes", 1441, "must be 0-1440"),
    ("handover-timeout-minutes", True, WHOLE),
    ("drain-deadline-minutes", -1, "must be 0-43200"),
    ("drain-deadline-minutes", 43201, "must be 0-43200"),
    ("drain-deadline-minutes", 10**12, "must be 0-43200"),
    # Too long even to print (Python refuses str() of it): the check must not try.
    ("drain-deadline-minutes", 10**5000, "must be 0-43200"),
    ("drain-deadline-minutes", "7h", WHOLE),
    ("drain-deadline-minutes", 420.0, WHOLE),
    ("api-port", 70000, "must be 1-65535"),
    # The charm's own metrics server listens there: GARM and it would fight for the port.
    ("api-port", 9099, "9099 is the charm's own metrics port: choose another"),
    ("api-port", -1, "must be 1-65535"),
    ("api-port", 0, "must be 1-65535"),
    ("api-port", False, WHOLE),
    ("api-port", None, WHOLE),
    ("api-port", "9997", WHOLE),
    ("external-url", "10.0.0.5:9997", URL_SHAPE),
    ("external-url", "garm.example", URL_SHAPE),
    ("external-url", "ftp://x", URL_SHAPE),
    ("external-url", "http://", URL_SHAPE),
    ("external-url", "http:///x", URL_SHAPE),
    ("external-url", "http://:9997", URL_SHAPE),
    ("external-url", "http://x:0", URL_SHAPE),
    ("external-url", "http://x:70000", URL_SHAPE),
    ("external-url", "http://x:port", URL_SHAPE),
    ("external-url", "http://[fd00::5", URL_SHAPE),
    ("external-url", " http://x", URL_CHARACTERS),
    ("external-url", "http://x ", URL_CHARACTERS),
    ("external-url", "http://x y", URL_CHARACTERS),
    ("external-url", "http://x\n", URL_CHARACTERS),
    ("external-url", "   ", URL_CHARACTERS),
    ("external-url", "http://bücher.example", URL_CHARACTERS),
    (
        "external-url",
        "http://x/?a=1",
        "must have no query or fragment: GARM appends its paths to it",
    ),
    (
        "external-url",
        "http://x#top",
        "must have no query or fragment: GARM appends its paths to it",
    ),
    ("external-url", "http://u:p@x", "must carry no user or password: every runner is sent it"),
    ("external-url", 9997, "must be text"),
    ("reconcile-interval", 5, "must be 0 or 10-3600"),
    ("reconcile-interval", -1, "must be 0 or 10-3600"),
    ("reconcile-interval", 3601, "must be 0 or 10-3600"),
    ("reconcile-interval", "30s", WHOLE),
    # Only a boolean: Juju hands one, and 1 or "yes" is a mistake somewhere else.
    ("refresh-idle-runners", 1, "must be true or false"),
    ("refresh-idle-runners", "true", "must be true or false"),
    ("refresh-idle-runners", None, "must be true or false"),
    ("paused", "yes", "must be true or false"),
    ("paused", 1, "must be true or false"),
]


def short_id(value: object) -> str:
    """A test id, also for an integer too long for str()."""
    if isinstance(value, int) and value.bit_length() > 64:
        return "huge"
    return repr(value)


def test_the_tables_cover_every_option_charmcraft_yaml_declares():
    assert {option for option, _, _ in GOOD} == set(OPTIONS)
    assert {option for option, _, _ in BAD} == set(OPTIONS)


def test_every_option_charmcraft_yaml_declares_is_read():
    # load_config hands over only the options the class has a field for.
    fields = {field.name for field in dataclasses.fields(CharmConfig)}
    assert fields == {option.replace("-", "_") for option in OPTIONS}


def test_an_unset_option_reads_as_its_charmcraft_yaml_default():
    config = charm_config({})
    assert config.settings == Settings()
    assert (config.api_port, config.external_url, config.reconcile_interval) == (9997, "", 30)


@pytest.mark.parametrize(("option", "value", "check"), GOOD)
def test_a_good_value_is_read(option: str, value: object, check: Any):
    assert check(charm_config({**DEFAULTS, option: value}))


@pytest.mark.parametrize(("option", "value", "why"), BAD, ids=short_id)
def test_a_bad_value_is_refused_naming_its_option(option: str, value: object, why: str):
    with pytest.raises(ConfigError) as refused:
        charm_config({**DEFAULTS, option: value})
    assert str(refused.value) == f"{option}: {why}"


def test_every_bad_option_is_named_at_once():
    config = {"api-port": 70000, "external-url": "10.0.0.5:9997", "reconcile-interval": True}
    with pytest.raises(ConfigError) as refused:
        charm_config(config)
    assert str(refused.value) == (
        f"api-port: must be 1-65535; external-url: {URL_SHAPE}; reconcile-interval: {WHOLE}"
    )


# The characters a URL's parts turn on, and some that must never pass. An explicit
# alphabet also spares Hypothesis building its Unicode tables, which on a cold cache takes
# longer than its too-slow health check allows.
URL_ALPHABET = "hHtps:/[]@?#%.:0159xf- \t\n\x00\x7fé\u2028"
URL_LIKE = st.one_of(
    st.text(alphabet=URL_ALPHABET),
    st.builds(
        "{}{}{}{}".format,
        st.sampled_from(["http://", "https://", "HTTP://", "ftp://", "http:", ""]),
        st.sampled_from(["x", "10.0.0.5", "[fd00::5]", "[fd00::5", "u:p@x", "bücher", ""]),
        st.sampled_from(["", ":", ":0", ":80", ":65535", ":65536", ":99999999", ":port"]),
        st.text(alphabet=URL_ALPHABET, max_size=8),
    ),
)
WHOLE_NUMBERS = st.one_of(
    st.integers(),
    st.integers(min_value=-2, max_value=70000),
    st.integers(min_value=0, max_value=40).map(lambda power: 10**power),  # past every cap
)
INT_OPTIONS = sorted(option for option, spec in OPTIONS.items() if spec["type"] == "int")
ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    WHOLE_NUMBERS,
    st.floats(),
    URL_LIKE,
    st.binary(),
    st.lists(st.integers(), max_size=2),
)


@given(st.sampled_from(sorted(OPTIONS)), ANY_VALUE)
def test_any_value_is_read_or_refused_and_nothing_else(option: str, value: object):
    try:
        charm_config({option: value})
    except ConfigError as refused:
        assert str(refused).startswith(f"{option}: ")
        assert "; " not in str(refused)


@given(st.sampled_from(INT_OPTIONS), WHOLE_NUMBERS)
def test_a_whole_number_read_is_one_a_pass_can_use(option: str, value: int):
    try:
        read = charm_config({option: value})
    except ConfigError:
        return
    # No date arithmetic with an accepted duration can overflow.
    now = datetime.now(UTC)
    assert now - read.settings.drain_deadline <= now + read.settings.drain_deadline
    assert now - read.settings.handover_timeout <= now + read.settings.handover_timeout
    assert 1 <= read.api_port <= 65535


@given(URL_LIKE)
def test_any_external_url_is_read_or_refused_and_nothing_else(url: str):
    try:
        read = charm_config({"external-url": url})
    except ConfigError as refused:
        assert str(refused).startswith("external-url: ")
        return
    assert read.external_url == "" or read.external_url.lower().startswith(("http://", "https://"))
    assert not read.external_url.endswith("/")
    assert urlsplit(read.external_url).port != 0
