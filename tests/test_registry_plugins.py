"""Plugin providers from the ``sluice.providers`` entry points: good ones resolve, broken ones
are reported and never stop anything."""

import logging
import textwrap
from importlib.metadata import EntryPoint

import pytest

from sluice._config import RuntimeConfig
from sluice._errors import ConfigError
from sluice.providers import _plugins as plugins
from sluice.providers._builtins import BUILTIN_BY_ID
from sluice.providers._keys import KeyStore
from sluice.providers._registry import known_providers, resolve_provider

PLUGIN_MODULE = textwrap.dedent(
    """
    from sluice.providers._definition import ProviderDefinition, models

    def providers():
        return [
            ProviderDefinition(
                id="acme",
                display_name="Acme LLM",
                base_url="https://llm.acme.example/v1",
                key_env=("ACME_KEY",),
                models=models("acme-1"),
            ),
            {"id": "acme-claude", "display_name": "Acme Claude", "protocol": "anthropic",
             "base_url": "https://llm.acme.example/anthropic/v1", "auth": "bearer",
             "key_env": ["ACME_KEY"]},
        ]

    def single():
        return ProviderDefinition(id="solo", display_name="Solo", base_url="http://s/v1",
                                  needs_key=False)

    def raises():
        raise RuntimeError("the plugin's own bug")

    def wrong_type():
        return 42

    def bad_mapping():
        return [{"id": "bad", "display_name": "Bad", "base_url": "http://b", "colour": "red"}]

    def steals_builtin():
        return [ProviderDefinition(id="openai", display_name="Fake", base_url="http://evil/v1")]

    def duplicate():
        return [ProviderDefinition(id="acme", display_name="Again", base_url="http://a/v1")]

    NOT_CALLABLE = [ProviderDefinition(id="plain", display_name="Plain", base_url="http://p/v1",
                                       needs_key=False)]
    """
)


@pytest.fixture
def plugin_module(tmp_path, monkeypatch):
    (tmp_path / "acme_plugin.py").write_text(PLUGIN_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "acme_plugin"


def point(name, value):
    return EntryPoint(name=name, value=value, group=plugins.ENTRY_POINT_GROUP)


def load(*points):
    return plugins.load(points, reserved=frozenset(BUILTIN_BY_ID))


def no_store(tmp_path):
    return KeyStore(tmp_path / "k", tmp_path / "m", {})


def test_good_plugins_give_definitions_from_objects_and_mappings(plugin_module):
    loaded = load(
        point("acme", f"{plugin_module}:providers"),
        point("solo", f"{plugin_module}:single"),
        point("plain", f"{plugin_module}:NOT_CALLABLE"),
    )
    assert loaded.problems == ()
    assert sorted(loaded.definitions) == ["acme", "acme-claude", "plain", "solo"]
    assert loaded.definitions["acme-claude"].protocol == "anthropic"
    assert loaded.sources["acme"] == f"acme = {plugin_module}:providers"


def test_a_plugin_provider_resolves_like_a_builtin(plugin_module, tmp_path):
    loaded = load(point("acme", f"{plugin_module}:providers"))
    env = {"ACME_KEY": "sk-acme-key-0123456789"}
    spec = resolve_provider(
        "acme-claude", RuntimeConfig(), env, plugins=loaded, key_store=no_store(tmp_path)
    )
    assert spec.protocol == "anthropic"
    assert spec.base_url == "https://llm.acme.example/anthropic/v1"
    assert spec.headers == {"authorization": "Bearer sk-acme-key-0123456789"}
    with pytest.raises(ConfigError, match="ACME_KEY"):
        resolve_provider("acme", RuntimeConfig(), {}, plugins=loaded, key_store=no_store(tmp_path))
    listed = known_providers(RuntimeConfig(), loaded)
    assert listed["acme"][0] == "plugin" and listed["openai"][0] == "builtin"


@pytest.mark.parametrize(
    ("attr", "fragment"),
    [
        ("raises", "RuntimeError: the plugin's own bug"),
        ("wrong_type", "gave a int, not provider definitions"),
        ("bad_mapping", "unknown key 'colour'"),
        ("steals_builtin", "provider 'openai' is a builtin; not replaced"),
        ("no_such_attribute", "AttributeError"),
    ],
)
def test_a_broken_plugin_is_reported_and_skipped(plugin_module, attr, fragment, caplog):
    caplog.set_level(logging.WARNING, logger="sluice.providers._plugins")
    loaded = load(
        point("broken", f"{plugin_module}:{attr}"), point("solo", f"{plugin_module}:single")
    )
    assert list(loaded.definitions) == ["solo"]
    (problem,) = loaded.problems
    assert problem.plugin == f"broken = {plugin_module}:{attr}"
    assert fragment in problem.message
    assert fragment in caplog.text


def test_a_plugin_that_does_not_import_is_reported(tmp_path):
    loaded = load(point("gone", "no_such_module_anywhere:providers"))
    assert loaded.definitions == {}
    assert "ModuleNotFoundError" in loaded.problems[0].message


def test_the_first_plugin_to_give_an_id_keeps_it(plugin_module):
    loaded = load(
        point("acme", f"{plugin_module}:providers"), point("again", f"{plugin_module}:duplicate")
    )
    assert loaded.definitions["acme"].display_name == "Acme LLM"
    assert "already given by acme = " in loaded.problems[0].message


def test_an_unknown_provider_error_mentions_broken_plugins(plugin_module, tmp_path):
    loaded = load(point("broken", f"{plugin_module}:raises"))
    with pytest.raises(ConfigError, match=r"provider plugin broken = .*the plugin's own bug"):
        resolve_provider("acme", RuntimeConfig(), {}, plugins=loaded, key_store=no_store(tmp_path))


def test_installed_plugins_load_once_and_do_not_fail():
    first = plugins.installed_plugins(frozenset(BUILTIN_BY_ID))
    assert plugins.installed_plugins(frozenset(BUILTIN_BY_ID)) is first
