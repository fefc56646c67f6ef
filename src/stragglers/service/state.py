"""The running service: its configuration and the components every route uses."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry

from stragglers.atomic import check_out_dir
from stragglers.detect.robust import RobustSettings
from stragglers.errors import InputError
from stragglers.limits import check_limit
from stragglers.service.alert_rules import AlertConfig
from stragglers.service.alerts import Alerter
from stragglers.service.auth import load_token
from stragglers.service.datadir import DataDir
from stragglers.service.dispatcher import Dispatcher, UploadChecker
from stragglers.service.ingest import Ingest
from stragglers.service.overview import RecordActivity
from stragglers.service.prometheus import DEFAULT_STALE_S, Telemetry
from stragglers.service.store import LEASE_S, Store
from stragglers.service.streams import RecordStreams


@dataclass(frozen=True)
class ConnectionLimits:
    """How long the server waits for slow clients and how many it holds (see
    :mod:`stragglers.service.server`)."""

    header_timeout_s: float = 10.0  # a request's headers, from its first byte
    body_timeout_s: float = 30.0  # no byte of a request body arriving while it is awaited
    keep_alive_s: int = 5  # an idle connection between requests
    max_connections: int = 1000  # open at once; more are closed when accepted


@dataclass(frozen=True)
class ServiceConfig:
    """What ``stragglers serve`` was asked for."""

    data: Path
    token: str
    db_url: str | None = None
    alerts: AlertConfig = field(default_factory=AlertConfig)
    workers: int = 2
    validators: int = 4  # upload validation processes at most (started when needed)
    private: bool = False
    public_url: str = "http://127.0.0.1:8080"
    lease_s: float = LEASE_S
    metrics_stale_s: float = DEFAULT_STALE_S
    scheduler: str | None = None
    limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    #: the detector of record streams (``--threshold``, ... of ``serve``)
    detector: RobustSettings = field(default_factory=RobustSettings)


def service_config(data: str, token_file: str | None, *, db_url: str | None = None,
                   alerts: str | None = None, workers: int = 2, private: bool = False,
                   lease_s: float = LEASE_S, metrics_stale_s: float = DEFAULT_STALE_S,
                   scheduler: str | None = None,
                   limits: ConnectionLimits | None = None, validators: int = 4,
                   detector: RobustSettings | None = None) -> ServiceConfig:
    """The configuration of ``stragglers serve``: the data folder checked writable, the
    database URL's scheme checked, the token read from ``token_file`` (or
    ``$STRAGGLERS_TOKEN``) and the alert rules from the YAML file ``alerts``; the
    detector's parameters are checked by building one."""
    check_out_dir(data, "--data")
    detector = detector or RobustSettings()
    if detector.warmup_iters is not None:
        check_limit("warmup_iters", detector.warmup_iters, "--warmup")
    try:
        detector.detector()
    except ValueError as exc:
        raise InputError(f"detector parameters: {exc}") from None
    if db_url is not None and not db_url.startswith(("postgresql://", "sqlite:///")):
        raise InputError(f"--db {db_url.split('://')[0]}://...: expected a postgresql:// "
                         "or sqlite:/// URL")
    return ServiceConfig(data=Path(data), token=load_token(token_file), db_url=db_url,
                         alerts=AlertConfig.from_file(alerts) if alerts else AlertConfig(),
                         workers=workers, validators=validators, private=private,
                         lease_s=lease_s,
                         metrics_stale_s=metrics_stale_s, scheduler=scheduler,
                         limits=limits or ConnectionLimits(), detector=detector)


@dataclass
class Service:
    config: ServiceConfig
    data: DataDir
    store: Store
    checker: UploadChecker
    dispatcher: Dispatcher
    ingest: Ingest
    streams: RecordStreams
    alerter: Alerter
    registry: CollectorRegistry
    telemetry: Telemetry
    activity: RecordActivity
