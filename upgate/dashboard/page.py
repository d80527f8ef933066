"""The base of the dashboard's signed-in pages that show a month (the month asked for, checked)
and its charts."""
from __future__ import annotations

from upgate.console import charts
from upgate.dashboard import data
from upgate.dashboard.base import DashboardHandler, Refused
from upgate.i18n import numbers
from upgate.services import statements


class Page(DashboardHandler):
    def kind_words(self) -> dict[str, str]:
        _ = self.locale.translate
        return {"opening": _("opening balance"), "topup": _("top-up"), "adjustment": _("adjustment")}

    def note(self, txn: dict, refs: dict[str, str]) -> str:
        """A transaction's note as its reader says it: a payment by its bank reference in the
        page's language (the gateway's own note is the operator's); an operator's note as written."""
        if txn.get("id") in refs:
            ref = refs[txn["id"]]
            return self.locale.translate("Paid online, bank reference {ref}").format(
                ref=numbers.localize(ref, self.lang)) if ref else self.locale.translate("Paid online")
        return txn.get("note") or ""
    def month(self) -> str:
        try:
            return data.check_month(self.get_query_argument("month", None))
        except statements.InvalidMonth:
            raise Refused(400, self.locale.translate("That month is not one the dashboard can show.")) from None

    def chart(self, days: list[dict], metric: str, title: str, fmt) -> str:
        f = self.get_template_namespace()["fmt"]
        return charts.bars([f.day(d["day"]) for d in days], [d[metric] for d in days], title, fmt,
                           tips=[f.when_day(d["day"]) for d in days],
                           empty=self.locale.translate("No data in this period"), digits=f.digits, axis=f.axis,
                           whole=metric == "requests")
