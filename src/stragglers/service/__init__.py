"""SMon: the monitoring service (``stragglers serve``) that analyses every uploaded
profiling session in task processes, shows the results on a dashboard, runs the
streaming detector on record streams, alerts and exports Prometheus metrics; and its push
client (``stragglers push``, :func:`stragglers.service.client.push_session`).

One module per concern: ``app`` (ASGI app and lifespan), ``api`` (JSON API), ``dashboard``
and ``views`` (pages), ``auth`` (bearer token, body limits), ``ingest`` (uploads),
``dispatcher`` and ``tasks`` (the durable queue and task processes), ``store``,
``models`` and ``migrations`` (database), ``datadir`` (files), ``detection`` (the adapter to
:mod:`stragglers.detect.watch`) and ``streams`` (record streams), ``alert_rules`` and
``alerts``, ``metrics``, ``server`` (uvicorn), ``push`` (client).
"""
