"""The OpenAI Responses API (`POST /v1/responses`, UPGATE_RESPONSES=on) on upgate's one billing
path (docs/client-guide.md). Stateless, as OpenRouter's: nothing of a response is stored.

Pure translations, no I/O and nothing of money: a Responses request becomes the chat-completions
body the proxy validates, sizes and bills (request.py); the chat answer and its stream go back to
the client as a Response and its events (answer.py, events.py). A provider of the `anthropic`
dialect gets the chat body translated on to the Messages API at its edge, as for any chat client.
"""
