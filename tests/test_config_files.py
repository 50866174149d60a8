"""Config files: TOML in the platform directory (or named by SLUICE_CONFIG / --config), JSON
still, environment overrides, and errors that name the path and the valid keys."""

import orjson
import pytest

from sluice._cli import main
from sluice._config import (
    ProviderConfig,
    RuntimeConfig,
    config_from_env,
    default_config_path,
    env_overrides,
    load_config,
    load_config_file,
)
from sluice._errors import ConfigError

TOML = """
stream_buffer = 4

[retry]
max_attempts = 2

[providers.openai]
base_url = "http://127.0.0.1:9/v1"
params = { temperature = 0.2, thinking = { type = "enabled" } }
drop_params = ["seed"]
headers = { "X-Team" = "infra" }

[providers.openai.rate_limit]
requests_per_minute = 60

[providers.openai.models."gpt-4o".params]
temperature = 0.5

[providers.corp]
protocol = "anthropic"
base_url = "https://corp.example/v1"
auth = "bearer"
quirks = { echo_reasoning_content = false }
"""


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("SLUICE_CONFIG", raising=False)


def test_a_toml_file_loads_every_section(tmp_path):
    path = tmp_path / "sluice.toml"
    path.write_text(TOML)
    config = load_config_file(path, {})
    assert config.stream_buffer == 4 and config.retry.max_attempts == 2
    openai = config.providers["openai"]
    assert openai.params == {"temperature": 0.2, "thinking": {"type": "enabled"}}
    assert openai.drop_params == {"seed"}
    assert openai.rate_limit.requests_per_minute == 60
    assert openai.models["gpt-4o"].params == {"temperature": 0.5}
    corp = config.providers["corp"]
    assert corp.protocol == "anthropic" and corp.auth == "bearer"
    assert corp.quirks is not None
    assert corp.quirks.echo_reasoning_content is False and corp.quirks.omit_tool_choice is None


def test_json_files_and_text_still_load(tmp_path):
    path = tmp_path / "sluice.json"
    path.write_bytes(orjson.dumps({"providers": {"x": {"base_url": "http://x/v1"}}}))
    assert load_config_file(path, {}).providers["x"].base_url == "http://x/v1"
    assert load_config('{"stream_buffer": 2}').stream_buffer == 2
    assert load_config("stream_buffer = 3", format="toml").stream_buffer == 3


def test_an_unknown_key_names_its_path_the_valid_keys_and_a_close_match(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[providers.openai]\nbase_ulr = "http://x"\n')
    with pytest.raises(ConfigError) as info:
        load_config_file(path, {})
    text = str(info.value)
    assert text.startswith(f"{path}: invalid config:")
    assert "unknown key 'base_ulr' (did you mean 'base_url'?)" in text
    assert "@ $.providers['openai']" in text
    assert "valid keys: api_key, api_key_env, api_version, auth, base_url," in text
    with pytest.raises(
        ConfigError,
        match=r"unknown key 'retyr' \(did you mean 'retry'\?\); valid keys: .*stream_buffer.* @ \$",
    ):
        load_config({"retyr": {}})


def test_a_misspelt_nested_key_and_a_bad_value_are_both_reported():
    with pytest.raises(ConfigError) as info:
        load_config(
            {
                "providers": {
                    "a": {"rate_limit": {"requests_per_minut": 1}},
                    "b": {"protocol": "grpc"},
                }
            }
        )
    text = str(info.value)
    assert "unknown key 'requests_per_minut' (did you mean 'requests_per_minute'?)" in text
    assert "$.providers['a'].rate_limit" in text
    assert "$.providers['b'].protocol" in text


def test_syntax_errors_and_unreadable_files_are_config_errors(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("[providers\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config_file(path, {})
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config_file(tmp_path / "missing.toml", {})


def test_environment_overrides_build_a_nested_mapping():
    env = {
        "SLUICE_PROVIDERS__OPENAI__BASE_URL": "http://127.0.0.1:8000/v1",
        "SLUICE_PROVIDERS__KIMI_CN__REGION": "x",
        "SLUICE_RETRY__MAX_ATTEMPTS": "2",
        "SLUICE_PROVIDERS__OPENAI__HEADERS": '{"X-A": "1"}',
        "SLUICE_CONFIG": "/not/an/override",
        "SLUICE_MASTER_KEY": "not-an-override",
        "OTHER__THING": "1",
    }
    assert env_overrides(env) == {
        "providers": {
            "openai": {"base_url": "http://127.0.0.1:8000/v1", "headers": {"X-A": "1"}},
            "kimi-cn": {"region": "x"},
        },
        "retry": {"max_attempts": 2},
    }


def test_environment_overrides_win_over_the_file(tmp_path):
    path = tmp_path / "sluice.toml"
    path.write_text(TOML)
    env = {
        "SLUICE_PROVIDERS__OPENAI__BASE_URL": "http://other/v1",
        "SLUICE_RETRY__MAX_ATTEMPTS": "5",
    }
    config = load_config_file(path, env)
    assert config.providers["openai"].base_url == "http://other/v1"
    assert config.providers["openai"].params["temperature"] == 0.2  # the rest of the entry stays
    assert config.retry.max_attempts == 5
    with pytest.raises(ConfigError, match="environment overrides"):
        load_config_file(path, {"SLUICE_RETRY__MAX_ATEMPTS": "5"})


def test_config_from_env_prefers_sluice_config_then_the_platform_file(tmp_path):
    assert config_from_env({}) == RuntimeConfig()
    default = default_config_path()
    assert default == tmp_path / "config" / "sluice" / "config.toml"
    default.parent.mkdir(parents=True)
    default.write_text("stream_buffer = 5\n")
    assert config_from_env({}).stream_buffer == 5
    named = tmp_path / "named.json"
    named.write_text('{"stream_buffer": 6}')
    assert config_from_env({"SLUICE_CONFIG": str(named)}).stream_buffer == 6
    assert config_from_env({"SLUICE_RETRY__MAX_ATTEMPTS": "3"}).retry.max_attempts == 3
    named.write_text('{"stream_bufer": 6}')
    with pytest.raises(ConfigError, match=r"named.json: .*stream_buffer.*\(from SLUICE_CONFIG\)"):
        config_from_env({"SLUICE_CONFIG": str(named)})


def test_the_config_flag_reads_toml_and_reports_errors(tmp_path, capsys):
    path = tmp_path / "c.toml"
    path.write_text('[providers.corp]\nbase_url = "http://corp/v1"\nbase_ulr = "x"\n')
    assert main(["providers", "list", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "unknown key 'base_ulr' (did you mean 'base_url'?)" in err and str(path) in err


def test_headers_that_may_hold_secrets_are_masked_in_reprs():
    entry = ProviderConfig(
        headers={"Authorization": "Bearer sk-hidden", "X-Api-Key": "k-hidden", "X-Team": "a"}
    )
    text = repr(entry)
    assert "sk-hidden" not in text and "k-hidden" not in text and "'X-Team': 'a'" in text


def test_chat_takes_a_toml_config_with_the_config_flag(tmp_path, capsys):
    path = tmp_path / "c.toml"
    path.write_text("[retry]\nmax_attempts = 1\n\n[providers.sim.params]\nmax_tokens = 3\n")
    assert main(["chat", "sim:sim-small", "hi", "--json", "--config", str(path)]) == 0
    result = orjson.loads(capsys.readouterr().out)
    assert result["usage"]["output_tokens"] == 3  # the provider's params reached the request
    path.write_text("[retry]\nmax_atempts = 1\n")
    assert main(["chat", "sim:sim-small", "hi", "--config", str(path)]) == 2
    assert "did you mean 'max_attempts'?" in capsys.readouterr().err


GROUPS_TOML = """
[groups.fast]
deployments = ["openai:gpt-4o-mini", { model = "groq:llama-3.1-8b", weight = 3 }]
strategy = "weighted"

[groups]
cheap = ["openai:gpt-4o-mini", "groq:llama-3.1-8b"]
"""


def test_groups_take_the_shorthands_the_classes_take(tmp_path):
    path = tmp_path / "sluice.toml"
    path.write_text(GROUPS_TOML)
    groups = load_config_file(path, {}).groups
    fast, cheap = groups["fast"], groups["cheap"]
    assert [(d.model, d.weight) for d in fast.deployments] == [
        ("openai:gpt-4o-mini", 1.0),
        ("groq:llama-3.1-8b", 3.0),
    ]
    assert fast.strategy == "weighted"
    assert [d.model for d in cheap.deployments] == ["openai:gpt-4o-mini", "groq:llama-3.1-8b"]
    assert cheap.strategy == "least-busy"


def test_a_deployment_without_a_provider_names_its_path(tmp_path):
    path = tmp_path / "sluice.toml"
    path.write_text('[groups.fast]\ndeployments = ["gpt-4o-mini"]\n')
    with pytest.raises(ConfigError) as caught:
        load_config_file(path, {})
    message = str(caught.value)
    assert "groups['fast'].deployments[0]" in message and "provider:model" in message
    assert "has no attribute" not in message
