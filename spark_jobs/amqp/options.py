# spark_jobs.amqp.options: parses the `amqp` data source's options into one frozen object and
# builds pika connection parameters from it (failover list, credentials, heartbeat).
# Talked to by the data source (driver) and by its readers/writers (driver and executors).
# Must never log or repr a password: `AmqpOptions.__repr__` and `redact()` mask it.

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field

import pika

DEFAULT_URI = "amqp://guest:guest@127.0.0.1:5672/%2F"
MAX_PREFETCH = 65535  # basic.qos prefetch-count is a 16-bit field (AMQP 0-9-1 §1.8.3.1)
QUEUE_TYPES = ("classic", "quorum", "stream")  # RabbitMQ's x-queue-type values
# Reader options that apply to one queue type only: option name -> AmqpOptions field.
# Every other reader option applies to all three (docs/spark.md has the table).
STREAM_ONLY_OPTIONS = (("startingOffsets", "starting_offsets"),
                       ("startingTimestamp", "starting_timestamp"),
                       ("endingOffsets", "ending_offsets"),
                       ("streamPort", "stream_port"))


class AmqpOptionError(ValueError):
    """An `amqp` data source option is missing or malformed (raised on the driver at planning)."""


def redact(uri: str) -> str:
    """`uri` with any password replaced by `***` (for logs and error messages)."""
    parts = urllib.parse.urlsplit(uri)
    if parts.password is None:
        return uri
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _split_uris(raw: str) -> tuple[str, ...]:
    raw = raw.strip()
    if raw.startswith("["):
        try:
            items = json.loads(raw)
        except json.JSONDecodeError as e:
            raise AmqpOptionError(f"option uri: not a JSON list ({e.msg})") from None
    else:
        items = raw.split(",")
    uris = tuple(str(u).strip() for u in items if str(u).strip())
    if not uris:
        raise AmqpOptionError("option uri: no URI given")
    for uri in uris:
        if urllib.parse.urlsplit(uri).scheme not in ("amqp", "amqps"):
            raise AmqpOptionError(f"option uri: not an amqp:// URI: {redact(uri)}")
    return uris


def _int_option(options: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    raw = options.get(name)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise AmqpOptionError(f"option {name}: not an integer: {raw!r}") from None
    if not lo <= value <= hi:
        raise AmqpOptionError(f"option {name}: {value} is outside [{lo}, {hi}]")
    return value


def _choice(options: Mapping[str, str], name: str, allowed: tuple[str, ...]) -> str | None:
    raw = options.get(name)
    if raw is None:
        return None
    value = str(raw).strip().lower()
    if value not in allowed:
        raise AmqpOptionError(f"option {name}: one of {', '.join(allowed)}, not {value!r}")
    return value


def _http_uri(options: Mapping[str, str], name: str, env: str) -> str | None:
    raw = options.get(name) or os.environ.get(env)
    if not raw:
        return None
    uri = str(raw).strip()
    if urllib.parse.urlsplit(uri).scheme not in ("http", "https"):
        raise AmqpOptionError(f"option {name}: not an http(s):// URI: {redact(uri)}")
    return uri


def _offset_option(options: Mapping[str, str], name: str,
                   words: tuple[str, ...] = ("earliest", "latest")) -> str | None:
    """startingOffsets / endingOffsets: one of `words` or a non-negative offset."""
    raw = options.get(name)
    if raw is None:
        return None
    value = str(raw).strip().lower()
    if value in words or (value.isdigit()):
        return value
    raise AmqpOptionError(f"option {name}: {' | '.join(words)} or an offset, not {raw!r}")


@dataclass(frozen=True, repr=False)
class AmqpOptions:
    """Every option of the `amqp` data source, parsed and checked.

    Built by `from_options` from the options object Spark hands to `DataSource.__init__` (a
    case-insensitive mapping; names are documented camelCase). Picklable, so it travels to tasks.
    """

    uris: tuple[str, ...] = (DEFAULT_URI,)  # failover order: the first that opens is used
    exchange: str = ""  # writer: exchange to publish to ("" = the default exchange)
    routing_key: str = ""  # writer: fixed routing key, unless routing_key_column is set
    routing_key_column: str | None = None  # writer: column holding each row's routing key
    queue: str | None = None  # readers: queue to consume from
    max_messages_per_trigger: int = 10000  # readers: rows per micro-batch / batch read; prefetch
    fetch_wait_ms: int = 1000  # readers: longest wait for the first message of a batch
    confirm_window: int = 1000  # writer: publishes awaiting a confirm at any time
    heartbeat: int = 60  # seconds; 0 turns heartbeats off
    message_id_prefix: str | None = None  # writer: fixed prefix of generated message ids
    queue_type: str | None = None  # readers: classic | quorum | stream as the user says;
    # None: detected (spark_jobs.amqp.queue_type); given: must match what is detected
    management_uri: str | None = None  # readers: management HTTP API base, for the type probe
    batch_timeout_ms: int = 60000  # readers: longest wait on the broker without progress
    starting_offsets: str | None = None  # stream: earliest | latest | an offset
    starting_timestamp: int | None = None  # stream: ms since the epoch (wins over the above)
    ending_offsets: str | None = None  # stream batch reads: latest | an offset
    stream_port: int | None = None  # stream: read over the stream protocol on this port
    _username: str | None = field(default=None, repr=False)  # from env when the URI has none
    _password: str | None = field(default=None, repr=False)

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> AmqpOptions:
        """Parse Spark's options mapping (read as given: it is case-insensitive).

        Options: uri (one URI, a comma-separated list or a JSON list; default $AMQP_URI or
        amqp://guest:guest@127.0.0.1:5672/%2F), exchange, routingKey, routingKeyColumn, queue,
        maxMessagesPerTrigger (1..65535, default 10000), fetchWaitMs (default 1000),
        batchTimeoutMs (100..86400000, default 60000), confirmWindow (1..65535, default 1000),
        heartbeat (s, default 60), messageIdPrefix, queueType (classic | quorum | stream;
        default: detected), managementUri (http(s) base of the management API; default
        $AMQP_MANAGEMENT_URI, else none); for a stream queue: startingOffsets (earliest |
        latest | an offset; default latest for a streaming read, earliest for a batch read),
        startingTimestamp (ms), endingOffsets (batch reads: latest | an offset), streamPort
        (1..65535: read over the RabbitMQ Stream protocol on that port of the first URI's
        host, with its credentials and vhost; default: over AMQP 0-9-1).
        Credentials: user and password in the URI, else $AMQP_USERNAME / $AMQP_PASSWORD.
        Errors: AmqpOptionError naming the option (passwords redacted). Whether an option
        applies to the queue's type is checked later, by `check_reader_options`.
        """
        uris = _split_uris(options.get("uri") or os.environ.get("AMQP_URI") or DEFAULT_URI)
        rk_col = options.get("routingKeyColumn")
        rk = options.get("routingKey")
        if rk_col and rk:
            raise AmqpOptionError("options routingKey and routingKeyColumn exclude each other")
        return cls(
            uris=uris,
            exchange=options.get("exchange") or "",
            routing_key=rk or "",
            routing_key_column=rk_col or None,
            queue=options.get("queue") or None,
            max_messages_per_trigger=_int_option(
                options, "maxMessagesPerTrigger", 10000, 1, MAX_PREFETCH),
            fetch_wait_ms=_int_option(options, "fetchWaitMs", 1000, 0, 3_600_000),
            confirm_window=_int_option(options, "confirmWindow", 1000, 1, MAX_PREFETCH),
            heartbeat=_int_option(options, "heartbeat", 60, 0, 65535),
            message_id_prefix=options.get("messageIdPrefix") or None,
            queue_type=_choice(options, "queueType", QUEUE_TYPES),
            management_uri=_http_uri(options, "managementUri", "AMQP_MANAGEMENT_URI"),
            batch_timeout_ms=_int_option(options, "batchTimeoutMs", 60000, 100, 86_400_000),
            starting_offsets=_offset_option(options, "startingOffsets"),
            starting_timestamp=(None if options.get("startingTimestamp") is None else
                                _int_option(options, "startingTimestamp", 0, 0, 2**62)),
            ending_offsets=_offset_option(options, "endingOffsets", ("latest",)),
            stream_port=(None if options.get("streamPort") is None else
                         _int_option(options, "streamPort", 5552, 1, 65535)),
            _username=os.environ.get("AMQP_USERNAME"),
            _password=os.environ.get("AMQP_PASSWORD"),
        )

    def __repr__(self) -> str:
        return (f"AmqpOptions(uris={self.describe()!r}, exchange={self.exchange!r}, "
                f"routing_key={self.routing_key!r}, routing_key_column="
                f"{self.routing_key_column!r}, queue={self.queue!r}, max_messages_per_trigger="
                f"{self.max_messages_per_trigger}, fetch_wait_ms={self.fetch_wait_ms}, "
                f"confirm_window={self.confirm_window}, heartbeat={self.heartbeat}, "
                f"queue_type={self.queue_type!r}, management_uri="
                f"{redact(self.management_uri) if self.management_uri else None!r}, "
                f"batch_timeout_ms={self.batch_timeout_ms})")

    @property
    def batch_timeout_s(self) -> float:
        """batchTimeoutMs in seconds."""
        return self.batch_timeout_ms / 1000

    def require_queue(self) -> str:
        """The `queue` option, or AmqpOptionError when a reader was given none."""
        if not self.queue:
            raise AmqpOptionError("option queue is required to read")
        return self.queue

    def check_reader_options(self, queue_type: str, streaming: bool) -> None:
        """Refuse reader options that do not apply to a queue of `queue_type` (the detected
        type: classic | quorum | stream), and a queueType option that says otherwise.

        Errors: AmqpOptionError "option startingOffsets does not apply to classic queue 'q'",
        "option queueType is classic, but queue 'q' is a stream queue", "option endingOffsets
        does not apply to a streaming read of stream queue 'q'" (Spark's Kafka source refuses
        endingOffsets in streaming queries too).
        """
        queue = self.require_queue()
        if self.queue_type is not None and self.queue_type != queue_type:
            raise AmqpOptionError(f"option queueType is {self.queue_type}, but queue "
                                  f"'{queue}' is a {queue_type} queue")
        if queue_type != "stream":
            for option, attr in STREAM_ONLY_OPTIONS:
                if getattr(self, attr) is not None:
                    raise AmqpOptionError(
                        f"option {option} does not apply to {queue_type} queue '{queue}'")
        elif streaming and self.ending_offsets is not None:
            raise AmqpOptionError("option endingOffsets does not apply to a streaming read "
                                  f"of stream queue '{queue}'")

    def connection_parameters(self, name: str = "spark-amqp",
                              timeout_s: float | None = None) -> list[pika.URLParameters]:
        """pika parameters for each URI in failover order, with heartbeat, credentials and
        `name` as the connection_name client property (shown by the broker's tools).
        `timeout_s` bounds the TCP connect and the whole AMQP handshake of each attempt
        (pika socket_timeout and stack_timeout; default 10 s and pika's 15 s)."""
        params = []
        for uri in self.uris:
            p = pika.URLParameters(uri)
            p.client_properties = {"connection_name": name}
            if urllib.parse.urlsplit(uri).username is None and self._username is not None:
                p.credentials = pika.PlainCredentials(self._username, self._password or "")
            p.heartbeat = self.heartbeat
            p.connection_attempts = 1
            p.socket_timeout = 10 if timeout_s is None else min(10.0, timeout_s)
            if timeout_s is not None:
                p.stack_timeout = timeout_s
            p.blocked_connection_timeout = 300
            params.append(p)
        return params

    def describe(self) -> str:
        """The URIs with passwords masked, for log lines and errors."""
        return ",".join(redact(u) for u in self.uris)
