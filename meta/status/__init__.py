"""What a broker reports about itself: its facts as plain values, and its readiness.

``facts`` builds the dicts and lists behind the dashboard's JSON API and the wire's ``stats
json:<item>`` documents; ``health`` decides readiness. Both are pure functions of the
broker's public state (they take the broker as ``Any`` and import nothing of
``meta.server``), so the broker and the dashboard above it share one definition of each fact.
"""
