"""Configuration: flags over CHD_* variables over the TOML file over defaults, checked at start-up."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DaemonProcess, chd_env, run_chd

from chd.core.settings import Settings
from chd.service.config import KEYS, ConfigError, load, render, to_settings


def _file(tmp_path, text: str) -> str:  # type: ignore[no-untyped-def]
    path = tmp_path / "chd.toml"
    path.write_text(text)
    return str(path)


class TestPrecedence:
    """The first source that sets a key wins: flag, then environment, then file, then default."""

    def test_each_source_wins_over_the_ones_below_it(self, tmp_path):
        """buffer_size from the flag, max_tokens from env, eviction_batch from the file, the rest defaults."""
        path = _file(tmp_path, "buffer_size = 7\nmax_tokens = 700\neviction_batch = 3\n")
        env = {"CHD_BUFFER_SIZE": "8", "CHD_MAX_TOKENS": "800"}
        cfg = load({"buffer_size": "9"}, env, path)
        assert (cfg.buffer_size, cfg.max_tokens, cfg.eviction_batch) == (9, 800, 3)
        assert cfg.sources["buffer_size"] == "flag --buffer-size"
        assert cfg.sources["max_tokens"] == "env CHD_MAX_TOKENS"
        assert cfg.sources["eviction_batch"] == f"file {path}"
        assert cfg.sources["summary_token_limit"] == "default"
        assert cfg.summary_token_limit == Settings().summary_token_limit

    def test_chd_config_prints_the_effective_configuration_with_sources(self, tmp_path):
        """`chd config` shows each value and where it came from, as TOML."""
        path = _file(tmp_path, "port = 6000\nbuffer_size = 7\n")
        env = chd_env() | {"CHD_PORT": "6001"}
        shown = _run_config(["--config", path, "--max-tokens", "900"], env)
        assert shown.returncode == 0, shown.stderr
        lines = shown.stdout.splitlines()
        assert "port                            = 6001  # env CHD_PORT" in lines
        assert f"buffer_size                     = 7  # file {path}" in lines
        assert "max_tokens                      = 900  # flag --max-tokens" in lines

    def test_the_config_file_can_come_from_chd_config(self, tmp_path):
        path = _file(tmp_path, "workers = 3\n")
        shown = _run_config([], chd_env() | {"CHD_CONFIG": path})
        assert "workers                         = 3  # file" in shown.stdout

    def test_the_effective_configuration_reaches_a_running_daemon(self, tmp_path):
        """A daemon started with a file and a flag uses both (buffer of 2 from the file evicts the first)."""
        path = _file(tmp_path, "buffer_size = 2\neviction_batch = 1\n")
        process = DaemonProcess("--config", path, "--summary-token-limit", "64")
        try:
            for n in (1, 2, 3):
                assert (
                    run_chd("query", f"Add utterance: u{n}", "--target", process.target).returncode
                    == 0
                )
            got = run_chd("query", "Get all utterances", "--target", process.target, "--json")
            assert '"text": "u1"' not in got.stdout and '"text": "u3"' in got.stdout
        finally:
            process.kill()


class TestSecrets:
    """Secrets never appear in `chd config` output."""

    def test_the_auth_token_is_masked(self):
        shown = _run_config(["--auth-token", "hunter2"], chd_env())
        assert shown.returncode == 0
        assert "hunter2" not in shown.stdout
        assert (
            'auth_token                      = "********"  # flag --auth-token'
            in shown.stdout.splitlines()
        )

    def test_every_secret_key_is_masked_by_render(self):
        secrets = {key.name: f"zq-secret-{key.name}" for key in KEYS if key.secret}
        assert secrets, "the auth token at least is a secret"
        text = render(
            load({"backend": "redis", **secrets}, {})
        )  # redis keys are refused with another backend
        for name, value in secrets.items():
            assert value not in text
            assert (
                f'{name:<31} = "********"  # flag {"--" + name.replace("_", "-")}'
                in text.splitlines()
            )


class TestRefusals:
    """Unknown keys and invalid values stop start-up with a message naming the key."""

    def test_an_unknown_key_in_the_file_is_refused_with_a_suggestion(self, tmp_path):
        with pytest.raises(ConfigError) as refused:
            load({}, {}, _file(tmp_path, "bufer_size = 3\n"))
        assert refused.value.key == "bufer_size"
        assert "did you mean buffer_size" in str(refused.value)

    def test_an_unknown_chd_variable_is_refused(self):
        with pytest.raises(ConfigError) as refused:
            load({}, {"CHD_MAX_TOKEN": "5"})
        assert "CHD_MAX_TOKEN" in str(refused.value) and "max_tokens" in str(refused.value)

    def test_client_variables_are_not_server_keys_but_are_allowed(self):
        cfg = load({}, {"CHD_TARGET": "x:1", "CHD_TLS_CA": "/nowhere"})
        assert cfg.port == 50051

    @pytest.mark.parametrize(
        ("source", "key"),
        [
            ({"flags": {"port": "70000"}}, "port"),
            ({"env": {"CHD_BUFFER_SIZE": "0"}}, "buffer_size"),
            ({"env": {"CHD_REQUEST_TIMEOUT": "nan"}}, "request_timeout"),
            ({"env": {"CHD_SUMMARIZATION_ENABLED": "maybe"}}, "summarization_enabled"),
            ({"file": 'max_tokens = "lots"\n'}, "max_tokens"),
            ({"file": 'log_format = "xml"\n'}, "log_format"),
            ({"file": "insecure = 1\n"}, "insecure"),
            (
                {"flags": {"buffer_size": "50", "max_utterances_per_conversation": "10"}},
                "max_utterances_per_conversation",
            ),
        ],
    )
    def test_an_invalid_value_is_refused_naming_its_key(self, tmp_path, source, key):
        path = _file(tmp_path, source["file"]) if "file" in source else None
        with pytest.raises(ConfigError) as refused:
            load(source.get("flags", {}), source.get("env", {}), path)
        assert refused.value.key == key
        assert repr(key) in str(refused.value)

    def test_a_file_that_is_not_toml_is_refused(self, tmp_path):
        with pytest.raises(ConfigError, match="not valid TOML"):
            load({}, {}, _file(tmp_path, "port = = 3\n"))

    def test_an_invalid_chd_durability_is_a_config_error_of_serve_not_of_every_command(
        self, monkeypatch
    ):
        monkeypatch.setenv("CHD_DURABILITY", "bogus")
        refused = run_chd("serve", "--port", "0")
        assert refused.returncode == 2
        assert "'durability'" in refused.stderr and "listening" not in refused.stdout
        # A client command does not read CHD_DURABILITY at all.
        offline = run_chd("purpose", "--target", "127.0.0.1:1", "--timeout", "0.5")
        assert (
            "CHD_DURABILITY" not in offline.stderr and offline.returncode == 64 + 14
        )  # UNAVAILABLE
        # The transfer tools take the key from the same table and refuse it the same way.
        export = run_chd("export", "--data-dir", "/nonexistent-chd-dir")
        assert export.returncode == 2
        assert (
            export.stderr == "chd: configuration key 'durability' (env CHD_DURABILITY): "
            "must be one of normal, full, got 'bogus'\n"
        )

    def test_chd_serve_with_an_invalid_value_exits_2_before_listening(self):
        refused = run_chd("serve", "--port", "0", "--max-tokens", "-1")
        assert refused.returncode == 2
        assert "'max_tokens'" in refused.stderr
        assert "listening" not in refused.stdout


class TestKeysTable:
    """The key table is the single place a setting is declared."""

    def test_every_settings_field_is_a_key_and_maps_onto_settings(self):
        names = {key.name for key in KEYS}
        assert set(Settings.__dataclass_fields__) <= names
        settings = to_settings(load({"buffer_size": "11", "summarization_enabled": False}, {}))
        assert (settings.buffer_size, settings.summarization_enabled) == (11, False)

    def test_every_key_has_a_flag_and_a_variable_named_after_it(self):
        for key in KEYS:
            assert key.flag == "--" + key.name.replace("_", "-")
            assert key.env == "CHD_" + key.name.upper()


def _run_config(args: list[str], env: dict[str, str]):  # type: ignore[no-untyped-def]
    return run_chd("config", *args, env=env)


def test_operations_doc_lists_every_key_as_the_table_says():
    """docs/operations.md carries config.key_table() verbatim, so a new key cannot go undocumented."""
    from pathlib import Path

    from chd.service.config import KEYS, key_table

    doc = (Path(__file__).resolve().parent.parent / "docs" / "operations.md").read_text()
    assert key_table() in doc
    assert all(f"`{key.name}`" in key_table() for key in KEYS)


def _systemd_unit() -> str:
    from conftest import ROOT

    doc = (ROOT / "docs" / "operations.md").read_text()
    start = doc.index("```ini\n[Unit]") + len("```ini\n")
    return doc[start : doc.index("```", start)]


def test_the_systemd_unit_in_the_operations_doc_is_valid_as_written(tmp_path):
    """Sections, Key=Value lines and whole-line comments only: systemd reads `# ...` after a value as part of it."""
    unit = _systemd_unit()
    assert "ExecStart=" in unit and "EnvironmentFile=" in unit
    for line in unit.splitlines():
        if not line.strip() or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            assert line in ("[Unit]", "[Service]", "[Install]"), line
            continue
        key, _, value = line.partition("=")
        assert key.isalnum() and value.strip(), line
        assert " #" not in value and " ;" not in value and "\t#" not in value, (
            f"inline comment: {line}"
        )
    analyze = shutil.which("systemd-analyze")
    if analyze is not None:
        # With ExecStart pointing at a real chd, the unit must pass systemd's own check.
        chd = shutil.which("chd", path=str(Path(sys.executable).parent)) or "/bin/true"
        written = tmp_path / "chd.service"
        written.write_text(unit.replace("/opt/chd/.venv/bin/chd", chd))
        checked = subprocess.run(
            [analyze, "verify", "--man=no", str(written)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert checked.returncode == 0, checked.stderr


class TestRedisTimeout:
    """redis_timeout: three tries must fit in request_timeout; unset, it fits itself (issue 24)."""

    REDIS = {"backend": "redis", "redis_url": "redis://127.0.0.1:1/0"}

    def test_unset_it_is_two_seconds_or_less_so_that_a_short_request_timeout_still_starts(
        self,
    ) -> None:
        from chd.service.config import backend_options

        assert backend_options(load(self.REDIS, {}))["redis_timeout"] == 2.0
        short = backend_options(load({**self.REDIS, "request_timeout": "4"}, {}))["redis_timeout"]
        assert 3 * short + 1 <= 4
        assert (
            backend_options(load({**self.REDIS, "request_timeout": "1"}, {}))["redis_timeout"]
            == 0.05
        )

    def test_a_value_set_that_does_not_fit_is_refused_with_advice_that_can_be_followed(
        self,
    ) -> None:
        with pytest.raises(ConfigError) as refused:
            load({**self.REDIS, "request_timeout": "5", "redis_timeout": "2"}, {})
        assert "redis_timeout" in str(refused.value) and "at most 1.33" in str(refused.value)
        with pytest.raises(ConfigError) as refused:
            load({**self.REDIS, "request_timeout": "1", "redis_timeout": "1"}, {})
        assert "lower" not in str(refused.value) and "raise request_timeout to at least 4" in str(
            refused.value
        )
        with pytest.raises(ConfigError, match="at least 0.05"):
            load({**self.REDIS, "redis_timeout": "0"}, {})

    @pytest.mark.parametrize("url", ["", "   "])
    def test_an_empty_redis_url_is_refused_by_chd_config_as_by_chd_serve(self, url: str) -> None:
        with pytest.raises(ConfigError, match="needs a server"):
            load({"backend": "redis", "redis_url": url}, {})


class TestNewcomer32Refusals:
    """What a newcomer typed wrong is named by the command it was typed to (newcomer pass 32)."""

    @pytest.mark.parametrize(
        ("argv", "usage", "hint"),
        [
            (["serve", "--buffersize", "5"], "usage: chd serve ", "did you mean --buffer-size?"),
            (["query", "hi", "--tagret", "x"], "usage: chd query ", "did you mean --target?"),
            (["config", "--bogus"], "usage: chd config ", None),
            # The shared "--" made it "--tls-key" (newcomer recheck N2).
            (["config", "--bogus-key", "1"], "usage: chd config ", None),
            # An abbreviation is no flag: "--buffer" started a daemon with buffer_size 5 (N3).
            (["serve", "--buffer", "5"], "usage: chd serve ", "did you mean --buffer-size?"),
        ],
    )
    def test_an_unknown_flag_after_a_command_is_that_commands_error(
        self, capsys, argv, usage, hint
    ) -> None:
        from chd.cli.main import main

        with pytest.raises(SystemExit) as exited:
            main(argv)
        err = capsys.readouterr().err
        assert exited.value.code == 2
        flag = next(a for a in argv if a.startswith("--"))
        assert err.startswith(usage) and f"error: unrecognized arguments: {flag}" in err
        assert (hint in err) if hint else ("did you mean" not in err)

    def test_a_far_key_gets_no_suggestion_and_a_near_one_does(self, tmp_path) -> None:
        """bogus_key is not tls_key (#20); bufer_size is buffer_size, in a file or a variable."""
        with pytest.raises(ConfigError) as refused:
            load({}, {}, _file(tmp_path, "bogus_key = 1\n"))
        assert "did you mean" not in str(refused.value)
        with pytest.raises(ConfigError, match="did you mean buffer_size"):
            load({}, {"CHD_BUFER_SIZE": "3"})

    def test_the_backends_needing_a_key_say_so_alike(self) -> None:
        """Both name the flag and the variable, and call the key missing (#6)."""
        for backend, key, variable in (
            ("disk", "data_dir", "CHD_DATA_DIR"),
            ("redis", "redis_url", "CHD_REDIS_URL"),
        ):
            with pytest.raises(ConfigError) as refused:
                load({"backend": backend}, {})
            text = str(refused.value)
            assert text.startswith(
                f"configuration key '{key}' (missing): the {backend} backend needs"
            )
            assert f"(or {variable})" in text

    @pytest.mark.parametrize("backend", ["memory", "redis"])
    def test_durability_with_a_backend_that_ignores_it_is_refused(self, backend) -> None:
        """As a redis key is with the disk backend (#23); disk and module:Class take it."""
        flags = {"backend": backend, "durability": "full"}
        if backend == "redis":
            flags["redis_url"] = "redis://127.0.0.1:46379/0"
        with pytest.raises(ConfigError, match="only the disk backend uses it"):
            load(flags, {})
        assert (
            load({"backend": "disk", "data_dir": "d", "durability": "full"}, {}).durability
            == "full"
        )
