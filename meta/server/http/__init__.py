"""The HTTP protocol (Java's ``jettyBroker`` plug-in, docs/http.md): put, get and offset over HTTP.

* ``params``: the URL grammar (docs/http.md): a request's path and query
  -> the route and the protocol command, or the 400 text naming the bad parameter. Pure.
* ``resource``: twisted.web on the broker's reactor: the request body limit, the
  dispatch of each command to the TCP protocol's handlers (``meta.server.handlers``, so a put
  takes ``meta.server.puts``'s rules), and the translation of their replies into HTTP (H5, H6).

``start_http`` (in ``resource``) listens on ``serverPort`` of ``jettyBroker.properties``, on
``hostName`` when it is set (docs/compatibility.md).
"""
