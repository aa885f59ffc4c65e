"""Digests of the code that computes a component or a method (part of its identity).

A component's :attr:`~agentcir.framework.component.Component.identity` (hence every cache key and
the run directory's ``inputs.json``) covers the code of its class, so that a result is never
reused after the code that produced it was edited:

- for each class in the component's class hierarchy that belongs to the project (the class's
  own top-level package, or agentcir), the module that defines it and the modules
  that module imports **within the same top-level package** (a static import closure read from
  the source files, every ``import`` statement counted, including those inside functions);
  a loose top-level module (``my_method.py`` on ``PYTHONPATH``) also covers the modules of its own
  folder that it imports;
- a module's digest is the sha256 of its syntax tree without docstrings, so editing a comment,
  a docstring or the layout recomputes nothing; it is memoised per file, size and mtime;
- the modules in :data:`NEUTRAL_MODULES` / :data:`NEUTRAL_PACKAGES` are neither digested nor
  followed: they run or record the computation without changing its outputs (the runner, the
  cache, the registry, the run-directory helpers, logging and error types), so editing them does
  not invalidate every cache;
- a class defined in a notebook or in ``__main__`` is digested by its source
  (:func:`inspect.getsource`) and that of the functions and classes of the same module its code
  names, or by its bytecode when no source is available;
- a class that declares ``version: ClassVar[str] = "..."`` itself is identified by that string
  instead of its module's code: its author then bumps the version when the outputs change.

The default is safe: without ``version``, any edit of the code recomputes. Model calls of
*other* components are unaffected: an LLM call's cache key holds the LLM's identity and the
request, never the code of the method that made it.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import os
import sys
import threading
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = [
    "NEUTRAL_MODULES",
    "NEUTRAL_PACKAGES",
    "changed_modules",
    "class_code",
    "code_modules",
    "is_neutral",
    "module_closure",
]

#: modules that run, record or name a computation without changing its outputs: never digested,
#: never followed (an import of one of them adds nothing to a closure)
NEUTRAL_MODULES: frozenset[str] = frozenset(
    {
        "agentcir",  # the package root (lazy public names)
        "agentcir._threads",  # thread-pool helpers
        "agentcir.cli",  # the command line
        "agentcir.api",  # the Python API (calls the runner)
        "agentcir.framework.accounting",  # time and cost accounting
        "agentcir.framework.cache",  # the call cache
        "agentcir.framework.code_identity",  # this module
        "agentcir.framework.component",  # the base class (identity, dependency injection)
        "agentcir.framework.method",  # the method base class (stage list)
        "agentcir.framework.errors",  # error types
        "agentcir.framework.files",  # atomic writes, storage errors
        "agentcir.framework.hashing",  # content hashes
        "agentcir.framework.imports",  # run.imports (recorded in inputs.json on its own)
        "agentcir.framework.locks",  # run-directory locks
        "agentcir.framework.plan",  # --plan
        "agentcir.framework.preflight",  # endpoint checks before a run
        "agentcir.framework.recipe",  # recipe composition (the recipe itself is in the identity)
        "agentcir.framework.recipe_checks",  # recipe checks
        "agentcir.framework.report",  # report writing
        "agentcir.framework.runner",  # the pipeline runner
        "agentcir.framework.state",  # run state containers
        "agentcir.framework.sweep",  # sweeps
    }
)
#: packages whose every module is neutral (see :data:`NEUTRAL_MODULES`)
NEUTRAL_PACKAGES: tuple[str, ...] = ("agentcir.registry",)

_LOCK = threading.Lock()
#: path -> ((size, mtime_ns), digest, imported module names)
_MODULES: dict[str, tuple[tuple[int, int], str, tuple[str, ...]]] = {}


def is_neutral(module: str) -> bool:
    """Whether ``module`` is listed as neutral infrastructure (never part of a code digest)."""
    return module in NEUTRAL_MODULES or any(module == p or module.startswith(p + ".") for p in NEUTRAL_PACKAGES)


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(getattr(body[0], "value", None), ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]
    return tree


def _imports(tree: ast.AST, module: str, is_package: bool) -> tuple[str, ...]:
    """Absolute names of what ``module`` imports (``from x import y`` gives ``x`` and ``x.y``)."""
    package = module if is_package else module.rpartition(".")[0]
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                if node.level - 1 > len(parts):
                    continue
                base = ".".join(parts[: len(parts) - (node.level - 1)])
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            if not base:
                continue
            out.append(base)
            out.extend(f"{base}.{a.name}" for a in node.names if a.name != "*")
    return tuple(dict.fromkeys(out))


def _module_info(path: str, module: str) -> tuple[str, tuple[str, ...]]:
    """(digest, imports) of a source file, memoised per path, size and mtime."""
    st = os.stat(path)
    stamp = (st.st_size, st.st_mtime_ns)
    with _LOCK:
        hit = _MODULES.get(path)
    if hit is not None and hit[0] == stamp:
        return hit[1], hit[2]
    data = Path(path).read_bytes()
    try:
        tree = ast.parse(data, filename=path)
    except (SyntaxError, ValueError):  # not Python source (a compiled extension): its bytes
        digest, imports = hashlib.sha256(data).hexdigest(), ()
    else:
        imports = _imports(tree, module, os.path.basename(path) == "__init__.py")
        dump = ast.dump(_strip_docstrings(tree), include_attributes=False)
        digest = hashlib.sha256(dump.encode()).hexdigest()
    with _LOCK:
        _MODULES[path] = (stamp, digest, imports)
    return digest, imports


def _top_locations(top: str) -> list[str]:
    """The folders (a package) or the file (a loose module) of top-level module ``top``."""
    mod = sys.modules.get(top)
    if mod is None:
        import importlib.util

        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            return []
        if spec is None:
            return []
        if spec.submodule_search_locations:
            return list(spec.submodule_search_locations)
        return [spec.origin] if spec.origin and os.path.isfile(spec.origin) else []
    path = getattr(mod, "__path__", None)
    if path:
        return list(path)
    f = getattr(mod, "__file__", None)
    return [f] if f else []


def module_file(module: str) -> str | None:
    """The source file of ``module`` (no import: loaded modules by ``__file__``, others located
    under their top-level package's folders)."""
    mod = sys.modules.get(module)
    f = getattr(mod, "__file__", None) if mod is not None else None
    if f and os.path.isfile(f):
        return os.path.abspath(f)
    top, _, rest = module.partition(".")
    for loc in _top_locations(top):
        if not rest:
            if os.path.isfile(loc):
                return os.path.abspath(loc)
            init = os.path.join(loc, "__init__.py")
            if os.path.isfile(init):
                return os.path.abspath(init)
            continue
        base = os.path.join(loc, *rest.split("."))
        for cand in (base + ".py", os.path.join(base, "__init__.py")):
            if os.path.isfile(cand):
                return os.path.abspath(cand)
    return None


def _in_site_packages(folder: str) -> bool:
    import site
    import sysconfig

    roots = {
        os.path.abspath(p)
        for p in (
            *getattr(site, "getsitepackages", list)(),
            sysconfig.get_paths().get("purelib", ""),
            sysconfig.get_paths().get("platlib", ""),
            sysconfig.get_paths().get("stdlib", ""),
        )
        if p
    }
    return os.path.abspath(folder) in roots or "site-packages" in Path(folder).parts


def module_closure(module: str) -> dict[str, str]:
    """``{module: digest}`` of ``module`` and the non-neutral modules it imports, transitively,
    within its top-level package (a loose top-level module: also the modules of its folder)."""
    root_file = module_file(module)
    if root_file is None or is_neutral(module):
        return {}
    tops = {module.partition(".")[0]}
    loose_dir = None
    if "." not in module and os.path.basename(root_file) != "__init__.py":
        folder = os.path.dirname(root_file)
        if not _in_site_packages(folder):
            loose_dir = folder
    out: dict[str, str] = {}
    todo = [(module, root_file)]
    while todo:
        name, path = todo.pop()
        if name in out:
            continue
        digest, imports = _module_info(path, name)
        out[name] = digest
        for imp in imports:
            top = imp.partition(".")[0]
            if imp in out or is_neutral(imp):
                continue
            if top not in tops:
                if loose_dir is None or not (
                    os.path.isfile(os.path.join(loose_dir, top + ".py"))
                    or os.path.isfile(os.path.join(loose_dir, top, "__init__.py"))
                ):
                    continue
                tops.add(top)
            f = module_file(imp)
            if f is not None and f.endswith(".py"):
                todo.append((imp, f))
    return dict(sorted(out.items()))


def _code_objects(obj: Any) -> Iterable[types.CodeType]:
    """Code objects of a class's functions (methods, properties, static/class methods)."""
    for value in vars(obj).values():
        fn = value
        if isinstance(value, (staticmethod, classmethod)):
            fn = value.__func__
        elif isinstance(value, property):
            for f in (value.fget, value.fset, value.fdel):
                if f is not None and hasattr(f, "__code__"):
                    yield f.__code__
            continue
        code = getattr(fn, "__code__", None)
        if isinstance(code, types.CodeType):
            yield code


def _all_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _all_names(c)
    return names


def _bytecode(code: types.CodeType) -> bytes:
    parts = [code.co_code, repr(code.co_names).encode(), repr(code.co_varnames).encode()]
    for c in code.co_consts:
        parts.append(_bytecode(c) if isinstance(c, types.CodeType) else repr(c).encode())
    return b"\x00".join(parts)


def _source_digest(obj: Any) -> str:
    """sha256 of an object's source, or of its bytecode when the source cannot be read."""
    try:
        return hashlib.sha256(inspect.getsource(obj).encode()).hexdigest()
    except (OSError, TypeError):
        codes = [obj.__code__] if hasattr(obj, "__code__") else list(_code_objects(obj))
        return hashlib.sha256(b"\x01".join(_bytecode(c) for c in codes)).hexdigest()


def _interactive_code(cls: type) -> dict[str, str]:
    """A class of ``__main__`` / a notebook: its source, and that of the functions and classes of
    the same module that its code names (transitively)."""
    module = sys.modules.get(cls.__module__)
    space = vars(module) if module is not None else {}
    for value in vars(cls).values():  # the namespace the class's methods really see
        fn = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
        if isinstance(getattr(fn, "__globals__", None), dict):
            space = fn.__globals__
            break
    out: dict[str, str] = {}
    todo: list[tuple[str, Any]] = [(cls.__qualname__, cls)]
    while todo:
        name, obj = todo.pop()
        key = f"{cls.__module__}:{name}"
        if key in out:
            continue
        out[key] = _source_digest(obj)
        codes = list(_code_objects(obj)) if isinstance(obj, type) else [obj.__code__]
        for n in sorted(set().union(*(_all_names(c) for c in codes)) if codes else ()):
            ref = space.get(n)
            if isinstance(ref, (type, types.FunctionType)) and getattr(ref, "__module__", None) == cls.__module__:
                todo.append((getattr(ref, "__qualname__", n), ref))
    return out


def _is_interactive(cls: type) -> bool:
    if cls.__module__ == "__main__":
        return True
    mod = sys.modules.get(cls.__module__)
    f = getattr(mod, "__file__", None) if mod is not None else None
    return not f or not os.path.isfile(f)


def class_code(cls: type) -> dict[str, str]:
    """``{module: digest}`` of the code that computes instances of ``cls``: every class of its
    hierarchy (see the module docstring); a class's own ``version`` replaces its module's code."""
    out: dict[str, str] = {}
    # the project's classes: those of the class's own top-level package and agentcir's (a base
    # from the standard library or a third-party package, e.g. abc.ABC, is not the project's code)
    tops = {cls.__module__.partition(".")[0], __name__.partition(".")[0]}
    for klass in cls.__mro__:
        mod = klass.__module__
        if klass is object or mod.partition(".")[0] not in tops or is_neutral(mod):
            continue
        version = klass.__dict__.get("version")
        if isinstance(version, str) and version:
            out[f"{mod}:{klass.__qualname__}"] = f"version:{version}"
            continue
        if _is_interactive(klass):
            out.update(_interactive_code(klass))
            continue
        for name, digest in module_closure(mod).items():
            out.setdefault(name, digest)
    return dict(sorted(out.items()))


def code_modules(component: Any) -> dict[str, str]:
    """``{module: digest12}`` of a component and of the components injected into it (recursively):
    what ``inputs.json`` records under ``code``."""
    out: dict[str, str] = {}
    seen: set[int] = set()

    def visit(comp: Any) -> None:
        if comp is None or id(comp) in seen:
            return
        seen.add(id(comp))
        for name, digest in class_code(type(comp)).items():
            out.setdefault(name, digest[:12] if not digest.startswith("version:") else digest)
        for dep in (*getattr(comp, "requires", ()), *getattr(comp, "optional", ())):
            visit(getattr(comp, dep, None))

    visit(component)
    return dict(sorted(out.items()))


def changed_modules(old: dict[str, str] | None, new: dict[str, str]) -> list[str]:
    """Modules whose digest differs between two ``code`` maps (added or removed ones included)."""
    old = old or {}
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
