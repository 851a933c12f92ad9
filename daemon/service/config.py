"""The daemon's configuration: flags, then ``CHD_*`` variables, then a TOML file.

Every key is one row of ``KEYS`` (name, kind, default, help); its flag
(``--buffer-size``) and variable (``CHD_BUFFER_SIZE``) follow from the name,
so adding a key is adding a row. The first source that sets a key wins:
command-line flag, then environment, then the file named by ``--config`` or
``CHD_CONFIG``, then the default. Unknown keys in the file, ``CHD_*``
variables that look like a misspelt key, and invalid values stop start-up
with a message naming the key and where its value came from.

Kubernetes gives every pod variables for each Service in its namespace: a
Service named ``chd`` brings ``CHD_SERVICE_HOST``, ``CHD_PORT=tcp://...``,
``CHD_PORT_50051_TCP_ADDR`` and more. Those (any name of that shape, or a
``tcp://`` value, even in a variable a key owns) are service links: ignored,
never read as a port, and listed in ``Config.ignored`` for the daemon to log.
Other ``CHD_*`` variables unlike any key are ignored the same way.

``daemon.settings.Settings`` stays the core's view: ``to_settings`` fills it
from the keys whose names are its fields.
"""

from __future__ import annotations

import argparse
import difflib
import ipaddress
import math
import re
import tomllib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from chd.backends import ALIASES, backend_factory
from chd.core.errors import DaemonError
from chd.core.memory.embedder import embedder_class
from chd.core.settings import Settings
from chd.core.summaries.summarizer import DEFAULT_CLAUDE_MODEL, SUMMARIZER_CHOICES

__all__ = [
    "Key",
    "KEYS",
    "Config",
    "ConfigError",
    "CLIENT_ENV",
    "OTHER_ENV",
    "add_arguments",
    "backend_options",
    "load",
    "load_keys",
    "from_arguments",
    "render",
    "to_settings",
    "is_loopback",
]

_DEFAULTS = Settings()
ENV_PREFIX = "CHD_"
CONFIG_ENV = "CHD_CONFIG"
# Variables read by ``chd query`` and friends, not by the server: allowed in
# the environment of ``chd serve`` without being configuration keys.
CLIENT_ENV = frozenset(
    {"CHD_TARGET", "CHD_TLS_CA", "CHD_TLS_SERVER_NAME", "CHD_CLIENT_TLS_CERT", "CHD_CLIENT_TLS_KEY"}
)
# Names Kubernetes gives a Service's link variables (docs: "Environment
# variables" of Services): <NAME>_SERVICE_HOST, <NAME>_SERVICE_PORT[_<port
# name>], <NAME>_PORT and <NAME>_PORT_<n>_<PROTO>[_PROTO|_PORT|_ADDR].
_SERVICE_LINK_NAME = re.compile(
    r"CHD_(?:[A-Z0-9_]+_)?(?:SERVICE_HOST|SERVICE_PORT(?:_[A-Z0-9_]+)?|PORT_[0-9]+_(?:TCP|UDP|SCTP)(?:_PROTO|_PORT|_ADDR)?)"
)
# The value of <NAME>_PORT: tcp://10.0.0.5:50051, never a port number.
_SERVICE_LINK_VALUE = re.compile(r"(?:tcp|udp|sctp)://", re.IGNORECASE)
# Variables of serve flags declared outside this table: none today; a new
# flag's variable goes here until it becomes a row of KEYS.
OTHER_ENV: frozenset[str] = frozenset()


class ConfigError(ValueError):
    """A configuration key is unknown or has an invalid value."""

    def __init__(self, key: str, source: str, problem: str) -> None:
        super().__init__(f"configuration key {key!r} ({source}): {problem}")
        self.key = key


# --- kinds of value ------------------------------------------------------------


@dataclass(frozen=True)
class Integer:
    """A whole number in [minimum, maximum]."""

    minimum: int = 1
    maximum: int = 2**31 - 1

    def from_text(self, text: str) -> int:
        try:
            return self.check(int(text.strip()))
        except ValueError as exc:
            if "invalid literal" in str(exc):
                raise ValueError(f"must be a whole number, got {text!r}") from None
            raise

    def check(self, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"must be a whole number, got {value!r}")
        if not self.minimum <= value <= self.maximum:
            raise ValueError(f"must be between {self.minimum} and {self.maximum}, got {value}")
        return value


@dataclass(frozen=True)
class Seconds:
    """A positive, finite number of seconds."""

    def from_text(self, text: str) -> float:
        try:
            number = float(text.strip())
        except ValueError:
            raise ValueError(f"must be a number of seconds, got {text!r}") from None
        return self.check(number)

    def check(self, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"must be a number of seconds, got {value!r}")
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"must be a finite number of seconds, at least 0, got {value!r}")
        return float(value)


@dataclass(frozen=True)
class Boolean:
    """true/false (also 1/0, yes/no, on/off in text)."""

    def from_text(self, text: str) -> bool:
        lowered = text.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"must be true or false, got {text!r}")

    def check(self, value: Any) -> bool:
        if not isinstance(value, bool):
            raise ValueError(f"must be true or false, got {value!r}")
        return value


# A bearer token: visible ASCII, all gRPC metadata and an HTTP header carry
# (the client's chd.client.channel.token_problem has the same rule). `chd
# serve --auth-token café` started, and no client could send the token;
# a byte that is not UTF-8 was a traceback (outside review of issue 28).
_TOKEN = re.compile(r"[!-~]+")


@dataclass(frozen=True)
class Text:
    """A string; with ``choices``, one of them (case-insensitive, kept lower case).

    Always text (UTF-8, no control characters); with ``token``, visible ASCII.
    Problems never quote the value (it may be a secret).
    """

    choices: tuple[str, ...] = ()
    token: bool = False

    def from_text(self, text: str) -> str:
        return self.check(text)

    def check_problem(self, value: str) -> str | None:
        """Why ``value`` is refused (None: it is not), for a flag that is not a key (``chd mcp --target``)."""
        try:
            self.check(value)
        except ValueError as exc:
            return str(exc)
        return None

    def check(self, value: Any) -> str:
        if not isinstance(value, str):
            raise ValueError(f"must be a string, got {value!r}")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(
                "holds bytes that are not UTF-8 (or a lone surrogate); give it as text"
            ) from None
        if self.token and value.strip() and not _TOKEN.fullmatch(value):
            bad = next(c for c in value if not _TOKEN.fullmatch(c))
            raise ValueError(
                f"holds U+{ord(bad):04X}; a token must be visible ASCII characters "
                "(! to ~, no spaces or accents), all a gRPC or HTTP client can send"
            )
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
            raise ValueError("holds a control character (a newline, say)")
        if self.choices:
            value = value.strip().lower()
            if value not in self.choices:
                raise ValueError(f"must be one of {', '.join(self.choices)}, got {value!r}")
        return value


@dataclass(frozen=True)
class FilePath:
    """A path to a readable file."""

    def from_text(self, text: str) -> str:
        return self.check(text)

    def check(self, value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise ValueError(f"must be a file path, got {value!r}")
        path = Path(value).expanduser()
        if path.is_dir():
            raise ValueError(f"{value} is a directory; give the path of a file in it")
        if not path.is_file():
            raise ValueError(f"no such file: {value}")
        try:
            path.read_bytes()
        except OSError as exc:
            raise ValueError(f"cannot read {value}: {exc.strerror}") from None
        return str(path)


Kind = Integer | Seconds | Boolean | Text | FilePath


@dataclass(frozen=True)
class Key:
    """One configuration key. ``default=None`` means unset (the feature is off)."""

    name: str
    kind: Kind
    default: Any
    help: str
    secret: bool = False

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


_PORT = Integer(0, 65535)

KEYS: tuple[Key, ...] = (
    # --- listening
    Key(
        "host",
        Text(),
        "127.0.0.1",
        "address to listen on; anything but loopback needs auth_token or insecure",
    ),
    Key("port", _PORT, 50051, "port to listen on; 0 picks a free one (printed at start)"),
    Key("workers", Integer(1, 1024), 16, "threads answering calls"),
    Key(
        "processes",
        Integer(1, 64),
        1,
        "serving processes on the one port (disk and redis backends): each its own gRPC server, "
        "sharing the port only with each other (docs/operations.md)",
    ),
    # --- the core (daemon.settings.Settings fields, same names)
    # --- storage (docs/backends.md)
    Key(
        "backend",
        Text(),
        "memory",
        "memory, disk (alias durable), redis, or module:Class for a custom backend",
    ),
    Key("data_dir", Text(), None, "directory of the disk backend, created if missing"),
    Key(
        "durability",
        Text(("normal", "full")),
        None,
        "disk backend: normal survives a crash of chd, full also an OS crash or power loss; unset: normal",
    ),
    Key(
        "allow_empty_database",
        Boolean(),
        False,
        "disk backend: start although the data dir held data and its cache.db is now missing or empty, "
        "with no conversations (once, after losing the database on purpose)",
    ),
    # The URL may hold a password, so it is shown masked like one.
    Key(
        "redis_url",
        Text(),
        None,
        "redis backend: redis://[:PASSWORD@]HOST:PORT/DB, or rediss:// for TLS",
        secret=True,
    ),
    Key(
        "redis_password",
        Text(),
        None,
        "redis backend: password, when the URL has none",
        secret=True,
    ),
    Key(
        "redis_tls_ca",
        FilePath(),
        None,
        "redis backend: PEM CA bundle that signed the Redis server's certificate, for rediss:// "
        "(unset: the system's CAs)",
    ),
    Key(
        "redis_cluster",
        Boolean(),
        None,
        "redis backend: true for Redis Cluster (unset: asked of the server at start)",
    ),
    Key(
        "conversation_ttl",
        Seconds(),
        None,
        "redis backend: seconds without a write after which a conversation expires, every key of it "
        "together; unset: kept until removed",
    ),
    Key(
        "redis_timeout",
        Seconds(),
        None,
        "redis backend: seconds Redis may take to answer a command before it is sent again (three "
        "tries in all): a hung Redis fails a call with UNAVAILABLE after about 3x this; unset: 2, "
        "or less where three tries would not fit in request_timeout",
    ),
    Key(
        "fold_lease",
        Seconds(),
        30.0,
        "redis backend: seconds a replica's lease on a conversation's fold lasts (a replica that dies "
        "mid-fold holds up the others this long at most)",
    ),
    # --- the rolling buffer and summary
    Key("buffer_size", Integer(), _DEFAULTS.buffer_size, "utterances kept per conversation buffer"),
    Key("max_tokens", Integer(), _DEFAULTS.max_tokens, "tokens kept per conversation buffer"),
    Key(
        "summary_token_limit",
        Integer(),
        _DEFAULTS.summary_token_limit,
        "token budget of each running summary",
    ),
    Key(
        "max_utterance_chars",
        Integer(),
        _DEFAULTS.max_utterance_chars,
        "longest utterance accepted, in characters",
    ),
    Key(
        "eviction_batch",
        Integer(),
        _DEFAULTS.eviction_batch,
        "utterances evicted together once a buffer overflows",
    ),
    Key(
        "summarization_enabled",
        Boolean(),
        _DEFAULTS.summarization_enabled,
        "fold evicted utterances into a summary",
    ),
    Key(
        "eviction_policy",
        Text(("fifo", "importance")),
        _DEFAULTS.eviction_policy,
        "which utterances leave a full buffer first; importance: important ones last",
    ),
    Key(
        "query_classifier",
        Boolean(),
        _DEFAULTS.query_classifier,
        "let Claude classify queries the rules are unsure of (needs ANTHROPIC_API_KEY)",
    ),
    Key("classifier_model", Text(), "claude-haiku-4-5", "model of the query classifier"),
    # --- summarization (docs/summarization.md)
    Key(
        "summarizer",
        Text(SUMMARIZER_CHOICES),
        "auto",
        "auto: Claude when ANTHROPIC_API_KEY is set, else offline; claude; offline",
    ),
    Key(
        "summarizer_process",
        Boolean(),
        True,
        "run the offline summarizer in a child process, so folds never compete with requests "
        "for the interpreter (false: one process, about 60 MB less)",
    ),
    Key("anthropic_model", Text(), DEFAULT_CLAUDE_MODEL, "Claude model of the summarizer"),
    Key("anthropic_max_tokens", Integer(1, 64_000), 1024, "max_tokens of each Claude reply"),
    Key("anthropic_max_retries", Integer(0, 10), 2, "the anthropic SDK's own retries per call"),
    Key("summarizer_timeout", Seconds(), 30.0, "seconds per Claude HTTP attempt"),
    Key("summarizer_attempts", Integer(1, 100), 3, "tries per batch before the offline fallback"),
    Key("summarizer_backoff", Seconds(), 1.0, "seconds before the second try, doubled after each"),
    Key(
        "summarizer_wait",
        Seconds(),
        10.0,
        "seconds a fold waits for Claude before folding offline; a later reply replaces the offline text",
    ),
    Key(
        "summary_segments",
        Integer(1, 64),
        _DEFAULTS.summary_segments,
        "segments (each with its provenance) the summary is split into at most",
    ),
    Key(
        "fold_delay",
        Seconds(),
        _DEFAULTS.fold_delay,
        "seconds a conversation's evictions gather before one background fold takes them all "
        "(fewer summarizer calls; 0: fold at once)",
    ),
    Key(
        "archive_evicted",
        Boolean(),
        _DEFAULTS.archive_evicted,
        "keep folded utterances in the backend, searchable and exportable",
    ),
    Key(
        "embedder",
        Text(),
        None,
        "hybrid topic search: wordllama (pip install wordllama) or module:Class, an Embedder "
        "built with no arguments (docs/search.md); unset: lexical ranking only",
    ),
    # --- limits (daemon.limits)
    Key(
        "max_request_bytes",
        Integer(1024, 2**31 - 1),
        4 * 1024 * 1024,
        "largest request message accepted, in bytes",
    ),
    Key("max_conversations", Integer(), 100_000, "conversations one daemon holds"),
    Key(
        "max_utterances_per_conversation",
        Integer(),
        10_000,
        "utterances one conversation keeps in storage (buffer plus those awaiting summary)",
    ),
    Key(
        "max_archived_utterances",
        Integer(),
        10_000,
        "folded utterances one conversation's archive keeps (archive_evicted); the oldest are dropped past it",
    ),
    Key(
        "request_timeout",
        Seconds(),
        30.0,
        "longest a call may wait for a worker when its caller set no shorter deadline",
    ),
    Key(
        "max_concurrent_rpcs", Integer(1, 100_000), 256, "calls accepted at once; more are refused"
    ),
    Key(
        "max_memory_bytes",
        Integer(1024, 2**62),
        1024**3,
        "memory backend: bytes the process's utterances may take, each counted as its UTF-8 text and conversation id plus 400, each conversation as its id plus 500; "
        "stores beyond it are refused with RESOURCE_EXHAUSTED",
    ),
    Key(
        "shutdown_grace",
        Seconds(),
        10.0,
        "seconds in-flight calls get to finish at shutdown, after the drain; then the process exits regardless",
    ),
    Key(
        "shutdown_drain",
        Seconds(),
        0.0,
        "seconds health says NOT_SERVING, still answering, before the server stops (for load balancers)",
    ),
    # --- security
    Key(
        "auth_token",
        Text(token=True),
        None,
        "bearer token every RPC but health must carry",
        secret=True,
    ),
    Key("tls_cert", FilePath(), None, "PEM certificate chain; with tls_key, serve TLS"),
    # A path, not the key itself: shown so an operator can check it.
    Key("tls_key", FilePath(), None, "PEM private key of tls_cert"),
    Key(
        "tls_client_ca",
        FilePath(),
        None,
        "PEM CA bundle; when set, clients must present a certificate it signed",
    ),
    Key(
        "insecure",
        Boolean(),
        False,
        "allow a non-loopback host without a token or client certificates",
    ),
    # --- observability
    Key(
        "log_level",
        Text(("debug", "info", "warning", "error")),
        "info",
        "log level; debug adds query text to the turn trace",
    ),
    Key(
        "log_format",
        Text(("auto", "json", "text")),
        "auto",
        "json: one JSON object per line (for log pipelines); text: one short line a record; "
        "auto: text when stderr is a terminal, else json",
    ),
    Key(
        "metrics_port",
        _PORT,
        None,
        "serve Prometheus metrics on this port (0 picks one); unset: off",
    ),
    Key("metrics_host", Text(), "127.0.0.1", "address of the metrics endpoint"),
)

_BY_NAME = {key.name: key for key in KEYS}

# Backends whose state lives outside the daemon's process, so several
# serving processes see one store (``processes``).
GROUP_BACKENDS = ("disk", "redis")


@dataclass(frozen=True)
class Config:
    """The effective configuration: a value and its source for every key."""

    values: Mapping[str, Any]
    sources: Mapping[str, str]
    # Environment variables left alone, each with why (service links...).
    ignored: tuple[str, ...] = field(default=())

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None


# --- sources -------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser, skip: Collection[str] = ()) -> None:
    """A flag for every key but those named in ``skip``, plus ``--config``; unset flags stay out of the namespace."""
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=argparse.SUPPRESS,
        help=f"TOML file of keys ({CONFIG_ENV})",
    )
    for key in KEYS:
        if key.name in skip:
            continue
        # argparse formats help with %: a literal one must be doubled.
        text = f"{key.help} ({key.env}; default {shown_default(key)})".replace("%", "%%")
        if isinstance(key.kind, Boolean):
            parser.add_argument(
                key.flag,
                action=argparse.BooleanOptionalAction,
                default=argparse.SUPPRESS,
                help=text,
            )
        else:
            parser.add_argument(
                key.flag, metavar=_metavar(key.kind), default=argparse.SUPPRESS, help=text
            )


def _metavar(kind: Kind) -> str:
    if isinstance(kind, Text):
        return "{" + ",".join(kind.choices) + "}" if kind.choices else "TEXT"
    return {Integer: "N", Seconds: "SECONDS", FilePath: "FILE"}[type(kind)]


def from_arguments(args: argparse.Namespace, env: Mapping[str, str]) -> Config:
    """The configuration for a namespace filled by ``add_arguments``."""
    flags = {key.name: getattr(args, key.name) for key in KEYS if hasattr(args, key.name)}
    config_file = getattr(args, "config", None) or env.get(CONFIG_ENV) or None
    return load(flags, env, config_file)


def load(
    flags: Mapping[str, Any], env: Mapping[str, str], config_file: str | None = None
) -> Config:
    """Merge the sources (flags > env > file > defaults), check every value, or raise ConfigError."""
    ignored: list[str] = []
    layers: list[tuple[str, dict[str, tuple[str, Any]]]] = [
        ("flag", {name: (f"flag {_BY_NAME[name].flag}", value) for name, value in flags.items()}),
        ("env", _from_env(env, ignored)),
    ]
    if config_file:
        layers.append(("file", _from_file(config_file)))
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for key in KEYS:
        for _, layer in layers:
            if key.name in layer:
                source, raw = layer[key.name]
                values[key.name] = _parse(key, source, raw)
                sources[key.name] = source
                break
        else:
            values[key.name] = key.default
            sources[key.name] = "default"
    config = Config(values, sources, tuple(ignored))
    _check_together(config)
    return config


def load_keys(
    names: tuple[str, ...],
    flags: Mapping[str, Any],
    env: Mapping[str, str],
    defaults: Mapping[str, Any] | None = None,
) -> Config:
    """Only the keys ``names``, from flags > their own variables > ``defaults`` (else the table's).

    For commands that share a few keys with ``chd serve`` (``chd export``
    and ``chd import`` take the storage keys): the values are parsed and
    checked as ``load`` does, and no other variable is looked at.
    """
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name in names:
        key = _BY_NAME[name]
        if name in flags:
            sources[name], raw = f"flag {key.flag}", flags[name]
        elif env.get(key.env):
            sources[name], raw = f"env {key.env}", env[key.env]
        else:
            values[name] = (defaults or {}).get(name, key.default)
            sources[name] = "default"
            continue
        values[name] = _parse(key, sources[name], raw)
    return Config(values, sources)


def _from_env(
    env: Mapping[str, str], ignored: list[str] | None = None
) -> dict[str, tuple[str, Any]]:
    """The keys set by ``CHD_*`` variables; what is left alone goes to ``ignored``, saying why."""
    by_env = {key.env: key for key in KEYS}
    found: dict[str, tuple[str, Any]] = {}
    skipped = ignored if ignored is not None else []
    for variable, raw in sorted(env.items()):
        if (
            not variable.startswith(ENV_PREFIX)
            or variable in CLIENT_ENV | OTHER_ENV
            or variable == CONFIG_ENV
        ):
            continue
        key = by_env.get(variable)
        if _SERVICE_LINK_VALUE.match(raw.strip()) or (
            key is None and _SERVICE_LINK_NAME.fullmatch(variable)
        ):
            what = (
                f"set {key.name} with {key.flag} or in the config file"
                if key is not None
                else "not a chd key"
            )
            skipped.append(f"{variable}: a Kubernetes service link, not configuration ({what})")
            continue
        if key is None:
            name = variable[len(ENV_PREFIX) :].lower()
            if _close_keys(name):  # a misspelt key must not pass unnoticed
                raise ConfigError(variable, f"environment variable {variable}", _unknown(name))
            skipped.append(f"{variable}: not a chd key")
            continue
        if raw == "" and key.default is None:
            continue  # an empty variable leaves an optional key unset
        found[key.name] = (f"env {variable}", raw)
    return found


def _from_file(path: str) -> dict[str, tuple[str, Any]]:
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(
            "config", f"flag --config / {CONFIG_ENV}", f"cannot read {path}: {exc.strerror}"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("config", f"file {path}", f"not valid TOML: {exc}") from None
    found: dict[str, tuple[str, Any]] = {}
    for name, value in document.items():
        if name not in _BY_NAME:
            raise ConfigError(name, f"file {path}", _unknown(name))
        found[name] = (f"file {path}", value)
    return found


# How alike a misspelt name and a real one must be (difflib's ratio) to be
# suggested: bufer_size, data_directory, tls_certificate are; bogus_key
# (tls_key, 0.62) and token (max_tokens, 0.67) are not, being alike only in
# a common part. One threshold for keys in the file, CHD_* variables and flags.
CLOSE = 0.68


def close_names(name: str, names: Iterable[str]) -> list[str]:
    """The (at most two) names close enough to ``name`` to be what was meant."""
    return difflib.get_close_matches(name, list(names), n=2, cutoff=CLOSE)


def _close_keys(name: str) -> list[str]:
    return close_names(name, _BY_NAME)


def _unknown(name: str) -> str:
    close = _close_keys(name)
    hint = (
        f"; did you mean {' or '.join(close)}?" if close else "; `chd config --help` lists the keys"
    )
    return f"no such key{hint}"


def _parse(key: Key, source: str, raw: Any) -> Any:
    try:
        if isinstance(raw, str) and not source.startswith("file"):
            return key.kind.from_text(raw)
        return key.kind.check(raw)
    except ValueError as exc:
        raise ConfigError(key.name, source, str(exc)) from None


def is_loopback(host: str) -> bool:
    """True when ``host`` only accepts connections from this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a hostname or "" (every interface): assume reachable


def _check_together(config: Config) -> None:
    """Rules about several keys at once; each error names the key to change."""
    v, src = config.values, config.sources
    if (v["tls_cert"] is None) != (v["tls_key"] is None):
        missing = "tls_key" if v["tls_key"] is None else "tls_cert"
        raise ConfigError(missing, "missing", "tls_cert and tls_key must be given together")
    if v["tls_client_ca"] is not None and v["tls_cert"] is None:
        raise ConfigError(
            "tls_client_ca",
            src["tls_client_ca"],
            "verifying client certificates needs tls_cert and tls_key",
        )
    if v["tls_cert"] is not None:
        from chd.service.tls import check_server_files

        refused = check_server_files(v["tls_cert"], v["tls_key"], v["tls_client_ca"])
        if refused is not None:
            raise ConfigError(refused[0], src[refused[0]], refused[1])
    if v["auth_token"] is not None and not v["auth_token"].strip():
        raise ConfigError("auth_token", src["auth_token"], "must not be empty")
    if v["max_utterances_per_conversation"] < v["buffer_size"]:
        raise ConfigError(
            "max_utterances_per_conversation",
            src["max_utterances_per_conversation"],
            f"must be at least buffer_size ({v['buffer_size']}), got {v['max_utterances_per_conversation']}",
        )
    authenticated = v["auth_token"] is not None or v["tls_client_ca"] is not None
    if not is_loopback(v["host"]) and not authenticated and not v["insecure"]:
        raise ConfigError(
            "host",
            src["host"],
            f"{v['host']!r} is reachable from other machines; set auth_token (or tls_client_ca) "
            "or pass --insecure to serve it unauthenticated",
        )
    _check_storage(config)
    if v["embedder"] is not None:
        try:
            embedder_class(v["embedder"])
        except ValueError as exc:
            raise ConfigError("embedder", src["embedder"], str(exc)) from None
    if v["processes"] > 1 and ALIASES.get(v["backend"], v["backend"]) not in GROUP_BACKENDS:
        raise ConfigError(
            "processes",
            src["processes"],
            f"{v['processes']} serving processes need a backend they share (disk or redis); "
            + (
                "the memory backend's state lives in one process"
                if v["backend"] == "memory"
                else f"{v['backend']} is not one chd knows to be shared"
            ),
        )
    try:
        to_settings(config)
    except ValueError as exc:
        name = str(exc).split(" ", 1)[0]
        raise ConfigError(name, src.get(name, "default"), str(exc)) from None


def _check_storage(config: Config) -> None:
    """The backend can be built as configured (what opening it would refuse, short of touching storage).

    Loads a ``module:Class`` backend's module, so ``chd config`` refuses what
    ``chd serve`` would.
    """
    v, src = config.values, config.sources
    name = ALIASES.get(v["backend"], v["backend"])
    try:
        backend_factory(name)
    except DaemonError as exc:
        raise ConfigError("backend", src["backend"], str(exc)) from None
    if name == "disk" and v["data_dir"] is None:
        raise ConfigError(
            "data_dir",
            "missing",
            "the disk backend needs a directory: --data-dir DIR (or CHD_DATA_DIR)",
        )
    if name == "redis":
        _check_redis(config)
    else:
        # As with data_dir below: a Redis URL that a disk daemon silently ignores
        # would let a user believe replicas share its conversations (issue 28).
        for key in KEYS:
            if key.help.startswith("redis backend:") and src[key.name] != "default":
                raise ConfigError(
                    key.name,
                    src[key.name],
                    f"only the redis backend uses it, and the backend is {name}",
                )
    if name != "disk" and v["allow_empty_database"]:
        raise ConfigError(
            "allow_empty_database",
            src["allow_empty_database"],
            f"only the disk backend has a database; backend is {name}",
        )
    if name in ("memory", "redis") and src["durability"] != "default":
        # Like a Redis key with the disk backend: `--backend redis --durability
        # full` must not look like fsync per commit (Redis's appendfsync
        # decides that). A module:Class backend is passed it, so may use it.
        what = (
            "Redis's own persistence (appendfsync) decides what survives"
            if name == "redis"
            else "nothing is kept on disk"
        )
        raise ConfigError(
            "durability",
            src["durability"],
            f"only the disk backend uses it, and the backend is {name}: {what}",
        )
    if name == "memory" and v["data_dir"] is not None:
        # Accepting it silently would let a user believe their data is on disk.
        raise ConfigError(
            "data_dir",
            src["data_dir"],
            "the memory backend keeps nothing on disk; use --backend disk with --data-dir",
        )


# The shortest redis_timeout: below it loopback round trips under load time out.
_MIN_REDIS_TIMEOUT = 0.05


def _check_redis(config: Config) -> None:
    v, src = config.values, config.sources
    if not (v["redis_url"] or "").strip():
        raise ConfigError(
            "redis_url",
            "missing" if src.get("redis_url", "default") == "default" else src["redis_url"],
            "the redis backend needs a server: --redis-url redis://HOST:PORT/DB (or CHD_REDIS_URL)",
        )
    timeout = v["redis_timeout"]
    if timeout is None:
        return  # redis_timeout_of fits it to request_timeout
    if timeout < _MIN_REDIS_TIMEOUT:
        raise ConfigError(
            "redis_timeout",
            src["redis_timeout"],
            f"must be at least {_MIN_REDIS_TIMEOUT:g} seconds, got {timeout:g}",
        )
    # Three tries of a command must end before request_timeout does, so a
    # call to a hung Redis is answered UNAVAILABLE, not left to its deadline.
    request_timeout = v["request_timeout"]
    if 3 * timeout + 1 > request_timeout:
        most = (request_timeout - 1) / 3
        lower = (
            f"lower redis_timeout to at most {most:.3g} or " if most >= _MIN_REDIS_TIMEOUT else ""
        )
        raise ConfigError(
            "redis_timeout",
            src["redis_timeout"],
            f"three tries of {timeout:g}s plus 1s of backoff must fit in request_timeout ({request_timeout:g}s): "
            f"{lower}raise request_timeout to at least {3 * timeout + 1:g}",
        )


def redis_timeout_of(values: dict[str, Any]) -> float:
    """redis_timeout as set, or 2 s, less where three tries and backoff would not fit in request_timeout."""
    if values.get("redis_timeout") is not None:
        return float(values["redis_timeout"])
    return min(2.0, max(_MIN_REDIS_TIMEOUT, (values["request_timeout"] - 1) / 3))


def to_settings(config: Config) -> Settings:
    """The core's Settings from the keys named like its fields."""
    return Settings(
        **{f.name: config.values[f.name] for f in fields(Settings) if f.name in config.values}
    )


# --- showing it ------------------------------------------------------------------


def shown_default(key: Key) -> str:
    """A key's default as `--help` and the key table show it."""
    if key.default is None:
        return "(unset)"
    if isinstance(key.default, bool):
        return str(key.default).lower()
    if isinstance(key.default, str):
        return f'"{key.default}"'
    return str(key.default)


def key_table() -> str:
    """The Markdown table of every key, as docs/operations.md carries it (a test keeps them equal)."""
    rows = ["| key | flag | variable | default | meaning |", "|---|---|---|---|---|"]
    for key in KEYS:
        flag = f"--[no-]{key.flag[2:]}" if isinstance(key.kind, Boolean) else key.flag
        meaning = key.help + (" (secret)" if key.secret else "")
        rows.append(f"| `{key.name}` | `{flag}` | `{key.env}` | {shown_default(key)} | {meaning} |")
    return "\n".join(rows)


def render(config: Config) -> str:
    """The effective configuration as TOML, each line saying where its value came from."""
    lines = ["# chd effective configuration (flags > CHD_* environment > config file > defaults)"]
    width = max(len(key.name) for key in KEYS)
    for key in KEYS:
        value, source = config.values[key.name], config.sources[key.name]
        if value is None:
            lines.append(f"# {key.name} is unset  # {source}")
            continue
        shown = '"********"' if key.secret else _toml(value)
        lines.append(f"{key.name:<{width}} = {shown}  # {source}")
    lines.extend(f"# ignored {note}" for note in config.ignored)
    return "\n".join(lines)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def backend_options(config: Config) -> dict[str, Any]:
    """The options of ``config.backend`` beyond data_dir and durability (for open_backend)."""
    if ALIASES.get(config.backend, config.backend) == "disk":
        options: dict[str, Any] = {}
        if config.values.get("allow_empty_database"):
            options["allow_empty_database"] = True
        if "request_timeout" in config.values:  # a daemon's, not the transfer tools'
            options["request_timeout"] = config.values["request_timeout"]
        return options
    if config.backend != "redis":
        return {}
    # The transfer tools load only some keys (load_keys): the rest keep the backend's defaults.
    # max_conversations: the commit script checks it too, so replicas creating
    # at once cannot both take the last place (the transfer tools load no limit).
    names = (
        "redis_url",
        "redis_password",
        "redis_cluster",
        "conversation_ttl",
        "fold_lease",
        "max_conversations",
        "redis_tls_ca",
    )
    options = {name: config.values[name] for name in names if name in config.values}
    if "request_timeout" in config.values:  # the transfer tools load neither: the backend's default
        options["redis_timeout"] = redis_timeout_of(config.values)
    return options
