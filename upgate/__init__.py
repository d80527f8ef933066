"""upgate: an OpenAI-compatible LLM gateway billed from prepaid toman wallets."""

__version__ = "0.1.0"
