"""The broker's dashboard: twisted.web on the broker's reactor, on ``dashboardHttpPort``.

``server`` listens and routes; ``health`` answers ``/healthz`` and ``/readyz``; ``metrics``
exposes the broker's counters to Prometheus (``/metrics``) through ``prometheus_client``;
``facts`` gathers what the JSON API shows; ``counters`` holds the few per-topic counters the
broker keeps for it. Importing this package starts nothing.
"""
