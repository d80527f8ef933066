"""What can go wrong with a payment, as named exceptions. Each driver maps its gateway's codes to
these in one table; the service decides what each means for the order:

- `GatewayUnavailable`: no answer, a timeout, a 5xx, a reply that is not the gateway's JSON.
  Nothing is known: the order stays pending and reconciliation asks again.
- `NotPaid`: the gateway says this payment was not (or not yet) made: nothing to credit.
- `AmountMismatch`: the gateway reports another amount than the order's: never credited.
- `GatewayRefused`: the gateway refused the call itself (merchant id, validation, limits).
"""
from __future__ import annotations


class PaymentError(Exception):
    """Any payment failure. `code` is the gateway's own code (logged for the operator, never
    shown to a customer)."""

    outcome = "error"

    def __init__(self, message: str, code=None):
        super().__init__(message)
        self.code = code


class GatewayUnavailable(PaymentError):
    """The gateway did not answer usefully (timeout, connection refused, 5xx, not its JSON)."""

    outcome = "unavailable"


class NotPaid(PaymentError):
    """The gateway's verify says the payment was not made (cancelled, failed, unknown)."""

    outcome = "not_paid"


class AmountMismatch(PaymentError):
    """The amount the gateway reports is not the order's."""

    outcome = "amount_mismatch"


class GatewayRefused(PaymentError):
    """The gateway refused the request (bad merchant id, validation, limits)."""

    outcome = "refused"


class PaymentsOff(PaymentError):
    """UPGATE_PAYMENTS is off, or the order's gateway is not configured on this node."""

    outcome = "off"
