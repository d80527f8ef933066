"""All CLI output goes through here: results to stdout (JSON or a rich table), messages to
stderr. `--json` is one switch on the context, so every command behaves the same way."""
from __future__ import annotations

import sys

import click
import orjson
from rich.console import Console
from rich.table import Table

EXIT_OK = 0
EXIT_REFUSED = 1  # every failure: bad input, unknown id, usage error, the store unreachable
EXIT_OVER_LIMIT = 3  # `models sync`: a change over --max-change, refused without --yes
PIPE_WIDTH = 10_000  # columns for output that is not a terminal (no table is that wide)


class Refused(click.ClickException):
    """Refused input: one clear line on stderr, exit code 1, nothing written."""

    exit_code = EXIT_REFUSED

    def show(self, file=None) -> None:
        click.echo(f"error: {self.message}", err=True)


class OverLimit(Refused):
    """Refused because the change is larger than the operator allowed (exit code 3)."""

    exit_code = EXIT_OVER_LIMIT


def json_mode() -> bool:
    ctx = click.get_current_context(silent=True)
    while ctx is not None:
        if ctx.params.get("as_json"):
            return True
        ctx = ctx.parent
    return bool(ctx and ctx.obj and ctx.obj.get("json"))


def emit(result: dict, *, table: Table | None = None, message: str | None = None) -> None:
    """One JSON object with --json; otherwise the table and/or a human line."""
    if json_mode():
        sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    console = Console()
    if not console.is_terminal:
        # a pipe, a file or a test runner: rich would squeeze the table into 80 columns and
        # wrap cells into fragments; at this width a table keeps its natural one
        console = Console(width=PIPE_WIDTH)
    if table is not None:
        console.print(table)
    if message:
        console.print(message)


def warn(message: str) -> None:
    """A human note on stderr (never on stdout, so --json output stays one object)."""
    click.echo(f"warning: {message}", err=True)


def table(title: str, columns: list[str], rows: list[list]) -> Table:
    t = Table(title=title, header_style="bold")
    for c in columns:
        t.add_column(c)
    for row in rows:
        t.add_row(*["—" if v is None else str(v) for v in row])
    return t


def kv_table(title: str, pairs: dict) -> Table:
    return table(title, ["field", "value"], [[k, v] for k, v in pairs.items()])


json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
