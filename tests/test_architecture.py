"""The shape of the code, checked: layers that import only downwards (docs/architecture.md), no import
cycles among the project's modules, no class over ~300 lines, no module importing another's private name, and collectors sealed
(a collector imports the contract and the package's private helper modules, never another collector).
Read from the source with ``ast``, nothing imported.

KNOWN_CYCLES lists cycles not yet taken apart (none now): the test fails when a new one appears,
and also when a listed one is gone, so that the list only shrinks.
"""
from __future__ import annotations

import ast
import re
import tomllib
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("observe", "collectors", "queries")
KNOWN_CYCLES: list[set[str]] = []
# interfaces -> analyses and health -> store, rules, schema, collectors -> shared vocabulary
INTERFACES = ("observe.cli", "observe.exporter", "observe.simulate", "observe.health.hooks")
ANALYSES = ("queries", "observe.health")
SHARED = ("observe.timeparse", "observe.hostname", "observe.sessions", "observe.printable", "observe.provenance",
          "observe.redact", "observe.spans", "observe.hostlists", "observe.pci", "observe.job_states", "observe.config",
          "observe.frames", "observe.memo")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            if (ROOT / pkg / "rules") in path.parents:  # data and the tools beside it, not a package
                continue
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _target(name: str) -> str | None:
    """The project module ``name`` is or lies in (``observe.store.Store`` -> ``observe.store``)."""
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name if name in MODULES else None


def _runtime_nodes(tree: ast.AST):
    """Every node of ``tree`` but those under ``if TYPE_CHECKING:`` (imports for type hints only)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and isinstance(child.test, ast.Name) and child.test.id == "TYPE_CHECKING":
                todo.extend(child.orelse)
            else:
                todo.append(child)


def _imports() -> tuple[dict[str, set[str]], list[tuple[str, str, str]]]:
    """Each module's project imports, and every (importer, module, private name) import."""
    edges: dict[str, set[str]] = defaultdict(set)
    private = []
    for name, path in MODULES.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [(_target(a.name), None) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, *([node.module] if node.module else [])])
                targets = [(_target(f"{base}.{a.name}"), a.name) for a in node.names]
            else:
                continue
            for target, imported in targets:
                if target is None or target == name:
                    continue
                edges[name].add(target)
                if imported and imported.startswith("_") and f"{target}.{imported}" not in MODULES \
                        and not target.endswith(f".{imported}"):
                    private.append((name, target, imported))
    return edges, private


def _cycles(edges: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out = []
    for root in MODULES:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(comp)
    return out


def layer(module: str) -> int:
    """3 interfaces, 2 analyses and health, 1 store, rules, schema and collectors, 0 shared vocabulary."""
    def under(prefixes: tuple[str, ...]) -> bool:
        return any(module == p or module.startswith(p + ".") or module.startswith(p + "_") for p in prefixes)
    return 3 if under(INTERFACES) else 2 if under(ANALYSES) else 0 if module in SHARED else 1


def _upward(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((name, target) for name, targets in edges.items() for target in targets if layer(target) > layer(name))


def test_layers_import_only_downwards() -> None:
    assert _upward(_imports()[0]) == []
    assert layer("observe.cli.health") == 3 and layer("queries.explain") == 2 and layer("observe.store") == 1
    assert layer("observe.timeparse") == 0 and layer("observe.health.faults") == 2 and layer("observe.health.hooks") == 3
    assert layer("observe.simulate.accuracy") == 3  # the simulator, its scorer included, may use the analyses


def test_no_import_cycles_but_the_known_ones() -> None:
    found = _cycles(_imports()[0])
    new = [sorted(c) for c in found if c not in KNOWN_CYCLES]
    gone = [sorted(c) for c in KNOWN_CYCLES if c not in found]
    assert not new, f"import cycles: {new}"
    assert not gone, f"no longer a cycle, take it off KNOWN_CYCLES: {gone}"


CLASS_LINES = 310  # about 300: a class that holds more holds more than one responsibility


def test_no_class_holds_more_than_about_300_lines() -> None:
    long = {f"{name}.{node.name}": node.end_lineno - node.lineno + 1 for name, path in MODULES.items()
            for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ClassDef)
            and node.end_lineno - node.lineno + 1 > CLASS_LINES}
    assert not long, long


def test_no_module_imports_a_private_name_of_another() -> None:
    assert _imports()[1] == []


def test_collectors_import_no_other_collector() -> None:
    edges = _imports()[0]
    crossing = sorted((name, target) for name in MODULES if name.startswith("collectors.")
                      for target in edges[name]
                      if target.startswith("collectors.") and not target.split(".")[1].startswith("_"))
    assert crossing == []


def test_the_checks_see_a_cycle_and_a_private_import() -> None:
    """The graph walk itself: a made-up upward import and the cycle it makes are found, and the real
    graph is not empty."""
    edges, _ = _imports()
    assert {"observe.collector"} <= edges["collectors.syslog"]
    fake = defaultdict(set, {k: set(v) for k, v in edges.items()})
    fake["observe.timeparse"].add("observe.cli")  # the CLI imports timeparse through many modules
    assert any("observe.timeparse" in c and "observe.cli" in c for c in _cycles(fake))
    assert ("observe.timeparse", "observe.cli") in _upward(fake)


# An attrs key the code reads: json_path_match("$.key") on attrs, the analyses' attr("...") helpers, and the
# attrs conditions of queries/causes.toml; journald's own fields (``__CURSOR``, read from the raw JSON) are not attrs.
READS = [re.compile(r'json_path_match\("\$\.([a-z]\w*)"\)'), re.compile(r'\b_?attr\("\$?\.?([a-z]\w*)"\)')]


def _attr_reads() -> dict[str, str]:
    reads: dict[str, str] = {}
    for pkg in ("observe", "queries"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                for rx in READS:
                    for key in rx.findall(line):
                        reads.setdefault(key, f"{path.relative_to(ROOT)}:{i}")
    for cause in tomllib.loads((ROOT / "queries" / "causes.toml").read_text())["cause"]:
        for key in cause.get("attrs", {}):
            reads.setdefault(key, f"queries/causes.toml cause {cause['kind']}")
    return reads


def _written(key: str, text: str) -> bool:
    """Whether the writers' text sets ``key``: a rule's named group or static attrs, a catalog field, a
    key Python code puts in attrs."""
    return bool(re.search(rf"\(\?P<{key}>|[\"']{key}[\"']|(?:^|[{{,\s]){key}\s*=", text, re.M))


def test_every_attrs_key_read_is_one_something_writes() -> None:
    """The keys in attrs are a contract between the collectors, rules and catalogs that write them and
    the analyses that read them: a read of a key nothing writes is always null (a renamed group, a
    removed rule) and silently weakens a verdict."""
    files = [*(ROOT / "collectors").rglob("*.py"), *(ROOT / "collectors").rglob("*.toml"),
             *(ROOT / "observe").rglob("*.py"), *(ROOT / "observe").rglob("*.toml")]
    files = [f for f in files if ROOT / "observe" / "simulate" not in f.parents]  # writes logs, not attrs
    text = "\n".join(line for path in files for line in path.read_text(encoding="utf-8").splitlines()
                     if "json_path_match" not in line and not re.search(r"\b_?attr\(\"", line))
    reads = _attr_reads()
    assert {"peer", "aer", "action", "state"} <= set(reads)  # the scan finds reads at all
    assert not _written("no_such_key_anywhere", text)
    assert {k: where for k, where in reads.items() if not _written(k, text)} == {}


# Dicts of optional per-entry fields, whose absence the code gives a meaning (a fault kind's ``when``, a
# cause's ``needs``, a rule's ``examples``): not policy values with a default of their own.
OPTIONAL_ENTRIES = {"spec", "raw", "entry", "table", "doc", "by_check"}


def _tuned_keys() -> set[str]:
    """Keys the built-in data files set, by section: the policy's sections, the patterns' miner, the
    causes' scoring, nodes and calibration."""
    keys: set[str] = set()
    policy = tomllib.loads((ROOT / "observe/health/policy.toml").read_text())
    for section in [policy, *(v for v in policy.values() if isinstance(v, dict))]:
        keys |= set(section)
    causes = tomllib.loads((ROOT / "queries/causes.toml").read_text())
    for name in ("scoring", "nodes", "calibration"):
        keys |= set(causes.get(name, {}))
    keys |= set(tomllib.loads((ROOT / "queries/patterns.toml").read_text()).get("miner", {}))
    return keys


def test_no_shadow_defaults_for_what_the_data_files_set() -> None:
    """A value the built-in policy, causes or patterns file sets is read as it is (``rules["key"]``), never
    with a default of the code's own (``rules.get("key", 3)``) that could silently disagree with the data."""
    keys = _tuned_keys()
    found = []
    for name, path in MODULES.items():
        if name.startswith("observe.simulate"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                    and len(node.args) == 2 and isinstance(node.args[0], ast.Constant) and node.args[0].value in keys
                    and ast.unparse(node.func.value) not in OPTIONAL_ENTRIES):
                found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    assert found == []
