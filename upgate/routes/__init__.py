"""Routes: several upstreams behind one catalog model (docs/routes.md). `choice` orders a
request's attempts (pure); `health` keeps the shared failures and cool-downs every node reads."""
