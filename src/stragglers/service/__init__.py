"""SMon: the monitoring service (``stragglers serve``) that analyses every uploaded
profiling session in task processes, shows the results on a dashboard, runs the
streaming detector on record streams, alerts and exports Prometheus metrics; and its push
client (``stragglers push``, :func:`stragglers.service.client.push_session`).

One module per concern: ``app`` and ``state`` (ASGI app, lifespan, configuration), ``api``
(JSON API), ``dashboard``, ``views`` and ``overview`` (pages and the jobs overview), ``auth``
(bearer token, body limits), ``ingest`` (uploads), ``dispatcher``, ``tasks`` and ``cluster``
(the durable queue, its task processes or a Dask cluster), ``store``, ``tables``, ``rows``
and ``migrations`` (database), ``datadir`` (files), ``detection`` (the adapter to
:mod:`stragglers.detect.watch`) and ``streams`` (record streams), ``alert_rules`` and
``alerts``, ``prometheus`` (``/metrics``), ``server`` (uvicorn), ``client`` (push),
``crash`` (crash injection for the durability tests).
"""
