"""The rings of docs/architecture.md, checked from the imports themselves.

Every import counts: at module level, inside functions and under
``TYPE_CHECKING``, since each is a dependency a reader has to hold in mind.
A change that breaks a ring or closes an import circle fails here.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The folders of the repository and the package names they install as
# (pyproject.toml's package-dir).
FOLDERS = {"daemon": "chd", "backends": "chd.backends"}
# What storage may know of the core: the data it stores and the errors it raises.
CORE_DATA_TYPES = {"chd.core.utterance", "chd.core.errors"}
TRANSPORT_LIBRARIES = ("grpc", "grpc_health", "grpc_reflection", "google.protobuf")


def _module_name(path: Path) -> str:
    for folder, package in FOLDERS.items():
        base = ROOT / folder
        if path.is_relative_to(base):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            return ".".join([package, *parts])
    raise AssertionError(path)


@cache
def _modules() -> dict[str, Path]:
    found = {}
    for folder in FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            found[_module_name(path)] = path
    return found


@cache
def _imports(module: str) -> frozenset[str]:
    """Every module ``module`` imports, chd's resolved to the module (not the name in it)."""
    tree = ast.parse(_modules()[module].read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{module}: relative import; chd uses absolute ones"
            assert node.module is not None
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                names.add(full if full in _modules() else node.module)
    return frozenset(names)


def _chd_imports(module: str) -> set[str]:
    return {name for name in _imports(module) if name in _modules() and name != "chd"}


def _ring(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_tree_is_what_this_test_reads() -> None:
    """Sanity: the walk finds the rings and resolves imports (else the rules below pass vacuously)."""
    modules = _modules()
    assert {"chd.core.history", "chd.service.server", "chd.cli.main", "chd.backends.disk"} <= set(
        modules
    )
    assert "chd.core.memory.retrieval" in _chd_imports("chd.core.history") or any(
        _in(m, "chd.core") for m in _chd_imports("chd.core.history")
    )


def test_every_module_belongs_to_a_ring() -> None:
    rings = {"core", "service", "cli", "client", "mcp", "backends", "v1"}
    loose = sorted(
        m for m in _modules() if m not in ("chd", "chd.__main__") and _ring(m) not in rings
    )
    assert not loose, f"modules outside the rings {sorted(rings)}: {loose}"


def test_the_core_imports_no_transport() -> None:
    """The core answers queries in plain Python: no grpc, no service, no CLI, no stubs."""
    offences = []
    for module in _modules():
        if not _in(module, "chd.core"):
            continue
        for name in _imports(module):
            if any(_in(name, lib) for lib in TRANSPORT_LIBRARIES) or any(
                _in(name, ring) for ring in ("chd.service", "chd.cli", "chd.v1")
            ):
                offences.append(f"{module} imports {name}")
    assert not offences, offences


def test_storage_imports_only_the_cores_data_types() -> None:
    offences = []
    for module in _modules():
        if not _in(module, "chd.backends"):
            continue
        for name in _chd_imports(module):
            if not _in(name, "chd.backends") and name not in CORE_DATA_TYPES:
                offences.append(f"{module} imports {name}")
    assert not offences, offences


def test_the_service_does_not_import_the_cli() -> None:
    offences = [
        f"{module} imports {name}"
        for module in _modules()
        if _in(module, "chd.service")
        for name in _chd_imports(module)
        if _in(name, "chd.cli")
    ]
    assert not offences, offences


def test_the_client_library_imports_only_itself_and_the_stubs() -> None:
    """chd.client is what an orchestrator imports: nothing of the daemon's core, service or storage."""
    offences = [
        f"{module} imports {name}"
        for module in _modules()
        if _in(module, "chd.client")
        for name in _chd_imports(module)
        if not (_in(name, "chd.client") or _in(name, "chd.v1"))
    ]
    assert not offences, offences


def test_nothing_but_transports_imports_the_mcp_server() -> None:
    """chd.mcp is a transport like the gRPC service: the core, storage and the service never import it."""
    offences = [
        f"{module} imports {name}"
        for module in _modules()
        if not (_in(module, "chd.mcp") or _in(module, "chd.cli"))
        for name in _chd_imports(module)
        if _in(name, "chd.mcp")
    ]
    assert not offences, offences


def _graph() -> dict[str, set[str]]:
    return {m: _chd_imports(m) - {m} for m in _modules()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_import_circles() -> None:
    assert _cycles(_graph()) == []


def test_a_circle_would_be_found() -> None:
    """The circle finder itself works: a made-up back edge is reported."""
    graph = _graph()
    graph["chd.core.memory.retrieval"].add("chd.core.history")
    assert ["chd.core.history", "chd.core.memory.retrieval"] in [
        [m for m in c if m in ("chd.core.history", "chd.core.memory.retrieval")]
        for c in _cycles(graph)
    ]


def test_only_the_otel_module_imports_opentelemetry() -> None:
    """Traces are an optional extra: the core opens spans through a protocol, chd.service.otel fills it in."""
    offences = [
        f"{module} imports {name}"
        for module in _modules()
        if module != "chd.service.otel"
        for name in _imports(module)
        if _in(name, "opentelemetry")
    ]
    assert not offences, offences
