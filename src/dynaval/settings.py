"""Settings: one class, read from ``DYNAVAL_*`` environment variables when the app is built.

Nothing here is read at import time; :func:`dynaval.bootstrap.bootstrap` builds a ``Settings``.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

PLACEHOLDER_SECRETS = frozenset({"", "changeme", "change-me", "secret", "dev", "development", "placeholder"})
TOKEN_NAME = re.compile(r"[A-Za-z0-9._@-]{1,64}")


@dataclass(frozen=True)
class Credential:
    """A bearer token and the name the caller's actions are recorded under."""

    name: str
    token: str = field(repr=False)


LeadCredential = Credential


def credential(entry: str, *, role: str) -> Credential:
    """One entry of a ``DYNAVAL_<ROLE>_TOKENS`` list: ``name=token``, or a plain ``token``.

    A plain token's name is the role, ``-`` and the first 8 hex digits of its SHA-256 (``lead-1a2b3c4d``).
    An entry is read as ``name=token`` only when the part before the first ``=`` is a name
    (letters, digits, ``._@-``, at most 64) and the part after it is more than ``=`` padding, so a
    base64 token that ends in ``=`` stays a plain token.
    """
    name, sep, token = entry.partition("=")
    if sep and TOKEN_NAME.fullmatch(name) and token.strip("="):
        return Credential(name=name, token=token)
    return Credential(name=f"{role}-" + hashlib.sha256(entry.encode()).hexdigest()[:8], token=entry)


def lead_credential(entry: str) -> Credential:
    """One ``DYNAVAL_LEAD_TOKENS`` entry (see :func:`credential`)."""
    return credential(entry, role="lead")


def _default_data_dir() -> Path:
    return Path.cwd() / ".dynaval"


class Settings(BaseSettings):
    """Every configurable value, with a sane default for one machine."""

    # A refused value must not reach the error (it lands in a log): pydantic would show it.
    model_config = SettingsConfigDict(env_prefix="DYNAVAL_", extra="ignore", hide_input_in_errors=True)

    development: bool = Field(default=False, description="Allow placeholder secrets (never in production).")
    data_dir: Path = Field(default_factory=_default_data_dir, description="SQLite file and models live here.")
    database_url: str | None = Field(default=None, description="SQLAlchemy URL; default: SQLite in data_dir.")

    label_studio_url: str = "http://127.0.0.1:8080"
    # Secrets carry repr=False: a logged or printed Settings (or Services) shows none of them.
    label_studio_api_key: str = Field(default="", repr=False)
    label_studio_timeout_s: float = 30.0
    public_url: str = Field(
        default="http://127.0.0.1:8000", description="Base URL at which Label Studio reaches this service."
    )

    writer_tokens: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated bearer tokens of writers, one per writer, each `token` or "
        "`name=token`; the token's name is the writer.",
        repr=False,
    )
    lead_tokens: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated bearer tokens of leads, each `token` or `name=token`.",
        repr=False,
    )
    exporter_tokens: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated bearer tokens of exporters (datasets and agreement reports only).",
        repr=False,
    )
    collector_tokens: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated bearer tokens of collectors (outside front ends that submit "
        "candidates for the writers they name), each `token` or `name=token`.",
        repr=False,
    )
    reporter_tokens: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated bearer tokens of reporters (monitoring, canary runs, reviewers, "
        "support desks that report failures found in production to capture rounds), each `token` or "
        "`name=token`; the token's name is recorded as the capture's reporter.",
        repr=False,
    )
    writer_label_studio_users: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated `name=user` links of writers (or leads) who also annotate to their "
        "Label Studio user (its id, or its email): their vote on their own example never counts.",
    )
    webhook_secret: str = Field(default="", repr=False)
    pseudonym_secret: str = Field(default="", repr=False)
    signing_secret: str = Field(default="", repr=False)
    session_secret: str = Field(
        default="",
        description="Key of the dashboard's CSRF tokens and lead-token fingerprints; derived from "
        "signing_secret if unset (changing it ends every dashboard session).",
        repr=False,
    )

    session_cookie_secure: bool | None = Field(
        default=None,
        description="Send the dashboard's cookies over HTTPS only; default: when public_url is https.",
    )
    session_lifetime_s: float = Field(
        default=4 * 3600.0,
        gt=0,
        description="A dashboard session ends this long after its login, however busy the lead is.",
    )
    session_idle_s: float = Field(
        default=30 * 60.0,
        gt=0,
        description="A dashboard session no page used for this long ends.",
    )
    dashboard_wait_ms: float = Field(
        default=500.0,
        description="How long a page waits for figures being recomputed before showing the previous ones.",
    )

    default_model_dir: Path | None = Field(default=None, description="Model used for model='default'.")
    label_config_dir: Path | None = Field(default=None, description="Folder of <task>.xml labelling configs.")

    max_text_chars: int = 2000
    max_body_bytes: int = Field(
        default=0,
        ge=0,
        description="Larger request bodies get 413. 0 (the default): what a full batch of texts or "
        "the largest image needs, whichever is more (1,463,640 bytes with the defaults).",
    )
    max_batch_size: int = Field(default=100, ge=1, description="Candidates one batch request may hold.")
    max_image_bytes: int = Field(
        default=1_048_576,
        ge=1024,
        description="Largest image a candidate may send, as sent (PNG or JPEG bytes); larger: 413.",
    )
    max_image_pixels: int = Field(
        default=16_777_216,
        ge=1,
        description="Most pixels (width x height) an image may decode to; more: 422 (a decompression "
        "bomb is refused from its header, before its pixels are decoded).",
    )
    images_dir: Path | None = Field(
        default=None,
        description="Where images are kept, one file per content hash; default: data_dir/images.",
    )
    image_url_days: int = Field(
        default=365,
        ge=1,
        le=3650,
        description="How long a signed image URL (a Label Studio task's, a page's) stays valid; the "
        "reconcile pass renews the URLs of tasks in rounds not frozen 30 days before they expire.",
    )
    near_duplicate_semantic: bool = Field(
        default=True,
        description="Also check each new candidate and capture for semantic near-duplicates (MiniLM "
        "embeddings, loaded on the first submission); false: the lexical check alone.",
    )
    receive_timeout_s: float = Field(
        default=15.0,
        gt=0,
        description="Under gunicorn: the longest a client may take to send one request, head and body (408).",
    )
    rate_limit: str = Field(
        default="600/minute",
        description="Requests per caller (a known bearer token, or a lead's dashboard session), e.g. "
        '"600/minute"; "" turns it off.',
    )
    anonymous_rate_limit: str = Field(
        default="120/minute",
        description="Requests per client address without a valid credential (no token, a made-up one, "
        'an ended session), counted apart from every caller\'s; "" turns it off.',
    )
    trusted_proxies: int = Field(
        default=0,
        ge=0,
        le=10,
        description="Reverse proxies in front of the service that append the client's address to "
        "X-Forwarded-For: the client address (rate limits, logs) is read from that many hops; 0 "
        "(the default): the connection's own address, and X-Forwarded-For is ignored.",
    )
    scoring_limit: str = Field(
        default="4000/minute",
        description="Model work per caller, in scoring units (one per started 16 tokens the model reads "
        'of each example; docs/api.md, Limits), e.g. "4000/minute"; "" turns it off.',
    )
    rate_limit_storage: str = Field(
        default="memory://",
        description="Where the rate limiter counts: memory:// (one process) or redis://host:port (shared).",
        repr=False,  # a redis:// URL may hold a password
    )
    model_max_tokens: int = Field(
        default=256,
        ge=16,
        le=8192,
        description="The most tokens the model in the loop reads of an example (a pair's two texts "
        "together); a model made for fewer reads its own number. A longer example is refused (422), "
        "since the model would judge only its beginning.",
    )
    batch_max_size: int = 32
    batch_max_wait_ms: float = 5.0
    queue_url: str = Field(
        default="",
        description="Task queue storage: empty for a SQLite file in data_dir (one machine), or redis://host:port/db.",
    )
    queue_name: str = Field(
        default="dynaval", description="Name of the task queue (several deployments may share one Redis)."
    )
    embedded_worker: bool = Field(
        default=True,
        description="Run a task-queue consumer in each service process; false when `dynaval worker` runs.",
    )
    queue_workers: int = Field(default=2, description="Threads of each task-queue consumer.")
    job_workers: int = Field(
        default=1,
        ge=0,
        description="Threads of each consumer's job lane (training, releases, evaluation, the gate): long "
        "jobs run there, never on the threads pushes and webhooks' reads use; 0: this process runs no job.",
    )
    reconcile_interval_s: float = Field(
        default=300.0, description="Scheduled reconcile with Label Studio (lost webhooks); 0 turns it off."
    )
    job_heartbeat_s: float = Field(
        default=10.0,
        gt=0,
        description="How often a running job's worker says it is alive (and notices a cancel).",
    )
    job_stale_after_s: float = Field(
        default=120.0,
        gt=0,
        description="A running job whose worker said nothing this long is run again (once), else failed.",
    )
    push_batch_size: int = 500
    push_lease_s: float = Field(
        default=60.0,
        description="How long one process may push a round before another may take over (renewed per batch).",
    )
    push_retry_base_s: float = Field(
        default=2.0,
        description="First wait before pushing again after Label Studio failed; doubles per failure.",
    )
    push_retry_max_s: float = Field(default=120.0, description="Longest wait between push attempts.")
    verify_delay_s: float = Field(
        default=1.0,
        ge=0.0,
        description="How long the tasks webhooks named gather before one read of them from Label Studio.",
    )

    @model_validator(mode="after")
    def _fit_a_full_batch(self) -> Settings:
        if not self.max_body_bytes:
            self.max_body_bytes = max(
                batch_body_bytes(self.max_batch_size, self.max_text_chars),
                image_body_bytes(self.max_image_bytes),
            )
        return self

    @property
    def resolved_session_cookie_secure(self) -> bool:
        if self.session_cookie_secure is not None:
            return self.session_cookie_secure
        return self.public_url.lower().startswith("https://")

    @field_validator("queue_url")
    @classmethod
    def _check_queue_url(cls, value: str) -> str:
        value = value.strip()
        if value and not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(
                "DYNAVAL_QUEUE_URL must be empty (a SQLite queue in the data folder) or a redis:// URL"
            )
        return value

    @field_validator(
        "writer_tokens",
        "lead_tokens",
        "exporter_tokens",
        "collector_tokens",
        "reporter_tokens",
        "writer_label_studio_users",
        mode="before",
    )
    @classmethod
    def _split_tokens(cls, value: object) -> object:
        if isinstance(value, str):
            return [t.strip() for t in value.split(",") if t.strip()]
        return value

    @field_validator("rate_limit", "anonymous_rate_limit", "scoring_limit")
    @classmethod
    def _parse_rate_limit(cls, value: str, info: ValidationInfo) -> str:
        from limits import parse_many  # the limiter's own grammar: "600/minute", "10/second;600/hour"

        value = value.strip()
        if value:
            try:
                parse_many(value)
            except ValueError:
                raise ValueError(
                    f"DYNAVAL_{str(info.field_name).upper()} must read like "
                    f'"600/minute" or "10/second;600/hour", not {value!r}'
                ) from None
        return value

    @model_validator(mode="after")
    def _refuse_placeholder_secrets(self) -> Settings:
        if self.development:
            return self
        named = {
            "DYNAVAL_WEBHOOK_SECRET": [self.webhook_secret],
            "DYNAVAL_PSEUDONYM_SECRET": [self.pseudonym_secret],
            "DYNAVAL_SIGNING_SECRET": [self.signing_secret],
            "DYNAVAL_WRITER_TOKENS": [c.token for c in self.writer_credentials] or [""],
            "DYNAVAL_LEAD_TOKENS": [c.token for c in self.lead_credentials] or [""],
            # Optional: a deployment may have no exporter or collector; any token given must be a real one.
            "DYNAVAL_EXPORTER_TOKENS": [c.token for c in self.exporter_credentials],
            "DYNAVAL_COLLECTOR_TOKENS": [c.token for c in self.collector_credentials],
            "DYNAVAL_REPORTER_TOKENS": [c.token for c in self.reporter_credentials],
        }
        if self.session_secret:
            named["DYNAVAL_SESSION_SECRET"] = [self.session_secret]
        weak = [name for name, values in named.items() if any(_is_placeholder(v) for v in values)]
        if weak:
            raise ValueError(
                "set real secrets (at least 16 characters, not a placeholder) for "
                + ", ".join(weak)
                + ", or set DYNAVAL_DEVELOPMENT=true on a development machine"
            )
        # A value in two places would let whoever holds one role's secret act in the other
        # (Label Studio's admins can read the webhook secret): every one must be distinct.
        seen: dict[str, str] = {}
        shared: set[str] = set()
        for name, values in named.items():
            for value in set(values):
                if value in seen:
                    shared.update((seen[value], name))
                seen.setdefault(value, name)
        if shared:
            raise ValueError(
                "the same value is set in "
                + ", ".join(sorted(shared))
                + ": every token and secret must be different"
            )
        return self

    @model_validator(mode="after")
    def _check_writer_links(self) -> Settings:
        writers = {c.name for c in (*self.writer_credentials, *self.lead_credentials)}
        for name in self.writer_label_studio_links:
            if name not in writers:
                raise ValueError(
                    f"DYNAVAL_WRITER_LABEL_STUDIO_USERS links {name!r}, which is no writer's or lead's "
                    "token name (DYNAVAL_WRITER_TOKENS, DYNAVAL_LEAD_TOKENS)"
                )
        return self

    @property
    def writer_label_studio_links(self) -> dict[str, str]:
        """Label Studio users (an id or an email) by writer name."""
        links: dict[str, str] = {}
        for entry in self.writer_label_studio_users:
            name, _, user = entry.partition("=")
            if not name.strip() or not user.strip():
                raise ValueError(
                    f"DYNAVAL_WRITER_LABEL_STUDIO_USERS entry {entry!r}: write name=user "
                    "(the user's Label Studio id or email)"
                )
            links[name.strip()] = user.strip()
        return links

    @model_validator(mode="after")
    def _refuse_shared_identities(self) -> Settings:
        """Each submitter is who their token says (checked in development too: it is no matter of
        secret strength). A candidate records the name of the token it came with as its writer (or
        its collector), and a writer or collector reads back what came under that name."""
        submitters = {
            "DYNAVAL_WRITER_TOKENS": self.writer_credentials,
            "DYNAVAL_COLLECTOR_TOKENS": self.collector_credentials,
            "DYNAVAL_LEAD_TOKENS": self.lead_credentials,
            "DYNAVAL_EXPORTER_TOKENS": self.exporter_credentials,
            "DYNAVAL_REPORTER_TOKENS": self.reporter_credentials,
        }
        # One token under two names would file every candidate under the first name only.
        shared_tokens = []
        for variable, credentials in submitters.items():
            names_of: dict[str, set[str]] = {}
            for c in credentials:
                names_of.setdefault(c.token, set()).add(c.name)
            if any(len(names) > 1 for names in names_of.values()):
                shared_tokens.append(variable)
        if shared_tokens:
            raise ValueError(
                "one token is set under two names in "
                + ", ".join(shared_tokens)
                + ": give each writer, collector, lead, exporter or reporter their own token"
            )
        # One name in two submitting roles would let a collector read a writer's candidates as its
        # own, or give a lead's candidates a writer's pseudonym. (Several tokens of one role may
        # share a name: one person's old and new token.)
        roles_of: dict[str, set[str]] = {}
        # A reporter's name is a capture's writer: it must not be a writer's or lead's either.
        for variable in (
            "DYNAVAL_WRITER_TOKENS",
            "DYNAVAL_COLLECTOR_TOKENS",
            "DYNAVAL_LEAD_TOKENS",
            "DYNAVAL_REPORTER_TOKENS",
        ):
            for c in submitters[variable]:
                roles_of.setdefault(c.name, set()).add(variable)
        clashing = sorted({v for variables in roles_of.values() if len(variables) > 1 for v in variables})
        if clashing:
            raise ValueError(
                "the same name is given in "
                + ", ".join(clashing)
                + ": writers, collectors, leads and reporters need names of their own"
            )
        return self

    @property
    def lead_credentials(self) -> list[Credential]:
        """Every lead's token and name (see :func:`credential`)."""
        return [credential(entry, role="lead") for entry in self.lead_tokens]

    @property
    def writer_credentials(self) -> list[Credential]:
        """Every writer's token and name; a candidate records the name it was submitted under."""
        return [credential(entry, role="writer") for entry in self.writer_tokens]

    @property
    def exporter_credentials(self) -> list[Credential]:
        """Every exporter's token and name."""
        return [credential(entry, role="exporter") for entry in self.exporter_tokens]

    @property
    def reporter_credentials(self) -> list[Credential]:
        """Every reporter's token and name; a capture records the name it was reported under."""
        return [credential(entry, role="reporter") for entry in self.reporter_tokens]

    @property
    def collector_credentials(self) -> list[Credential]:
        """Every collector's token and name; a candidate it submits records the name beside the writer's."""
        return [credential(entry, role="collector") for entry in self.collector_tokens]

    @property
    def resolved_session_secret(self) -> str:
        """The dashboard sessions' key: ``session_secret``, or one derived from the signing secret
        (HMAC, so it never equals a secret used elsewhere)."""
        if self.session_secret:
            return self.session_secret
        return hmac.new(self.signing_secret.encode(), b"dynaval:session-cookie", hashlib.sha256).hexdigest()

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'dynaval.sqlite3'}"

    @property
    def resolved_default_model_dir(self) -> Path:
        return self.default_model_dir or (self.data_dir / "models" / "sentiment-default")

    def default_model_dir_for(self, task: str) -> Path:
        """Where ``dynaval model build-default --task <task>`` writes by default: sentiment's is
        :attr:`resolved_default_model_dir`; another task's is its sibling ``<task>-default``
        (``<data dir>/models/nli-default`` unless ``DYNAVAL_DEFAULT_MODEL_DIR`` moves them both)."""
        if task == "sentiment":
            return self.resolved_default_model_dir
        return self.resolved_default_model_dir.parent / f"{task}-default"

    @property
    def resolved_images_dir(self) -> Path:
        return self.images_dir or (self.data_dir / "images")

    @property
    def resolved_label_config_dir(self) -> Path:
        if self.label_config_dir:
            return self.label_config_dir
        # An installed wheel carries the configs in the package (setup.py copies them in); a checkout
        # (an editable install) has only the label_config/ folder at the repository's top.
        packaged = Path(__file__).resolve().parent / "label_config"
        return packaged if packaged.is_dir() else Path(__file__).resolve().parents[2] / "label_config"


def batch_body_bytes(max_batch_size: int, max_text_chars: int) -> int:
    """The default body limit: a full batch fits it, each candidate with ``max_text_chars``
    characters of text written as JSON escapes (``\\u4e2d``: 6 bytes a character, as Python's
    ``json`` writes anything not ASCII; written as UTF-8 they take 4 at most) and 1 KiB of JSON
    around them; 4 KiB more for the body's own."""
    return max_batch_size * (max_text_chars * 6 + 1024) + 4096


def image_body_bytes(max_image_bytes: int) -> int:
    """What a body with the largest image needs: the image as base64 in a data URL (4 bytes for
    every 3), and 64 KiB for the rest of the body (or of a multipart upload's parts)."""
    return -(-max_image_bytes // 3) * 4 + 65_536


def _is_placeholder(value: str) -> bool:
    return value.strip().lower() in PLACEHOLDER_SECRETS or len(value.strip()) < 16
