"""Signing in to the dashboard with a phone and a one-time SMS code (CUSTOMERS.md "Signing in").

- `ask`: the address's hourly window (lua/signin_rate.lua, 20 codes), then the phone's
  (lua/signin_issue.lua: a 60 s gap between codes, 5 codes an hour), then the SMS. A code lives
  120 s and is stored only as HMAC(secret, phone | code).
- No account enumeration: a phone with no account (or one shared by several accounts, which
  must not sign in until the operator resolves it) goes through the same throttles and is given
  a code whose stored digest ("!") can never match. The answer never waits for the provider:
  a real code is sent in the background, so known and unknown phones get the same page in the
  same time whether the provider works, fails or hangs, and on a node that just started.
- The provider's health is in Redis (`record_send`): after HEALTH_FAILURES failed sends in a
  row it counts as failing for HEALTH_PAUSE_S, and meanwhile every phone is told "SMS is
  unavailable, try again shortly" (`SmsUnavailable`) before anything is issued; the next ask
  after the pause tries again. A failed send's code is withdrawn.
- `verify`: lua/signin_verify.lua counts the try, refuses after 5 (even the right code), and
  compares in constant time; a right code is consumed, so it signs in once. Then the account:
  the phone's one account, or with UPGATE_SIGNUP=open a new one whose opening balance
  (UPGATE_SIGNUP_CREDIT_TOMAN) is recorded as an `opening` transaction by actor `signup`.
"""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
import time
from dataclasses import dataclass, field

from upgate.billing import money
from upgate.errors import Reasoned
from upgate.services import accounts, phone_index, phones
from upgate.sms import SmsFailed
from upgate.store import connection as store, keyspace

CODE_LIFE_S = 120
RESEND_GAP_S = 60
TRIES = 5
PER_PHONE_HOUR = 5
PER_ADDRESS_HOUR = 20
HOUR_MS = 3_600_000
NEVER = "!"  # a stored digest no HMAC hex can equal
HEALTH_FAILURES = 3  # failed sends in a row before the provider counts as failing
HEALTH_PAUSE_S = 60  # then every phone is told SMS is unavailable this long
HEALTH_MEMORY_S = 600  # a failure older than this (without a success since) is forgotten
SEND_TIMEOUT_S = 15.0  # a background send that outlives this is a failure (drivers time out at 10 s)

log = logging.getLogger("upgate.signin")


class SignInError(Reasoned):
    """A refused step; `wait_s` when waiting helps (also a parameter of its sentence)."""

    wait_s = 0

    def __init__(self, message: str = "", wait_s: int = 0, **params):
        super().__init__(message or type(self).__doc__, wait_s=wait_s, **params)
        self.wait_s = wait_s


class InvalidPhone(SignInError):
    """That is not a phone number."""

    reason = "phone_invalid"


class TooSoon(SignInError):
    """A code was sent less than a minute ago."""

    reason = "signin_too_soon"


class TooMany(SignInError):
    """Too many codes for this phone or from this address in the last hour."""

    reason = "signin_too_many"


class SmsUnavailable(SignInError):
    """SMS is unavailable, try again shortly."""

    reason = "sms_unavailable"


class WrongCode(SignInError):
    """The code is wrong; `params["tries_left"]` more may be made with it."""

    reason = "signin_wrong_code"


class CodeExpired(SignInError):
    """There is no live code for this phone: it expired or was used."""

    reason = "signin_expired"


class TooManyTries(SignInError):
    """Too many wrong codes: ask for a new one."""

    reason = "signin_too_many_tries"


def secret_from_pepper(pepper: str) -> bytes:
    """The HMAC key for codes: derived from the deployment's key pepper (a separate derivation,
    so a code digest reveals nothing about the pepper or key digests)."""
    return hmac.new(pepper.encode(), b"upgate sign-in code v1", hashlib.sha256).digest()


def digest(secret: bytes, phone: str, code: str) -> str:
    return hmac.new(secret, f"{phone}|{code}".encode(), hashlib.sha256).hexdigest()


def canonical_phone(text: str) -> str:
    try:
        return phones.canonical(text)
    except phones.PhoneError:
        raise InvalidPhone() from None


def normalize_code(text: str) -> str:
    """Six digits as typed (Persian or Arabic-Indic digits too, blanks ignored); anything else
    is simply wrong and still counts as a try."""
    return "".join(phones.ascii_digits(text or "").split())


# ---- the store's part (sync: the executor) ----------------------------------------------------

def _can_sign_in(client, phone: str, signup_open: bool) -> bool:
    owner = phone_index.owner(client, phone)
    if owner == phone_index.SHARED:
        return False
    return owner is not None or signup_open


def sms_paused_s(client, now_ms: int | None = None) -> int:
    """Seconds the provider still counts as failing (0: try it)."""
    until = client.hget(keyspace.sms_health(), "until_ms")
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    return _seconds(int(until) - now_ms) if until and int(until) > now_ms else 0


def record_send(client, ok: bool, now_ms: int | None = None) -> None:
    """A background send's outcome, for every node: a success forgets the failures; the
    HEALTH_FAILURES-th failure in a row (and each one after) pauses sending HEALTH_PAUSE_S."""
    key = keyspace.sms_health()
    if ok:
        client.delete(key)
        return
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    pipe = client.pipeline(transaction=True)
    pipe.hincrby(key, "failures", 1)
    pipe.pexpire(key, HEALTH_MEMORY_S * 1000)
    failures, _ = pipe.execute()
    if int(failures) >= HEALTH_FAILURES:
        client.hset(key, "until_ms", now_ms + HEALTH_PAUSE_S * 1000)


def issue(client, secret: bytes, phone: str, address: str, signup_open: bool) -> str | None:
    """Throttle and store a new code for `phone` (canonical); returns it, or None when it is
    a code that can never verify (no account and sign-up closed, or a shared phone). While the
    provider is failing, `SmsUnavailable` to every phone, before anything is counted."""
    paused = sms_paused_s(client)
    if paused:
        raise SmsUnavailable(wait_s=paused)
    status, wait = store.script("signin_rate").call_sync(
        client, [keyspace.signin_address(address)], [PER_ADDRESS_HOUR, HOUR_MS, secrets.token_hex(8), 0])
    if int(status):
        raise TooMany(wait_s=_seconds(wait))
    real = _can_sign_in(client, phone, signup_open)
    code = f"{secrets.randbelow(10 ** 6):06d}"
    status, wait = store.script("signin_issue").call_sync(
        client, [keyspace.signin_code(phone), keyspace.signin_sent(phone)],
        [digest(secret, phone, code) if real else NEVER, CODE_LIFE_S * 1000, RESEND_GAP_S * 1000,
         PER_PHONE_HOUR, HOUR_MS, 0, secrets.token_hex(8)])
    if int(status) == 1:
        raise TooSoon(wait_s=_seconds(wait))
    if int(status) == 2:
        raise TooMany(wait_s=_seconds(wait))
    return code if real else None


def withdraw(client, phone: str) -> None:
    """The SMS did not go out: drop the code (it was never delivered). The send still counts
    against the hourly caps, which is what keeps a failing provider from being hammered. (A
    background send ends within SEND_TIMEOUT_S, well inside the 60 s resend gap: it can never
    drop a newer code of the same phone.)"""
    client.delete(keyspace.signin_code(phone))


def check(client, secret: bytes, phone: str, code: str) -> None:
    """Try `code`; returns when right (the code is consumed), else the refusal."""
    status, left = store.script("signin_verify").call_sync(
        client, [keyspace.signin_code(phone)], [digest(secret, phone, code), TRIES, 0])
    status = int(status)
    if status == 1 and int(left) <= 0:  # that was the last try: the code is dead now
        raise WrongCode(reason="signin_last_try")
    if status == 1:
        raise WrongCode(tries_left=int(left))
    if status == 2:
        raise CodeExpired()
    if status == 3:
        raise TooManyTries()


def account_for(client, phone: str, signup_open: bool, signup_credit_toman: str) -> str:
    """The verified phone's account; with sign-up open, a new one when it has none."""
    owner = phone_index.owner(client, phone)
    if owner == phone_index.SHARED or (owner is None and not signup_open):
        raise CodeExpired()  # unreachable for a real code; said the way an unknown phone's is
    if owner is not None:
        return owner
    try:
        return accounts.create_account(client, phone, money.parse_toman(signup_credit_toman), actor="signup")
    except accounts.PhoneInUse:  # a second sign-up for the same phone won the race: the same account
        return phone_index.owner(client, phone)


def _seconds(wait_ms) -> int:
    return max(1, -(-int(wait_ms) // 1000))


# ---- the flow (async: the dashboard's handlers) ------------------------------------------------

@dataclass
class SignIn:
    """One per node: the SMS driver, the secret, the sign-up policy, and the sends under way
    (in the background: the answer never waits for the provider)."""

    sender: object
    secret: bytes
    signup_open: bool = False
    signup_credit_toman: str = "0"
    sending: set = field(default_factory=set)
    on_send: object = None  # outcome ("sent", "failed", "paused") → None: the node's /metrics

    async def ask(self, call, phone_text: str, address: str, text_for) -> str:
        """Issue a code to the phone as typed and start its SMS; returns the canonical phone
        at once, known or not. `call` runs a sync store function in the executor;
        `text_for(code)` is the message in the page's language."""
        phone = canonical_phone(phone_text)
        try:
            code = await call(issue, self.secret, phone, address, self.signup_open)
        except SmsUnavailable:
            self._count("paused")
            raise
        if code is not None:
            task = asyncio.get_running_loop().create_task(self._send(call, phone, code, text_for(code)))
            self.sending.add(task)
            task.add_done_callback(self.sending.discard)
        return phone

    async def _send(self, call, phone: str, code: str, text: str) -> None:
        ok = False
        try:
            await asyncio.wait_for(self.sender.send_code(phone, code, text), SEND_TIMEOUT_S)
            ok = True
        except (SmsFailed, asyncio.TimeoutError) as e:  # (the driver logged the provider's status)
            log.warning("sign-in code not sent (%s)", type(e).__name__)
        except Exception:  # noqa: BLE001 (a background task: nobody else would see it)
            log.exception("sign-in code not sent")
        self._count("sent" if ok else "failed")
        try:
            if not ok:
                await call(withdraw, phone)
            await call(record_send, ok)
        except Exception:  # noqa: BLE001
            log.exception("the SMS provider's health could not be recorded")

    def _count(self, outcome: str) -> None:
        if self.on_send is not None:
            self.on_send(outcome)

    async def drain(self) -> None:
        """Wait for the sends under way (shutdown, tests)."""
        while self.sending:
            await asyncio.gather(*list(self.sending), return_exceptions=True)

    async def verify(self, call, phone_text: str, code_text: str) -> tuple[str, str]:
        """(account id, canonical phone) for a right code, else the refusal."""
        phone = canonical_phone(phone_text)
        await call(check, self.secret, phone, normalize_code(code_text))
        account_id = await call(account_for, phone, self.signup_open, self.signup_credit_toman)
        return account_id, phone
