"""The encrypted key store: round trips, file modes, atomic writes, wrong master keys, and the
``sluice keys`` commands."""

import io
import os
import stat

import orjson
import pytest

from sluice._cli import main
from sluice._config import ProviderConfig, RuntimeConfig, Secret
from sluice._errors import ConfigError
from sluice.providers._keys import KeyStore, KeyStoreError, mask_key, new_master_key
from sluice.providers._plugins import PluginProviders
from sluice.providers._registry import resolve_provider

KEY = "sk-proj-STORED-0123456789abcdefghij"


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.delenv("SLUICE_MASTER_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


@pytest.fixture
def store(tmp_path):
    return KeyStore(tmp_path / "cfg" / "keys.enc", tmp_path / "data" / "master.key", {})


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def revealed(store: KeyStore, name: str) -> str:
    """The plaintext of a key that must be stored."""
    secret = store.get(name)
    assert secret is not None, f"no key {name!r} stored"
    return secret.reveal()


def test_a_key_round_trips_and_the_file_holds_no_plaintext(store):
    store.set("openai", KEY)
    assert revealed(store, "openai") == KEY
    assert store.get("anthropic") is None
    assert store.names() == ["openai"]
    raw = store.path.read_bytes()
    assert KEY.encode() not in raw
    assert set(orjson.loads(raw)) == {"version", "keys"}
    assert KEY not in repr(store) and KEY not in repr(store.get("openai"))


def test_files_are_0600_and_directories_0700(store):
    store.set("openai", KEY)
    assert mode(store.path) == 0o600
    assert mode(store.master_key_path) == 0o600
    assert mode(store.path.parent) == 0o700
    assert mode(store.master_key_path.parent) == 0o700
    store.set("openai", KEY + "x")  # rewritten, still private
    assert mode(store.path) == 0o600


def test_writes_are_atomic_and_leave_no_temporary_files(store):
    store.set("a", KEY)
    store.set("b", KEY)
    assert store.delete("a") is True
    assert store.delete("a") is False
    assert sorted(p.name for p in store.path.parent.iterdir()) == ["keys.enc"]
    assert store.names() == ["b"]


def test_the_default_store_lives_in_the_platform_directories(tmp_path):
    default = KeyStore.default({})
    assert default.path == tmp_path / "config" / "sluice" / "keys.enc"
    assert default.master_key_path == tmp_path / "data" / "sluice" / "master.key"


def test_a_key_under_another_master_key_is_an_error_never_a_key(tmp_path, store):
    store.set("openai", KEY)
    other = KeyStore(store.path, store.master_key_path, {"SLUICE_MASTER_KEY": new_master_key()})
    with pytest.raises(KeyStoreError) as info:
        other.get("openai")
    text = str(info.value)
    assert "does not decrypt with SLUICE_MASTER_KEY" in text
    assert "sluice keys set openai" in text
    assert KEY not in text


def test_a_token_moved_to_another_provider_does_not_decrypt(store):
    store.set("openai", KEY)
    data = orjson.loads(store.path.read_bytes())
    data["keys"]["deepseek"] = data["keys"]["openai"]
    store.path.write_bytes(orjson.dumps(data))
    with pytest.raises(KeyStoreError, match="'deepseek' does not decrypt"):
        store.get("deepseek")


def test_master_key_from_the_environment(tmp_path):
    master = new_master_key()
    a = KeyStore(tmp_path / "k.enc", tmp_path / "unused.key", {"SLUICE_MASTER_KEY": master})
    a.set("openai", KEY)
    assert not (tmp_path / "unused.key").exists()
    b = KeyStore(tmp_path / "k.enc", tmp_path / "unused.key", {"SLUICE_MASTER_KEY": master})
    assert revealed(b, "openai") == KEY
    bad = KeyStore(tmp_path / "k.enc", tmp_path / "unused.key", {"SLUICE_MASTER_KEY": "short"})
    with pytest.raises(KeyStoreError, match="not a Fernet key"):
        bad.get("openai")


def test_a_missing_master_key_file_is_an_error_when_reading(store):
    store.set("openai", KEY)
    store.master_key_path.unlink()
    fresh = KeyStore(store.path, store.master_key_path, {})
    with pytest.raises(KeyStoreError, match="no master key"):
        fresh.get("openai")


def test_files_others_may_read_are_refused(store):
    store.set("openai", KEY)
    os.chmod(store.path, 0o644)
    with pytest.raises(KeyStoreError, match="chmod 600"):
        KeyStore(store.path, store.master_key_path, {}).get("openai")
    os.chmod(store.path, 0o600)
    os.chmod(store.master_key_path, 0o640)
    with pytest.raises(KeyStoreError, match="may be read by other users"):
        KeyStore(store.path, store.master_key_path, {}).get("openai")


def test_a_damaged_store_is_reported(store):
    store.set("openai", KEY)
    store.path.write_bytes(b"not json")
    with pytest.raises(KeyStoreError, match="damaged"):
        store.names()


def test_mask_key_shows_at_most_seven_characters():
    assert mask_key(KEY) == "sk-...ghij"
    assert mask_key("short-key") == "********"


# The registry consults the store last.


def resolve(name, store, config=None, env=None):
    return resolve_provider(
        name, config or RuntimeConfig(), env or {}, plugins=PluginProviders(), key_store=store
    )


def test_resolve_uses_the_store_when_config_and_environment_have_no_key(store):
    store.set("openai", KEY)
    spec = resolve("openai", store)
    assert spec.api_key.reveal() == KEY and spec.key_source == "store"
    env_spec = resolve("openai", store, env={"OPENAI_API_KEY": "sk-env"})
    assert env_spec.api_key.reveal() == "sk-env"
    config = RuntimeConfig(providers={"openai": ProviderConfig(api_key=Secret("sk-cfg"))})
    assert resolve("openai", store, config).api_key.reveal() == "sk-cfg"


def test_resolve_fails_on_a_key_that_does_not_decrypt(store):
    store.set("openai", KEY)
    broken = KeyStore(store.path, store.master_key_path, {"SLUICE_MASTER_KEY": new_master_key()})
    with pytest.raises(ConfigError, match="does not decrypt"):
        resolve("openai", broken)


def test_resolve_does_not_touch_cryptography_without_a_store(store):
    assert not store.exists()
    with pytest.raises(ConfigError, match="needs an API key"):
        resolve("openai", store)


# The commands.


def feed_stdin(monkeypatch, text):
    monkeypatch.setattr("sys.stdin", io.StringIO(text))


def test_keys_set_list_delete(monkeypatch, capsys, tmp_path):
    feed_stdin(monkeypatch, KEY + "\n")
    assert main(["keys", "set", "openai"]) == 0
    out = capsys.readouterr().out
    assert "sk-...ghij" in out and KEY not in out
    default = KeyStore.default({})
    assert revealed(default, "openai") == KEY
    assert mode(default.path) == 0o600 and mode(default.path.parent) == 0o700

    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-deepseek-env-0123456789")
    assert main(["keys", "list", "--json"]) == 0
    out = capsys.readouterr().out
    assert KEY not in out and "sk-deepseek-env-0123456789" not in out
    rows = orjson.loads(out)["keys"]
    assert {"provider": "openai", "source": "store", "masked": "sk-...ghij", "error": None} in rows
    assert {
        "provider": "deepseek",
        "source": "env DEEPSEEK_API_KEY",
        "masked": "sk-...6789",
        "error": None,
    } in rows

    assert main(["keys", "delete", "openai"]) == 0
    assert main(["keys", "delete", "openai"]) == 1
    assert "no key of openai is stored" in capsys.readouterr().err


def test_keys_set_refuses_an_empty_key_and_a_bad_name(monkeypatch, capsys):
    feed_stdin(monkeypatch, "\n")
    assert main(["keys", "set", "openai"]) == 2
    assert "no key given" in capsys.readouterr().err
    feed_stdin(monkeypatch, KEY)
    assert main(["keys", "set", "../etc"]) == 2


def test_keys_list_reports_a_key_that_does_not_decrypt(monkeypatch, capsys):
    feed_stdin(monkeypatch, KEY)
    assert main(["keys", "set", "openai"]) == 0
    monkeypatch.setenv("SLUICE_MASTER_KEY", new_master_key())
    assert main(["keys", "list"]) == 1
    out = capsys.readouterr().out
    assert "ERROR" in out and "does not decrypt" in out and KEY not in out


def test_keys_set_prompts_without_echo_on_a_terminal(monkeypatch, capsys):
    prompts: list[str] = []

    def getpass(prompt: str) -> str:
        prompts.append(prompt)
        return KEY

    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr("sys.stdin", Tty(""))
    monkeypatch.setattr("getpass.getpass", getpass)
    assert main(["keys", "set", "anthropic"]) == 0
    assert prompts == ["API key for anthropic (not shown): "]
    assert revealed(KeyStore.default({}), "anthropic") == KEY


def test_new_master_key_prints_a_usable_key(capsys, tmp_path):
    assert main(["keys", "new-master-key"]) == 0
    master = capsys.readouterr().out.strip()
    store = KeyStore(tmp_path / "k", tmp_path / "m", {"SLUICE_MASTER_KEY": master})
    store.set("x", KEY)
    assert revealed(store, "x") == KEY
