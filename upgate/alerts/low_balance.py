"""The low-balance SMS: one text message to the account's phone each time a charge takes its
available balance below the threshold it set (`low_balance_toman`).

*When* is decided where the money moves: settle.lua's low_balance_check (lua/_lib.lua) fires
once per crossing (the wallet's `low_fired`; a top-up back above the threshold, or a new
threshold, arms it again) and says so in its answer; the ledger then calls `fire(account_id)`.
Nothing is added to the request's two round trips: the send runs in the background after the
answer, and only for the one request that crossed.

*How often*, whatever happens: the sign-in codes' per-phone cap (5 an hour, signin.py) on its
own log (`keyspace.alert_sent`), counted in Lua (signin_rate.lua), so a threshold toggled in a
loop cannot make the node text anyone more than that.

*Through what*: the configured SMS driver (UPGATE_SMS). `log` writes the message's line; the
template providers need UPGATE_SMS_ALERT_TEMPLATE, a template of their own whose one token
(Kavenegar `%token%`, SMS.ir's parameter AMOUNT) is the threshold in whole toman; without it no
alert SMS is sent (the wallet page still warns, and the webhook still fires). A provider that
fails is logged (never the phone), and the crossing is not tried again.
"""
from __future__ import annotations

import asyncio
import logging
import secrets

from upgate import i18n
from upgate.billing import money
from upgate.services import signin
from upgate.sms import SmsFailed
from upgate.store import connection as store, keyspace

log = logging.getLogger("upgate.alerts")

TEXT = i18n.N_("upgate: your available balance is below {amount} toman. Top up to keep your requests working.")


class LowBalanceAlerts:
    def __init__(self, client, sender, enabled: bool):
        self.client, self.sender, self.enabled = client, sender, enabled
        self._tasks: set[asyncio.Task] = set()
        self.sent = 0  # for tests and /metrics-like curiosity: messages handed to the provider

    def fire(self, account_id: str) -> None:
        """A settlement crossed the threshold: text the account in the background."""
        if not self.enabled:
            return
        task = asyncio.get_running_loop().create_task(self.send(account_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def send(self, account_id: str) -> bool:
        """True when the message went to the provider; False when nothing was sent (no phone or
        threshold any more, throttled, the provider refused)."""
        try:
            phone, threshold = await self.client.hmget(keyspace.wallet(account_id), "phone", "low_balance")
            if not phone or not threshold:
                return False
            phone, micro = store.text(phone), int(store.text(threshold))
            status, _wait = await store.script("signin_rate")(
                self.client, [keyspace.alert_sent(phone)],
                [signin.PER_PHONE_HOUR, signin.HOUR_MS, secrets.token_hex(8), 0])
            if int(status):
                log.warning("low-balance SMS for account %s not sent: the phone's hourly cap is reached", account_id)
                return False
            whole = str(money.to_decimal(micro).to_integral_value())
            text = i18n.locale(i18n.FA).translate(TEXT).format(amount=i18n.numbers.toman(whole, i18n.FA))
            await self.sender.send_code(phone, whole, text)
            self.sent += 1
            return True
        except SmsFailed as e:
            log.warning("low-balance SMS for account %s not sent: %s", account_id, e)
        except Exception as e:  # the store or anything else: an alert never takes the node down
            log.warning("low-balance SMS for account %s not sent (%s)", account_id, type(e).__name__)
        return False

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def build(settings, client) -> LowBalanceAlerts:
    """The node's alerts: the log driver always sends; a template provider only with
    UPGATE_SMS_ALERT_TEMPLATE."""
    from upgate import sms

    if settings.sms == "log":
        return LowBalanceAlerts(client, sms.make("log"), True)
    if not settings.sms_alert_template:
        return LowBalanceAlerts(client, None, False)
    sender = sms.make(settings.sms, api_key=settings.sms_api_key, template=settings.sms_alert_template,
                      url=settings.sms_url, parameter="AMOUNT")
    return LowBalanceAlerts(client, sender, True)
