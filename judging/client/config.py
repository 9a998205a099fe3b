"""``ClientConfig``: one validated record that drives both the CLI and the library.

Endpoint and key follow the ``openai`` conventions (``OPENAI_BASE_URL``,
``OPENAI_API_KEY``), so the same command points at OpenAI, vLLM or ``transformers
serve``. The config stores the NAME of the environment variable that holds the key,
never the key itself: a config can then be printed, logged, pickled or saved next to
a run without leaking a secret. The key is read from the environment only when the
HTTP client is built.

Credentials in the base URL (``http://user:password@host/v1``) are taken out of it when the
config is made: ``base_url`` holds the URL without them (so it can be printed, logged and
hashed into the reply cache), and the credentials are kept in this process only, sent as
HTTP Basic authentication by :meth:`ClientConfig.authorization`. A request carries one
``Authorization`` header, so URL credentials together with a key in the environment are
refused in one line rather than one of them dropped. A base URL with a query string or a fragment is refused in a
line that does not show it (a key put there would otherwise be printed in every error line).

Example:
    >>> cfg = ClientConfig(base_url="http://127.0.0.1:8000/v1", model="/models/tiny", cache_dir=None)
    >>> cfg.describe()
    'http://127.0.0.1:8000/v1 model=/models/tiny temperature=0.0 concurrency=4'

    >>> ClientConfig(base_url="ftp://x", model="m")
    Traceback (most recent call last):
    ...
    core.errors.ProbeError: --base-url must start with http:// or https:// and hold no spaces ..., got 'ftp://x'
    >>> ClientConfig(base_url="http://127.0.0.1:8000/v1?api_key=sk-secret", model="m")
    Traceback (most recent call last):
    ...
    core.errors.ProbeError: --base-url holds a query string or a fragment ('?' or '#'; not shown, since it may ...
"""

from __future__ import annotations

import base64
import os
import re
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import unquote, urlsplit, urlunsplit

from core.config_fields import option
from core.config_file import Range, typed_config
from core.errors import ProbeError
from judging.client.scrub import without_url_credentials

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_CACHE_DIR = Path(".cache") / "llm"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_URL_CREDENTIALS: dict[str, tuple[str, str, str]] = {}  # bare base URL -> (user, password, userinfo as typed)
TEMPERATURE = Range(0, 2)
CONCURRENCY = Range(1, 256)
RETRIES = Range(0, 100)
TIMEOUT = Range(0.001, 3600)  # seconds
BACKOFF = Range(0, 600)  # seconds


@dataclass(frozen=True)
@typed_config
class ClientConfig:
    """Where to send chat requests and how hard to try.

    ``concurrency`` bounds requests in flight; ``max_retries`` counts retries after the
    first attempt (on 429, 5xx, timeouts, connection errors, malformed replies);
    ``backoff_base`` seconds doubles per retry (+ jitter); ``cache_dir=None`` disables
    the reply cache.
    """

    base_url: str = DEFAULT_BASE_URL
    model: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    temperature: Annotated[float, TEMPERATURE] = 0.0
    max_tokens: Annotated[int, Range(1, 1_000_000)] = 512
    concurrency: Annotated[int, CONCURRENCY] = 4
    max_retries: Annotated[int, RETRIES] = 4
    timeout: Annotated[float, TIMEOUT] = 60.0
    cache_dir: Path | None = DEFAULT_CACHE_DIR
    backoff_base: Annotated[float, BACKOFF] = 1.0
    backoff_max: Annotated[float, Range(0, 3600)] = 30.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", _checked_base_url(self.base_url))
        if not self.model.strip():
            raise ProbeError(
                "no model given; pass --model (for `transformers serve`, the exact path it serves) or set OPENAI_MODEL"
            )
        if not _ENV_NAME.match(self.api_key_env):
            # Never echo the value: users sometimes paste the key itself here.
            raise ProbeError(
                "--api-key-env must be the NAME of an environment variable (e.g. OPENAI_API_KEY), not a key"
            )
        if self.cache_dir is not None and not isinstance(self.cache_dir, Path):
            object.__setattr__(self, "cache_dir", Path(self.cache_dir))

    def api_key(self) -> str:
        """The key from the environment; a placeholder for self-hosted servers; a clear error for OpenAI."""
        key = os.environ.get(self.api_key_env, "").strip()
        if key and not (key.isascii() and key.isprintable() and " " not in key):
            # Never echo the value, not even in part.
            raise ProbeError(
                f"the key in ${self.api_key_env} holds a space, a control or a non-ASCII character; "
                "an HTTP header cannot carry it; set the variable to the key alone"
            )
        if key:
            return key
        if urlsplit(self.base_url).hostname == "api.openai.com":
            raise ProbeError(f"no API key for {self.base_url}: set the environment variable {self.api_key_env}")
        return "EMPTY"  # vLLM, transformers serve and most self-hosted servers accept any non-empty key

    def authorization(self) -> str:
        """The ``Authorization`` header: Basic with the base URL's credentials if it had any, else Bearer with the
        key. Both at once is refused: a request carries one such header, and neither may be dropped unsaid."""
        credentials = _URL_CREDENTIALS.get(self.base_url)
        if credentials is None:
            return f"Bearer {self.api_key()}"
        if os.environ.get(self.api_key_env, "").strip():
            raise ProbeError(
                f"--base-url carries credentials (user:password@) and ${self.api_key_env} holds a key, but a request "
                f"sends one of them; unset {self.api_key_env} to send the URL's credentials (HTTP Basic), or take "
                "them out of the URL to send the key"
            )
        user, password, _ = credentials
        return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")

    def secrets(self) -> list[str]:
        """What must never be shown: the key (unless the placeholder) and the base URL's credentials, as typed
        (percent-encoded) and decoded; :class:`~judging.client.scrub.Scrubber` masks each in every encoding."""
        key = os.environ.get(self.api_key_env, "").strip()
        user, password, typed = _URL_CREDENTIALS.get(self.base_url, ("", "", ""))
        both = f"{user}:{password}" if user or password else ""
        return [s for s in (key, password, both, typed, user if not password else "") if s and s != "EMPTY"]

    def with_overrides(self, **changes: Any) -> ClientConfig:
        """A copy with some fields changed (``None`` values are ignored)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    @classmethod
    def from_env(cls, base_url: str | None = None, model: str | None = None, **overrides: Any) -> ClientConfig:
        """Flags win over ``OPENAI_BASE_URL`` / ``OPENAI_MODEL``, which win over the defaults.

        ``overrides`` set any other field; ``None`` values are ignored, so CLI options can be
        passed straight through.
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ProbeError(f"unknown client setting(s): {', '.join(unknown)}")
        values = {k: v for k, v in overrides.items() if v is not None}
        values["base_url"] = base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        values["model"] = model or os.environ.get("OPENAI_MODEL") or ""
        return cls(**values)

    def describe(self) -> str:
        """One line safe to print or log (no key)."""
        return f"{self.base_url} model={self.model} temperature={self.temperature} concurrency={self.concurrency}"


@dataclass(frozen=True)
@typed_config
class ClientOptions:
    """The endpoint settings a command takes (``probe judge``, ``probe synthesize``, the LLM judge of ``probe
    intervene``); None leaves a setting to ``OPENAI_BASE_URL``/``OPENAI_MODEL`` or to :class:`ClientConfig`'s
    default, which the help shows. :meth:`client` makes the :class:`ClientConfig`."""

    model: str | None = option(
        None, "Model name (for `transformers serve`: the exact path it serves). Env: OPENAI_MODEL."
    )
    base_url: str | None = option(
        None, "OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1. Env: OPENAI_BASE_URL."
    )
    api_key_env: str | None = option(
        None, "NAME of the variable holding the key.", shown_default=ClientConfig.api_key_env
    )
    temperature: Annotated[float, TEMPERATURE] | None = option(
        None, "Sampling temperature of the replies.", shown_default=ClientConfig.temperature
    )
    concurrency: Annotated[int, CONCURRENCY] | None = option(
        None, "Requests in flight.", shown_default=ClientConfig.concurrency
    )
    retries: Annotated[int, RETRIES] | None = option(
        None,
        "Retries per request on 429/5xx/timeouts/broken replies.",
        flag="--max-retries",
        aliases=("--retries",),
        shown_default=ClientConfig.max_retries,
    )
    timeout: Annotated[float, TIMEOUT] | None = option(
        None, "Seconds to wait for a reply before a retry.", shown_default=ClientConfig.timeout
    )
    backoff: Annotated[float, BACKOFF] | None = option(
        None,
        "Seconds before the first retry, doubled per retry, at least the server's Retry-After.",
        shown_default=ClientConfig.backoff_base,
    )
    cache_dir: Path | None = option(
        None, "Reply cache, what a rerun resumes from.", shown_default=ClientConfig.cache_dir
    )
    no_cache: bool = option(
        False, "Neither read nor write the reply cache (every call is paid, nothing to resume from).", switch=True
    )

    def client(self) -> ClientConfig:
        """The client settings: these, then the environment, then :class:`ClientConfig`'s defaults."""
        config = ClientConfig.from_env(
            self.base_url,
            self.model,
            api_key_env=self.api_key_env,
            temperature=self.temperature,
            concurrency=self.concurrency,
            max_retries=self.retries,
            timeout=self.timeout,
            backoff_base=self.backoff,
            cache_dir=self.cache_dir,
        )
        return replace(config, cache_dir=None) if self.no_cache else config


def _checked_base_url(base_url: object) -> str:
    """``base_url`` without ``user:password@``; the credentials are remembered for
    :meth:`ClientConfig.authorization`. One with a query string or a fragment is refused before anything else, in a
    line that does not show it: a key put there would be printed in every error line, and requests would go to a
    malformed path."""
    if isinstance(base_url, str) and ("?" in base_url or "#" in base_url):
        raise ProbeError(
            "--base-url holds a query string or a fragment ('?' or '#'; not shown, since it may carry a key): "
            "give the endpoint as http(s)://host[:port]/path, and a key through the environment variable that "
            "--api-key-env names"
        )
    shown = without_url_credentials(base_url) if isinstance(base_url, str) else base_url
    if (
        not isinstance(base_url, str)
        or not re.fullmatch(r"https?://[^/\s]+(/\S*)?", base_url)
        or not base_url.isprintable()
    ):
        raise ProbeError(
            f"--base-url must start with http:// or https:// and hold no spaces or control characters, got {shown!r}"
        )
    try:
        parts = urlsplit(base_url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError as exc:
        raise ProbeError(f"--base-url {shown!r} is not a valid URL ({exc})") from None
    if not parts.hostname:
        raise ProbeError(f"--base-url {shown!r} names no host")
    if parts.username is None and parts.password is None:
        return base_url
    bare = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    typed = parts.netloc.rpartition("@")[0]
    _URL_CREDENTIALS[bare] = (unquote(parts.username or ""), unquote(parts.password or ""), typed)
    return bare
