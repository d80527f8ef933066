"""Every refusal the service layer raises has a sentence in the one catalogue
(upgate/i18n/refusals.py) and a Persian rendering a person can read: Persian words and digits,
amounts in toman, Jalali dates, and no field id, ISO time or English internals. The walk reads
each `raise` of upgate/services/ (and the payments and price-sync refusals the faces show), so a
new refusal without a reason, or with a reason the catalogue lacks, fails here."""
from __future__ import annotations

import ast
import builtins
import importlib
import re
from pathlib import Path

import pytest

from upgate.errors import Reasoned
from upgate.i18n import refusals

ROOT = Path(__file__).resolve().parents[2]
WALKED = [*sorted((ROOT / "upgate" / "services").glob("*.py")),
          ROOT / "upgate" / "payments" / "service.py", ROOT / "upgate" / "payments" / "orders.py",
          ROOT / "upgate" / "catalog" / "price_sync.py"]
ALLOWED_LATIN = {"sk-up-AbCd"}  # a key's look, which is Latin on every page


def _sample(name: str):
    if name.endswith("_micro"):
        return 9_007_199_254_740_991
    if name.endswith("_toman"):
        return 50_000_000
    if name.endswith("_ms"):
        return 1_742_502_600_000  # 2025-03-20T20:30:00Z: 1404/01/01 00:00 in Tehran
    if name == "month":
        return "1405-09"
    if name == "model":
        return "مدل"  # what the person typed comes back as typed; here, a word without Latin
    return 600


def _class(module, node: ast.expr):
    """The object a raise names (`Name` or `mod.Name`), resolved in the module."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.insert(0, node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    obj = getattr(module, node.id, None) or getattr(builtins, node.id, None)
    for p in parts:
        obj = getattr(obj, p, None)
    return obj


def raised() -> list[tuple[str, str, dict]]:
    """(where, reason, params) of every ValueError the walked modules raise."""
    out = []
    for path in WALKED:
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        module = importlib.import_module(name)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
                continue
            cls = _class(module, node.exc.func)
            if not (isinstance(cls, type) and issubclass(cls, ValueError)):
                continue
            where = f"{path.name}:{node.lineno}"
            assert issubclass(cls, Reasoned), f"{where}: {cls.__name__} carries no reason"
            kwargs = {k.arg: k.value for k in node.exc.keywords if k.arg}
            reason = kwargs.pop("reason").value if "reason" in kwargs else cls.reason
            out.append((where, reason, {k: _sample(k) for k in kwargs}))
    return out


RAISED = raised()


def test_the_walk_finds_the_service_layers_refusals():
    reasons = {r for _, r, _ in RAISED}
    assert len(RAISED) > 80 and {"rpm_range", "expiry_past", "amount_malformed", "signin_wrong_code",
                                  "month_not_begun", "topup_range", "phone_in_use"} <= reasons


@pytest.mark.parametrize("where,reason,params", RAISED, ids=[w for w, _, _ in RAISED])
def test_every_refusal_reads_in_persian(where, reason, params):
    assert reason in refusals.TEXT, f"{where}: reason {reason!r} is not in the catalogue"
    fa, en = refusals.render(reason, params, "fa"), refusals.render(reason, params, "en")
    if reason != "invalid":  # a parameter the sentence needs is missing: it fell back
        assert fa != refusals.render("invalid", {}, "fa"), where
    assert re.search(r"[\u0600-\u06ff]{3}", fa), (where, fa)  # Persian
    latin = re.findall(r"[A-Za-z][A-Za-z0-9_./-]*", fa)
    assert set(latin) <= ALLOWED_LATIN, (where, fa)  # no field id, no English, no ISO time
    assert not re.search(r"[0-9]", fa.replace("sk-up-AbCd", "")), (where, fa)  # Persian digits
    assert "{" not in fa and "{" not in en, where
    assert not re.search(r"[a-z]+_[a-z_]+|\d{4}-\d\d-\d\dT", en), (where, en)  # nor in English


def test_parameters_are_formatted_for_the_reader():
    assert refusals.render("topup_range", {"low_toman": 10000, "high_toman": 50_000_000}, "fa") == \
        "مبلغ شارژ از ۱۰٬۰۰۰ تا ۵۰٬۰۰۰٬۰۰۰ تومان است."
    assert refusals.render("expiry_past", {"when_ms": 1_742_502_600_000}, "en") == \
        "The expiry 1404/01/01 00:00 has already passed: choose a day in the future."
    assert "آذر ۱۴۰۵" in refusals.render("month_not_begun", {"month": "1405-09"}, "fa")


def test_a_refusal_raised_by_a_service_is_said_in_persian():
    from upgate.services import key_rules

    with pytest.raises(key_rules.InvalidKeySetting) as e:
        key_rules.parse_rpm("0")
    assert "rate_limit_rpm" in str(e.value)  # the JSON APIs' English message is unchanged
    assert refusals.say(e.value, "fa") == "شمار درخواست در دقیقه باید عددی صحیح از ۱ تا ۶۰۰ باشد."
    assert refusals.say(ValueError("internal detail"), "fa") == "این مقدار پذیرفته نشد."
