"""The tree's architecture, kept so: no import circle among upgate's modules, and no import from
a lower layer to a higher one (docs/architecture.md draws them). Every import counts, those
inside functions too: a lazy import still ties the two modules together."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# lowest first; a module may import its own layer and those below it, never above
LAYERS = [
    ("base", ["upgate", "upgate.errors", "upgate.settings"]),
    ("store, wire", ["upgate.store", "upgate.http", "upgate.upstream", "upgate.sms", "upgate.messages"]),
    ("money, catalog", ["upgate.billing", "upgate.catalog", "upgate.routes"]),
    ("services", ["upgate.services", "upgate.webhooks", "upgate.i18n", "upgate.payments",
                  "upgate.migrations", "upgate.alerts"]),
    ("faces", ["upgate.handlers", "upgate.console", "upgate.dashboard", "admin_cli",
               "upgate.mock"]),
    ("entry points", ["upgate.app", "upgate.context", "upgate.server", "upgate.cli", "upgate.demo"]),
]
# `upstream/` knows nothing of money: not even the units it is counted in
FORBIDDEN = [("upgate.messages", "upgate.billing"), ("upgate.messages", "upgate.store"),
             ("upgate.upstream", "upgate.billing"), ("upgate.upstream", "upgate.services"),
             ("upgate.upstream", "upgate.store")]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found = {}
    for top in ("upgate", "admin_cli"):
        for p in (ROOT / top).rglob("*.py"):
            found[module_name(p)] = p
    return found


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports, anywhere in its body."""
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        out |= {t for t in targets if t in known and t != name}
    return out


def layer_of(name: str) -> int:
    best, rank = -1, None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (name == p or name.startswith(p + ".")) and len(p) > best:
                best, rank = len(p), i
    assert rank is not None, f"{name} is in no layer: add it to LAYERS"
    return rank


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {n: imports(n, p, known) for n, p in mods.items()}


def test_every_module_has_a_layer():
    for name in graph():
        layer_of(name)


def test_no_import_goes_up_a_layer():
    upward = [f"{a} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})"
              for a, targets in graph().items() for b in sorted(targets)
              if layer_of(b) > layer_of(a) and b != "upgate"]
    assert not upward, "\n".join(upward)


def test_upstream_knows_nothing_of_money():
    bad = [f"{a} imports {b}" for a, targets in graph().items() for b in targets
           for lo, hi in FORBIDDEN if a.startswith(lo) and (b == hi or b.startswith(hi + "."))]
    assert not bad, "\n".join(bad)


def test_no_import_circles():
    g = graph()
    index, low, stack, on, circles, counter = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    # a package's __init__ that imports its own submodules is not a circle of design
    circles = [c for c in circles if not all(m.startswith(c[0] + ".") or m == c[0] for m in c)]
    assert not circles, circles


def test_the_checker_sees_a_circle_and_an_upward_import(tmp_path, monkeypatch):
    """The test above can fail: a fake tree with a circle and an upward import is caught."""
    for rel, text in {"upgate/__init__.py": "", "upgate/store/__init__.py": "",
                      "upgate/store/a.py": "from upgate.services import b\n",
                      "upgate/services/__init__.py": "", "upgate/services/b.py": "from upgate.store import a\n",
                      "admin_cli/__init__.py": ""}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    monkeypatch.setattr(__import__(__name__, fromlist=["x"]), "ROOT", tmp_path)
    g = graph()
    assert g["upgate.store.a"] == {"upgate.services.b"} and g["upgate.services.b"] == {"upgate.store.a"}
    try:
        test_no_import_goes_up_a_layer()
    except AssertionError as e:
        assert "upgate.store.a (store, wire) imports upgate.services.b" in str(e)
    else:
        raise AssertionError("an upward import went unseen")
    try:
        test_no_import_circles()
    except AssertionError as e:
        assert "upgate.store.a" in str(e)
    else:
        raise AssertionError("a circle went unseen")
