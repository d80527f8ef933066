"""One frozen settings object, read from the environment once at start-up.

Timings default to the spec's values; tests and operators shorten them through env vars.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace


def _float(env: dict, name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a number of seconds, got {raw!r}") from None
    if value <= 0:
        raise SettingsError(f"{name} must be positive, got {raw!r}")
    return value


def _int(env: dict, name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise SettingsError(f"{name} must be an integer, got {raw!r}") from None


def _positive(env: dict, name: str, default: int) -> int:
    value = _int(env, name, default)
    if value < 1:
        raise SettingsError(f"{name} must be a whole number of at least 1, got {env.get(name)!r}")
    return value


class SettingsError(ValueError):
    """A setting in the environment is malformed; the message names it."""


@dataclass(frozen=True)
class Settings:
    redis_url: str = "redis://127.0.0.1:6379/0"
    providers_path: str = "providers.toml"
    key_pepper: str = ""
    topup_url: str = "https://example.invalid/topup"
    port: int = 8080
    upstream_silence_s: float = 120.0
    lease_s: float = 30.0
    cooldown_s: float = 30.0
    shutdown_grace_s: float = 25.0
    free_quota_default: int = 50
    metrics_token: str = ""
    metrics_public: bool = False  # /metrics without a token (UPGATE_METRICS_PUBLIC=1)
    journal_path: str = "upgate-settle.journal"
    max_streams: int = 10
    responses: bool = False  # POST /v1/responses served (UPGATE_RESPONSES=on); off: the spec's 404
    cooldown_strikes: int = 3
    route_failures: int = 3  # failures in a row that cool a route (UPGATE_ROUTE_FAILURES)
    route_cooldown_s: float = 30.0  # how long a cold route or a refused pooled key stays out
    keepalive_s: float = 15.0
    max_body_bytes: int = 20 * 1024 * 1024
    # webhooks (docs/webhooks.md): on when both the URL and the secret are set
    webhook_url: str = ""
    webhook_secret: str = ""
    webhook_timeout_s: float = 10.0  # one attempt
    webhook_retry_s: float = 86400.0  # how long a failing event is retried, from its first attempt
    webhook_backoff_s: float = 5.0  # the first retry's delay; doubled each time (with jitter)
    webhook_backoff_max_s: float = 900.0
    webhook_claim_s: float = 60.0  # an attempt pending this long on a silent node goes to another
    webhook_poll_s: float = 1.0  # how often the mover and the retry schedule are looked at
    trusted_proxies: str = ""  # the auth throttles: peers whose X-Forwarded-For is believed (client_address.py)
    request_log_days: int = 7  # request records are kept this many days …
    request_log_max: int = 10_000  # … and at most this many per account
    # the customer dashboard (docs/dashboard.md, CUSTOMERS.md)
    public_url: str = ""  # e.g. https://api.example.ir: the dashboard's absolute links, topup_url
    sms: str = "log"  # log | kavenegar | smsir
    sms_api_key: str = ""
    sms_template: str = ""
    sms_url: str = ""  # a provider's base address (tests: a loopback fake)
    sms_alert_template: str = ""  # the low-balance SMS's template (kavenegar/smsir); "" = no alert SMS
    signup_open: bool = False  # UPGATE_SIGNUP=open: a verified phone without an account gets one
    signup_credit_toman: str = "0"  # its opening balance
    # payments (docs/payments.md): off | zarinpal | zibal | fake
    payments: str = "off"
    zarinpal_merchant_id: str = ""
    zarinpal_url: str = "https://payment.zarinpal.com"
    zibal_merchant: str = ""
    zibal_url: str = "https://gateway.zibal.ir"
    topup_min_toman: int = 10_000
    topup_max_toman: int = 50_000_000
    payments_timeout_s: float = 10.0  # one call to the payment gateway (at most 30)
    payments_reconcile_s: float = 60.0  # how often open orders are verified again
    payments_expire_s: float = 1800.0  # an order unpaid this long is expired
    # the printable receipt of a paid top-up (docs/dashboard.md "Receipts")
    business_name: str = ""  # UPGATE_BUSINESS_NAME
    business_address: str = ""  # UPGATE_BUSINESS_ADDRESS
    vat_percent: str = ""  # UPGATE_VAT_PERCENT, e.g. "10": the paid amount includes it; "" = no VAT line
    tax_id: str = ""  # UPGATE_TAX_ID (required with a VAT percent)
    extra: dict = field(default_factory=dict)

    @property
    def renew_s(self) -> float:
        """Leases are renewed at a third of their length, so one missed renewal is harmless."""
        return self.lease_s / 3

    @property
    def reap_s(self) -> float:
        return min(5.0, self.lease_s / 6)

    @property
    def topup_url_is_placeholder(self) -> bool:
        return self.topup_url == Settings.topup_url

    @property
    def webhooks_on(self) -> bool:
        return bool(self.webhook_url and self.webhook_secret)

    def with_(self, **changes) -> "Settings":
        return replace(self, **changes)


def _webhook_url(env: dict) -> str:
    url = env.get("UPGATE_WEBHOOK_URL", "").strip()
    if url and not url.startswith(("http://", "https://")):
        raise SettingsError(f"UPGATE_WEBHOOK_URL must be an http:// or https:// URL, got {url!r}")
    return url


PAYMENT_GATEWAYS = ("off", "zarinpal", "zibal", "fake")


def _payments(env: dict) -> dict:
    """The payment settings (CUSTOMERS.md, "Paying"), checked at start-up."""
    gateway = (env.get("UPGATE_PAYMENTS") or "off").strip().lower()
    if gateway not in PAYMENT_GATEWAYS:
        raise SettingsError(f"UPGATE_PAYMENTS must be one of {', '.join(PAYMENT_GATEWAYS)}, got {gateway!r}")
    low = _positive(env, "UPGATE_TOPUP_MIN_TOMAN", Settings.topup_min_toman)
    high = _positive(env, "UPGATE_TOPUP_MAX_TOMAN", Settings.topup_max_toman)
    if low > high:
        raise SettingsError(f"UPGATE_TOPUP_MIN_TOMAN ({low}) is above UPGATE_TOPUP_MAX_TOMAN ({high})")
    timeout = _float(env, "UPGATE_PAYMENTS_TIMEOUT_S", Settings.payments_timeout_s)
    if timeout > 30:
        raise SettingsError(f"UPGATE_PAYMENTS_TIMEOUT_S must be at most 30 (the callback page waits for it), got {timeout:g}")
    return dict(
        payments=gateway,
        zarinpal_merchant_id=env.get("UPGATE_ZARINPAL_MERCHANT_ID", "").strip(),
        zarinpal_url=(env.get("UPGATE_ZARINPAL_URL") or Settings.zarinpal_url).rstrip("/"),
        zibal_merchant=env.get("UPGATE_ZIBAL_MERCHANT", "").strip(),
        zibal_url=(env.get("UPGATE_ZIBAL_URL") or Settings.zibal_url).rstrip("/"),
        topup_min_toman=low, topup_max_toman=high, payments_timeout_s=timeout,
        payments_reconcile_s=_float(env, "UPGATE_PAYMENTS_RECONCILE_S", Settings.payments_reconcile_s),
        payments_expire_s=_float(env, "UPGATE_PAYMENTS_EXPIRE_S", Settings.payments_expire_s),
    )


def from_env(env: dict | None = None) -> Settings:
    env = os.environ if env is None else env
    pay = _payments(env)
    webhook_timeout_s = _float(env, "UPGATE_WEBHOOK_TIMEOUT_S", 10.0)
    webhook_claim_s = _float(env, "UPGATE_WEBHOOK_CLAIM_S", 60.0)
    if webhook_claim_s <= webhook_timeout_s:  # else a live node's attempt would be taken from it
        raise SettingsError(f"UPGATE_WEBHOOK_CLAIM_S ({webhook_claim_s:g}) must be longer than "
                            f"UPGATE_WEBHOOK_TIMEOUT_S ({webhook_timeout_s:g})")
    return Settings(
        redis_url=env.get("UPGATE_REDIS_URL") or Settings.redis_url,
        providers_path=env.get("UPGATE_PROVIDERS") or Settings.providers_path,
        key_pepper=env.get("UPGATE_KEY_PEPPER", ""),
        # the dashboard's top-up page once UPGATE_PUBLIC_URL says where it is; the operator's own wins
        topup_url=env.get("UPGATE_TOPUP_URL") or (_public_url(env) + "/dashboard/topup" if _public_url(env)
                                                   else Settings.topup_url),
        port=_int(env, "PORT", Settings.port),
        upstream_silence_s=_float(env, "UPGATE_UPSTREAM_SILENCE_S", 120.0),
        lease_s=_float(env, "UPGATE_LEASE_S", 30.0),
        cooldown_s=_float(env, "UPGATE_COOLDOWN_S", 30.0),
        route_failures=_positive(env, "UPGATE_ROUTE_FAILURES", Settings.route_failures),
        route_cooldown_s=_float(env, "UPGATE_ROUTE_COOLDOWN_S", Settings.route_cooldown_s),
        shutdown_grace_s=_float(env, "UPGATE_SHUTDOWN_GRACE_S", 25.0),
        free_quota_default=_int(env, "UPGATE_FREE_QUOTA_DEFAULT", 50),
        metrics_token=env.get("UPGATE_METRICS_TOKEN", ""),
        metrics_public=env.get("UPGATE_METRICS_PUBLIC", "") == "1",
        journal_path=env.get("UPGATE_JOURNAL") or Settings.journal_path,
        responses=_on_off(env, "UPGATE_RESPONSES", Settings.responses),
        webhook_url=_webhook_url(env),
        webhook_secret=env.get("UPGATE_WEBHOOK_SECRET", ""),
        webhook_timeout_s=webhook_timeout_s,
        webhook_retry_s=_float(env, "UPGATE_WEBHOOK_RETRY_S", 86400.0),
        webhook_backoff_s=_float(env, "UPGATE_WEBHOOK_BACKOFF_S", 5.0),
        webhook_backoff_max_s=_float(env, "UPGATE_WEBHOOK_BACKOFF_MAX_S", 900.0),
        webhook_claim_s=webhook_claim_s,
        webhook_poll_s=_float(env, "UPGATE_WEBHOOK_POLL_S", 1.0),
        trusted_proxies=_proxies(env.get("UPGATE_TRUSTED_PROXIES", "")),
        request_log_days=_positive(env, "UPGATE_REQUEST_LOG_DAYS", Settings.request_log_days),
        request_log_max=_positive(env, "UPGATE_REQUEST_LOG_MAX", Settings.request_log_max),
        **_dashboard(env),
        **_receipt(env),
        **pay,
    )


def _on_off(env: dict, name: str, default: bool) -> bool:
    value = env.get(name, "").strip().lower()
    if not value:
        return default
    if value in ("on", "1", "true", "yes"):
        return True
    if value in ("off", "0", "false", "no"):
        return False
    raise SettingsError(f"{name} must be on or off, got {value!r}")


def _public_url(env: dict) -> str:
    public = env.get("UPGATE_PUBLIC_URL", "").strip().rstrip("/")
    if public and not public.startswith(("http://", "https://")):
        raise SettingsError(f"UPGATE_PUBLIC_URL must be an http:// or https:// URL, got {public!r}")
    return public


def _dashboard(env: dict) -> dict:
    from decimal import Decimal, InvalidOperation

    public = _public_url(env)
    sms = env.get("UPGATE_SMS", "").strip() or "log"
    if sms not in ("log", "kavenegar", "smsir"):
        raise SettingsError(f"UPGATE_SMS must be log, kavenegar or smsir, got {sms!r}")
    signup = env.get("UPGATE_SIGNUP", "").strip() or "closed"
    if signup not in ("open", "closed"):
        raise SettingsError(f"UPGATE_SIGNUP must be open or closed, got {signup!r}")
    credit = env.get("UPGATE_SIGNUP_CREDIT_TOMAN", "").strip() or "0"
    try:
        if Decimal(credit) < 0 or not Decimal(credit).is_finite():
            raise InvalidOperation
    except InvalidOperation:
        raise SettingsError(f"UPGATE_SIGNUP_CREDIT_TOMAN must be a toman amount of 0 or more, got {credit!r}") from None
    return {"public_url": public, "sms": sms, "sms_api_key": env.get("UPGATE_SMS_API_KEY", ""),
            "sms_template": env.get("UPGATE_SMS_TEMPLATE", ""), "sms_url": env.get("UPGATE_SMS_URL", "").strip(),
            "sms_alert_template": env.get("UPGATE_SMS_ALERT_TEMPLATE", "").strip(),
            "signup_open": signup == "open", "signup_credit_toman": credit}


def _receipt(env: dict) -> dict:
    """The business on a top-up's receipt; a VAT percent (0 < p <= 100, at most two decimals)
    needs the tax id that must print beside it."""
    from decimal import Decimal, InvalidOperation

    vat = env.get("UPGATE_VAT_PERCENT", "").strip()
    tax_id = env.get("UPGATE_TAX_ID", "").strip()
    if vat:
        try:
            rate = Decimal(vat)
            if not (rate.is_finite() and 0 < rate <= 100 and rate == rate.quantize(Decimal("0.01"))):
                raise InvalidOperation
        except InvalidOperation:
            raise SettingsError(f"UPGATE_VAT_PERCENT must be a percentage above 0 and at most 100, got {vat!r}") from None
        if not tax_id:
            raise SettingsError("UPGATE_VAT_PERCENT needs UPGATE_TAX_ID: a receipt with VAT must show the tax id")
    return {"business_name": env.get("UPGATE_BUSINESS_NAME", "").strip(),
            "business_address": env.get("UPGATE_BUSINESS_ADDRESS", "").strip(),
            "vat_percent": vat, "tax_id": tax_id}


def _proxies(raw: str) -> str:
    """`*` or comma-separated addresses/CIDRs; refused at start-up when one is malformed."""
    import ipaddress

    if raw.strip() != "*":
        for part in raw.split(","):
            try:
                if part.strip():
                    ipaddress.ip_network(part.strip(), strict=False)
            except ValueError:
                raise SettingsError(f"UPGATE_TRUSTED_PROXIES: {part.strip()!r} is not an address or CIDR") from None
    return raw.strip()


# the pepper `upgate serve --insecure-dev` uses (never in production)
DEV_PEPPER = "upgate-insecure-dev-pepper"
