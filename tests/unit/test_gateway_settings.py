import argparse
import os

import pytest

from gateway import settings as s


def parse(argv, monkeypatch, **env):
    for name in [n for n in os.environ if n.startswith(("GATEWAY_", "TRITON_"))]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    parser = argparse.ArgumentParser()
    s.add_arguments(parser)
    return s.from_arguments(parser.parse_args(argv))


def test_defaults(monkeypatch):
    assert parse([], monkeypatch) == s.Settings()


def test_flags_and_environment(monkeypatch):
    settings = parse(
        ["--max-contexts", "3", "--idle-timeout", "2.5", "--allowed-origins", "http://a.test, http://b.test"],
        monkeypatch, GATEWAY_API_KEY="k", TRITON_GRPC_URL="triton:8001", GATEWAY_MAX_CONTEXTS="9",
    )
    assert settings.max_contexts == 3  # a flag beats the environment
    assert settings.idle_timeout_s == 2.5
    assert settings.allowed_origins == ("http://a.test", "http://b.test")
    assert settings.api_key == "k" and settings.triton_urls == ("triton:8001",)


def test_a_bad_value_is_refused(monkeypatch):
    with pytest.raises(SystemExit):
        parse(["--max-contexts", "many"], monkeypatch)


def test_the_api_key_stays_out_of_reprs(monkeypatch):
    assert "k3y" not in repr(parse([], monkeypatch, GATEWAY_API_KEY="k3y"))
