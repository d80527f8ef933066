"""The one catalogue of refusals as a person reads them. A service refusal (upgate.errors.Reasoned)
carries a `reason` and its `params`; `say(e, lang)` is its sentence in the reader's language,
through the same locale files as every page (locale/fa.csv). The JSON APIs never come here: they
keep the refusal's English one-liner as `message` and its machine `code`.

Parameters are formatted by their name, so no face formats them by hand:
`*_micro` (micro-toman) and `*_toman` → toman with separators; `*_ms` (unix ms) → a Jalali date
and time in Tehran; `month` ("1405-09") → "آذر ۱۴۰۵"; other numbers → counts; the rest (a model
id the person typed) as it is. Digits follow the language. No sentence names a field id, an ISO
time or an internal unit: tests/i18n/test_refusal_catalogue.py walks every reason the service
layer raises and checks its Persian.
"""
from __future__ import annotations

from upgate.i18n import N_, dates, locale, numbers

# reason → the English sentence (its message id); N_ marks it for the catalogue check
TEXT = {
    "invalid": N_("That value was not accepted."),
    "not_found": N_("Not found."),
    # keys
    "rpm_range": N_("Requests per minute must be a whole number from {low} to {high}."),
    "amount_malformed": N_("Type an amount in toman, like 50,000 (Persian or Latin digits, separators allowed)."),
    "amount_negative": N_("The amount must not be negative."),
    "amount_too_large": N_("The amount is too large: at most {high_micro} toman."),
    "amount_range": N_("That amount is out of the range we accept."),
    "amount_zero": N_("An amount of zero changes nothing."),
    "models_malformed": N_("List the allowed models separated by commas."),
    "models_too_many": N_("At most {high} models can be allowed for one key."),
    "model_malformed": N_("«{model}» is not a model id: ids look like provider/model."),
    "model_unknown": N_("«{model}» is not a model we offer: see the list of models."),
    "models_empty": N_("Name at least one model, or leave the field empty to allow every model."),
    "expiry_past": N_("The expiry {when_ms} has already passed: choose a day in the future."),
    "expiry_too_far": N_("The expiry must be within {years} years from today."),
    "date_malformed": N_("That is not a date: type a Jalali date like 1405/12/29."),
    "name_malformed": N_("The name must be text."),
    "name_too_long": N_("The name may be at most {high} characters long."),
    "name_control": N_("The name must not contain control characters."),
    "nothing_to_change": N_("Nothing to change: fill in at least one setting."),
    "key_unknown": N_("No such key."),
    "key_revoked": N_("This key is revoked, and a revoked key never comes back: create a new one."),
    "prefix_malformed": N_("A key prefix looks like sk-up-AbCd."),
    "pepper_missing": N_("The gateway is not set up to make keys yet. Please tell support."),
    # accounts, money, lists
    "account_unknown": N_("No such account."),
    "phone_invalid": N_("That is not a mobile number. Type it like 09121234567."),
    "phone_in_use": N_("Another account already has this phone number."),
    "quota_range": N_("Free requests per day must be a whole number from 0 to {high}."),
    "cursor_invalid": N_("That page link is no longer valid: start again from the first page."),
    "limit_range": N_("Ask for 1 to {high} items at a time."),
    "ref_invalid": N_("The reference must be 1 to {high} characters, without control characters."),
    "note_missing": N_("An adjustment needs a note saying why."),
    "note_too_long": N_("The note may be at most {high} characters long."),
    "idempotency_conflict": N_("This reference was already used with another amount or kind: nothing was changed."),
    "order_unknown": N_("No such order."),
    "order_mismatch": N_("The order does not match this amount and reference: nothing was credited."),
    "request_unknown": N_("No request of yours has this id (or it is older than we keep)."),
    "month_malformed": N_("That is not a Jalali month."),
    "month_not_begun": N_("{month} has not begun yet."),
    "month_too_old": N_("A statement covers at most the last {n} months."),
    "month_before_account": N_("{month} is before this account was opened."),
    "range_backwards": N_("The end date is before the start date."),
    "range_too_long": N_("A report covers at most {n} days."),
    "filter_invalid": N_("That filter is not one the page offers: choose from its lists."),
    "phone_same": N_("That is already your number."),
    # the support desk (notes, reasons, searches, phone changes)
    "note_text_missing": N_("Write the note's text."),
    "text_control": N_("The text must not contain control characters."),
    "reason_too_long": N_("The reason may be at most {high} characters long."),
    "phone_changed": N_("This account's phone was changed meanwhile: look again, then retry."),
    "date_out_of_range": N_("That date is too far from today: type a Jalali date like 1405/12/29."),
    "status_invalid": N_("Type an HTTP status as a number from 100 to 599, like 402."),
    # operators' own
    "token_name_invalid": N_("An admin token's name is 1 to 64 letters, digits, dots, dashes or underscores."),
    "token_name_taken": N_("An admin token with this name exists: revoke it first."),
    "token_unknown": N_("No admin token has this name."),
    "sync_invalid": N_("The price sync's settings are not valid: nothing was written."),
    "price_change_too_large": N_("A price would move further than the allowed change: nothing was written."),
    # top-up and suspension
    "topup_malformed": N_("Type a whole number of toman."),
    "topup_range": N_("A top-up is from {low_toman} to {high_toman} toman."),
    "topup_pending": N_("{n} top-ups are already waiting for payment. Pay or wait for one of them first."),
    "topup_too_many": N_("Too many payments were started or checked in the last hour. Please try again in {wait_s} seconds."),
    "suspended": N_("This account is suspended: you can see everything but change nothing. Please contact support."),
    # signing in
    "signin_too_soon": N_("A code was sent less than a minute ago. Please wait {wait_s} seconds before asking again."),
    "signin_too_many": N_("Too many codes were asked for. Please try again in {wait_s} seconds."),
    "sms_unavailable": N_("SMS is unavailable, try again shortly."),
    "signin_wrong_code": N_("That code is not right. Check the text message and try again: {tries_left} tries left."),
    "signin_last_try": N_("That code is not right, and that was the last try: ask for a new code."),
    "signin_expired": N_("That code has expired or was already used. Ask for a new one."),
    "signin_too_many_tries": N_("Too many wrong codes. Ask for a new code."),
}


# what a request's answer was, as its record's `code` says it (upgate/errors.py's codes)
OUTCOMES = {
    None: N_("Answered"),
    "invalid_request": N_("The request was malformed"),
    "invalid_api_key": N_("The key was invalid, revoked or expired"),
    "insufficient_balance": N_("Not enough balance: top up, or ask for a smaller max_tokens"),
    "account_suspended": N_("The account is suspended"),
    "model_not_allowed": N_("This key may not use that model"),
    "model_not_found": N_("No such model"),
    "request_too_large": N_("The request was too large"),
    "rate_limit_exceeded": N_("Too many requests per minute for this key"),
    "key_monthly_limit_reached": N_("The key's monthly limit was reached"),
    "too_many_concurrent_streams": N_("Too many open streams"),
    "free_quota_exceeded": N_("Today's free requests are used up"),
    "free_capacity_exhausted": N_("The free model is busy right now"),
    "upstream_rate_limited": N_("The model is busy right now"),
    "upstream_error": N_("The model's provider failed to answer; nothing was charged"),
    "upstream_unavailable": N_("The model's provider could not be reached; nothing was charged"),
    "upstream_timeout": N_("The model sent nothing for too long; nothing was charged"),
    "pricing_unavailable": N_("The service was not ready; nothing was charged"),
    "service_unavailable": N_("The service was not ready; nothing was charged"),
    "internal_error": N_("Something went wrong on our side; nothing was charged"),
    "": N_("The request was refused"),  # a code this list does not know
}


def outcome(code: str | None, status: int | None, lang: str, translate=None) -> str:
    """A request record's outcome in words (never its machine code)."""
    translate = translate or locale(lang).translate
    if code in OUTCOMES:
        return translate(OUTCOMES[code])
    return translate(OUTCOMES[None] if (status or 200) < 400 else OUTCOMES[""])


def _value(name: str, value, lang: str) -> str:
    if value is None:
        return numbers.DASH
    if name.endswith("_micro"):
        return numbers.micro_toman(int(value), lang)
    if name.endswith("_toman"):
        return numbers.toman(value, lang)
    if name.endswith("_ms"):
        return dates.when(int(value), lang)
    if name == "month":
        return dates.month_name(str(value), lang)
    if isinstance(value, int) and not isinstance(value, bool):
        return numbers.count(value, lang)
    return "\u2068" + str(value) + "\u2069"  # what the person typed, isolated: a Latin id inside Persian


def render(reason: str, params: dict, lang: str, translate=None) -> str:
    """The sentence of `reason` with `params`, in `lang` (`translate`: the face's own
    locale.translate; default the catalogue's)."""
    translate = translate or locale(lang).translate
    text = translate(TEXT.get(reason, TEXT["invalid"]))
    values = {k: _value(k, v, lang) for k, v in params.items()}
    try:
        return text.format(**values)
    except (KeyError, IndexError, ValueError):  # a parameter missing: the sentence stays whole
        return translate(TEXT["invalid"])


def say(e: BaseException, lang: str, translate=None) -> str:
    """A refusal in the reader's language: its reason's sentence, else the generic one (never
    the English internals of an exception that carries no reason)."""
    return render(getattr(e, "reason", "invalid"), getattr(e, "params", {}) or {}, lang, translate)
