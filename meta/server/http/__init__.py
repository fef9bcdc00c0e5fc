"""The HTTP protocol (Java's ``jettyBroker`` plug-in, docs/http.md): put, get and offset over HTTP.

* ``params``: the URL grammar (docs/http.md): a request's path and query
  -> the route and the protocol command, or the 400 text naming the bad parameter. Pure.
* ``resource``: twisted.web's requests on the broker's reactor: the request body limit, the
  dispatch of each command to the TCP protocol's handlers (``meta.server.handlers``, so a put
  takes ``meta.server.puts``'s rules), the translation of their replies into HTTP (H5, H6),
  and the site (its connections on ``maxHttpConnections``).
* ``channel``: one connection: the early refusal of an oversized put, and each response
  sent in one write (and a get's body with ``sendfile``).
* ``sender``: a get's body streamed from its segment with backpressure.

``start_http`` (in ``resource``) listens on ``serverPort`` of ``jettyBroker.properties``, on
``hostName`` when it is set (docs/compatibility.md).
"""
