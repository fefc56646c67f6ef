"""The running service: its configuration and the components every route uses."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry

from stragglers.service.alert_rules import AlertConfig
from stragglers.service.alerts import Alerter
from stragglers.service.datadir import DataDir
from stragglers.service.dispatcher import Dispatcher, UploadChecker
from stragglers.service.ingest import Ingest
from stragglers.service.overview import RecordActivity
from stragglers.service.prometheus import DEFAULT_STALE_S, Telemetry
from stragglers.service.store import Store
from stragglers.service.streams import RecordStreams


@dataclass(frozen=True)
class ServiceConfig:
    """What ``stragglers serve`` was asked for."""

    data: Path
    token: str
    db_url: str | None = None
    alerts: AlertConfig = field(default_factory=AlertConfig)
    workers: int = 2
    validators: int = 1
    private: bool = False
    public_url: str = "http://127.0.0.1:8080"
    lease_s: float = 30.0
    metrics_stale_s: float = DEFAULT_STALE_S
    scheduler: str | None = None


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
