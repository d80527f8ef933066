"""Talking to providers: knows nothing of money.

client     the libcurl-backed HTTP client (keep-alive pool, silence timer, cancel)
sse        incremental SSE parsing and the SSE bytes we emit
assemble   streamed chunks → one non-stream completion object
dialects   the request body each provider dialect expects
providers  the providers TOML file
errors     upstream HTTP errors → the gateway's (status, code, message)
scrub      strip what identifies the upstream from its messages
"""
