"""The payment gateway drivers and the one function that builds them from the settings."""
from __future__ import annotations

from upgate.payments.errors import PaymentsOff
from upgate.payments.gateways.base import Callback, Gateway, Verified, mask_pan

__all__ = ["Callback", "Gateway", "Verified", "build", "mask_pan"]


def build(settings, client, name: str | None = None) -> Gateway:
    """The driver of gateway `name` (default: UPGATE_PAYMENTS) with its settings; PaymentsOff
    when payments are off or that gateway is not set up on this node."""
    name = name or settings.payments
    if name == "zarinpal" and settings.zarinpal_merchant_id:
        from upgate.payments.gateways.zarinpal import Zarinpal

        return Zarinpal(settings.zarinpal_merchant_id, settings.zarinpal_url, settings.payments_timeout_s)
    if name == "zibal" and settings.zibal_merchant:
        from upgate.payments.gateways.zibal import Zibal

        return Zibal(settings.zibal_merchant, settings.zibal_url, settings.payments_timeout_s)
    if name == "fake" and settings.payments == "fake":  # never beside a real gateway
        from upgate.payments.gateways.fake import Fake

        return Fake(client, settings.public_url)
    raise PaymentsOff(f"payment gateway {name!r} is not set up on this node (UPGATE_PAYMENTS={settings.payments})")
