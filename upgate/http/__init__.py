"""The HTTP/1.1 layer under Tornado's handlers, with the access log, client address and metrics."""
