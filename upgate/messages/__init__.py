"""The Anthropic Messages API on upgate's one billing path (docs/client-guide.md).

Pure translations, no I/O and nothing of money: a Messages request becomes the chat-completions
body the proxy validates, sizes and bills (request.py); the chat answer and its stream go back
to the client as a Message and its SSE events (answer.py, events.py); errors keep the spec's
code in Anthropic's shape (errors.py). The reverse direction, for a provider of the dialect
`anthropic`, is upstream/anthropic.py.
"""
