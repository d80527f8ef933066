"""Sending a sign-in code by SMS: one small interface, one driver per provider.

    sender = sms.make(settings)          # UPGATE_SMS=log|kavenegar|smsir
    await sender.send_code("+989121234567", "123456", text)

A driver either delivers (returns) or raises `SmsFailed` (the provider refused, timed out or
answered something else): the caller then says "try again", never "sent". Drivers see only the
phone and the code, never an account. Every HTTP call has a connect and a total timeout.
"""
from __future__ import annotations

from upgate.sms.base import SmsFailed, Sender

DRIVERS = ("log", "kavenegar", "smsir")


def make(name: str, *, api_key: str = "", template: str = "", url: str = "",
         timeout_s: float = 10.0, parameter: str = "CODE") -> Sender:
    """The driver named by UPGATE_SMS, configured (UPGATE_SMS_API_KEY, UPGATE_SMS_TEMPLATE,
    UPGATE_SMS_URL overriding the provider's base address). `parameter`: the name of SMS.ir's
    template parameter that carries the code (CODE; the low-balance alert's template: AMOUNT)."""
    if name == "log":
        from upgate.sms.log import LogSender
        return LogSender()
    if name == "kavenegar":
        from upgate.sms.kavenegar import Kavenegar
        return Kavenegar(api_key, template, url or Kavenegar.BASE_URL, timeout_s)
    if name == "smsir":
        from upgate.sms.smsir import SmsIr
        return SmsIr(api_key, template, url or SmsIr.BASE_URL, timeout_s, parameter)
    raise ValueError(f"UPGATE_SMS must be one of {', '.join(DRIVERS)}, got {name!r}")


__all__ = ["make", "Sender", "SmsFailed", "DRIVERS"]
