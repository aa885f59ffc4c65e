"""Hydra recipes: compose, type-check against the registries, build components lazily.

A recipe has one group per component kind (``encoder``, ``llm``, ``captioner``,
``generator``, ``editor``, ``detector``, ``verifier``, ``memory``), plus ``method``, ``dataset``,
``kernels`` and the ``run`` settings. Each component group holds ``name`` (a registry
key, never an import path) and that component's config fields. Composition checks
every field against the registered ``Config`` dataclass, so a wrong type or an
unknown field fails at once, naming the field, the valid fields of its node and the
closest match (a field override needs no ``+``: ``method.lam=0.3`` is checked by the
project, not by Hydra's struct mode). A sweep value (``a,b``, ``range(...)``) is only
accepted by ``agentcir run -m`` (:mod:`agentcir.framework.sweep`).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Sequence

from ..kernels.dispatch import BACKENDS as KERNEL_BACKENDS
from ..registry import REGISTRIES, Choice, ConfigError, make_config
from ..registry.config import closest_hint, config_dict
from .errors import InputError

RECIPES_DIR = Path(__file__).resolve().parent.parent / "recipes"
COMPONENT_GROUPS = ("encoder", "llm", "captioner", "generator", "editor", "detector", "verifier", "memory")
GROUPS = (*COMPONENT_GROUPS, "method", "dataset")
#: a component group set to this key is absent (allowed for a method's optional components)
NONE_KEY = "none"


class GalleryDType(Choice):
    """Storage of gallery embeddings (``run.gallery_dtype``)."""

    float32 = "float32"
    float16 = "float16"
    int8 = "int8"  # float32 rows + int8 codes and per-row scales: int8 scans, exact float32 re-rank


class GalleryCaptions(Choice):
    """Where gallery captions come from (``run.gallery_captions``)."""

    auto = "auto"
    dataset = "dataset"
    captioner = "captioner"


@dataclass
class RunConfig:
    """Settings of a run (the ``run:`` section of a recipe).

    Attributes:
        root: folder under which run directories and shared galleries are kept.
        name: run directory name; by default ``<method>-<dataset>-<recipe hash>``, so
            the same command resumes the same run.
        concurrency: model calls in flight at once (across queries); endpoint clients follow it
            unless their recipe caps them (``llm.concurrency``).
        cache: sqlite file of the model-call cache; default ``<root>/cache.sqlite``.
        progress: progress bars on stderr.
        gallery_dtype: storage of gallery embeddings (``float32``, ``float16``, or ``int8``: float32
            rows plus int8 codes that the gallery scans read, re-ranked exactly against the rows).
        gallery_captions: ``auto`` (dataset captions when the dataset has them, else the
            captioner), ``dataset`` or ``captioner``.
        show: how many queries' rankings to print at the end.
        fresh: ignore a previous run directory of the same name (start over).
        max_image_pixels: images above this many pixels are skipped (with the reason) before
            they are decoded (0: no limit).
        imports: stage outputs read from files instead of computed, ``{stage: FILE or sources}``
            (:mod:`agentcir.framework.imports`).
        prices: per component kind, ``input_per_1m`` / ``output_per_1m`` / ``per_call`` / ``per_item``
            (the cost estimate of ``agentcir run --plan``, :mod:`agentcir.framework.plan`).
        plugins: modules imported before the recipe is checked, so that they can register
            components and methods without being packaged (``run.plugins=[my_method]``, as
            mmengine's ``custom_imports``); not part of the run's identity (the code of what
            they register is, :mod:`agentcir.framework.code_identity`).
        preflight: before any gallery or query work, check that every endpoint the recipe uses
            answers (one ``GET /models`` each, :mod:`agentcir.framework.preflight`).
        loggers: run loggers (experiment tracking) by registry key: ``csv`` (built in),
            ``tensorboard``, ``mlflow`` (:mod:`agentcir.framework.tracking`); a sweep logs each job
            and a parent.
        tracking: per logger its settings, ``{key: {field: value}}`` (``run.tracking.mlflow.uri=...``),
            checked against the logger's ``Config``.
        paper: the paper's numbers this recipe reproduces, ``"SOURCE: METRIC VALUE, ..."``
            (``agentcir eval --compare`` prints them beside the run's, :mod:`agentcir.framework.compare`);
            not part of the run's identity.
    """

    root: str = "runs"
    name: str | None = None
    concurrency: int = 8
    cache: str | None = None
    progress: bool = True
    gallery_dtype: GalleryDType = GalleryDType.float32
    gallery_captions: GalleryCaptions = GalleryCaptions.auto
    show: int = 3
    fresh: bool = False
    max_image_pixels: int = 100_000_000
    imports: Dict[str, Any] = field(default_factory=dict)
    prices: Dict[str, Any] = field(default_factory=dict)
    plugins: List[str] = field(default_factory=list)
    preflight: bool = True
    loggers: List[str] = field(default_factory=list)
    tracking: Dict[str, Any] = field(default_factory=dict)
    paper: str = ""


@dataclass
class KernelsConfig:
    """Scoring-core backend: ``auto`` (env var ``AGENTCIR_KERNELS``, then capability
    probe, then reference) or an explicit ``numba`` / ``triton`` / ``torch`` / ``reference``."""

    backend: str = "auto"


#: run settings that cannot change results (excluded from the run's identity)
VOLATILE_RUN_FIELDS = (
    "concurrency",
    "progress",
    "show",
    "fresh",
    "name",
    "root",
    "cache",
    "max_image_pixels",
    "prices",
    "plugins",
    "preflight",
    "loggers",
    "tracking",
    "paper",
)


def import_plugins(modules: Any) -> list[str]:
    """Import the modules of ``run.plugins`` (a module name or a list of them), so that what they
    register is known before the recipe is checked. Modules are found on ``sys.path``
    (``PYTHONPATH``), then in the current folder. Returns the names imported; a module that
    cannot be imported is an :class:`InputError` naming it."""
    import importlib

    if modules is None or modules == "":
        return []
    names = [modules] if isinstance(modules, str) else modules
    if not isinstance(names, (list, tuple)) or not all(isinstance(m, str) and m.strip() for m in names):
        raise InputError(f"run.plugins: expected a list of module names (run.plugins=[my_module]), got {modules!r}")
    import sys

    if names and os.getcwd() not in sys.path and "" not in sys.path:  # as `python -m` would: the current folder too
        sys.path.append(os.getcwd())
    out = []
    for name in (m.strip() for m in names):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            where = "" if e.name == name else f" (it imports '{e.name}', which is missing)"
            raise InputError(
                f"run.plugins: cannot import module '{name}'{where}: {e}; put its folder on "
                f"PYTHONPATH (or install it) and name it as Python imports it (package.module)"
            ) from None
        except Exception as e:
            raise InputError(f"run.plugins: importing module '{name}' failed: {type(e).__name__}: {e}") from e
        out.append(name)
    return out


def _hydra_compose(overrides: Sequence[str], config_name: str, recipes_dir: Path, extra_dirs: Sequence[str]):
    import yaml
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    check_recipe_dirs(extra_dirs)
    dirs = [*extra_dirs, *plugin_recipe_dirs()]
    overrides = project_overrides(overrides, recipe_groups([recipes_dir, *dirs]))
    generated = registered_recipes(
        overrides,
        [recipes_dir, *dirs],
        extra_dirs,  # keys registered from Python
        recipes_dir / f"{config_name}.yaml",
    )
    if generated is not None:
        dirs.append(generated.name)  # searched last: a recipe file of the same name wins
    if dirs:
        paths = ",".join(f"file://{Path(d).resolve()}" for d in dirs)
        overrides.append(f"hydra.searchpath=[{paths}]")
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(recipes_dir), version_base="1.3"):
            return compose(config_name=config_name, overrides=overrides)
    except yaml.YAMLError as e:
        raise InputError(yaml_problem(e)) from None
    except (HydraException, OmegaConfBaseException) as e:
        msg = " ".join(str(e).split()).split(" Config search path:")[0]
        raise InputError(f"recipe error: {msg}{missing_option_hint(msg, [recipes_dir, *dirs])}") from None
    finally:
        GlobalHydra.instance().clear()
        if generated is not None:
            generated.cleanup()


def _default_selections(config_file: Path) -> list[str]:
    """``group=key`` of each plain ``- group: key`` entry of a recipe file's ``defaults`` list."""
    import yaml

    try:
        raw = yaml.safe_load(config_file.read_text()) if config_file.is_file() else None
    except (OSError, yaml.YAMLError):
        return []  # Hydra reports it
    defaults = raw.get("defaults") if isinstance(raw, dict) else None
    return [
        f"{g}={k}"
        for e in (defaults if isinstance(defaults, list) else [])
        if isinstance(e, dict) and len(e) == 1
        for g, k in e.items()
        if g in GROUPS and isinstance(k, str)
    ]


def registered_recipes(
    overrides: Sequence[str],
    dirs: Sequence[str | os.PathLike],
    extra_dirs: Sequence[str] = (),
    config_file: Path | None = None,
) -> tempfile.TemporaryDirectory | None:
    """A temporary recipe folder holding a file for each override (or entry of ``config_file``'s
    ``defaults`` list that no override replaces) that selects a registry key which no recipe folder
    in ``dirs`` has a file for (``encoder=mine``, no ``encoder/mine.yaml``); None when every
    selected key has its file. The caller cleans the folder up.

    A key registered from Python (``agentcir.register("encoder", "mine")``, or a plugin's entry
    point) needs no recipe file: its file here holds only ``name: mine``, and :func:`validate`
    fills every field from the registered ``Config`` dataclass's defaults; ``none`` selects no
    component. A key that is neither registered nor has a file is an :class:`InputError` that
    names the file to add and where (in the first of ``extra_dirs``, else ``./recipes``).
    """
    from hydra.core.override_parser.types import OverrideType

    written: list[tuple[str, str]] = []
    parsed = [parse_override(text) for text in overrides]
    chosen = {o.key_or_group for o in parsed}
    defaults = [
        text for text in (_default_selections(config_file) if config_file else []) if text.split("=")[0] not in chosen
    ]
    for o in [*parsed, *map(parse_override, defaults)]:
        group, key = o.key_or_group, o.value() if not o.is_sweep_override() else None
        if group not in GROUPS or o.package is not None or o.type == OverrideType.DEL or not isinstance(key, str):
            continue
        if any((Path(d) / group / f"{key}.yaml").is_file() for d in dirs):
            continue
        reg = REGISTRIES[group]
        if key != NONE_KEY and key not in reg:
            own = [Path(d).resolve() for d in extra_dirs if Path(d).resolve() != RECIPES_DIR]  # the user's folders
            where = own[0] if own else Path.cwd() / "recipes"
            files = sorted(
                {f.stem for d in dirs if (Path(d) / group).is_dir() for f in (Path(d) / group).glob("*.yaml")}
            )
            raise InputError(
                f"recipe error: {group} '{key}' has no recipe file {group}/{key}.yaml and no {group} is registered as "
                f"'{key}' (registered {reg.plural}: {', '.join(reg.keys()) or '(none)'}{closest_hint(key, sorted({*reg.keys(), *files}))}). "
                f"Register it from Python with @agentcir.register('{group}', '{key}') on a class with a Config dataclass "
                f"(its defaults become the recipe), or add the file {where / group / f'{key}.yaml'} holding "
                f"'name: <a registered {group}>' and its fields, and pass the folder {where} with --recipes {where} "
                f"(Python: recipes=['{where}']); searched: {', '.join(str(d) for d in dirs)}"
            )
        written.append((group, key))
    if not written:
        return None
    out = tempfile.TemporaryDirectory(prefix="agentcir-recipes-")
    for group, key in written:
        path = Path(out.name) / group / f"{key}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            f"# {group} '{key}': registered from Python; fields from its Config defaults\nname: {json.dumps(key)}\n"
        )
    return out


def check_recipe_dirs(dirs: Sequence[str | os.PathLike]) -> None:
    """Each user recipe folder (``--recipes DIR``) must be an existing folder (Hydra would only warn)."""
    for d in dirs:
        if not Path(d).is_dir():
            why = "is not a folder" if Path(d).exists() else "does not exist"
            raise InputError(
                f"recipe folder '{d}' (--recipes) {why}; give a folder holding group folders "
                f"(method/NAME.yaml, encoder/NAME.yaml, ...)"
            )


def yaml_problem(e: Exception) -> str:
    """A one-line message for a recipe file that is not valid YAML, naming the file, line and column."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    where = f"'{mark.name}', line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "a recipe file"
    what = (
        " ".join(str(x) for x in (getattr(e, "context", None), getattr(e, "problem", None)) if x)
        or str(e).splitlines()[0]
    )
    return f"recipe file {where}: malformed YAML ({what}); fix the file"


def missing_option_hint(msg: str, dirs: Sequence[str | os.PathLike]) -> str:
    """``"; did you mean 'octopus'?"`` for Hydra's "Could not find 'method/octopuss'", from the
    options (``<group>/<option>.yaml``) of the recipe folders ``dirs``; else ``""``."""
    import re

    m = re.search(r"Could not find '([^']+)/([^'/]+)'", msg)
    if not m:
        return ""
    group, option = m.groups()
    options = {p.stem for d in dirs if (Path(d) / group).is_dir() for p in (Path(d) / group).glob("*.yaml")}
    return closest_hint(option, options)


def plugin_recipe_dirs() -> list[str]:
    """Recipe folders shipped by plugins: entry-point group ``agentcir.recipes``, whose value is
    a package holding group folders (``encoder/mine.yaml``, ...), searched after the built-ins."""
    import importlib.util
    from importlib import metadata

    out = []
    for ep in metadata.entry_points(group="agentcir.recipes"):
        spec = importlib.util.find_spec(ep.value.split(":", 1)[0].strip())
        locations = list(spec.submodule_search_locations or []) if spec else []
        if not locations:
            raise InputError(
                f"plugin recipe entry point '{ep.name}' names '{ep.value}', which is not an importable package folder"
            )
        out.extend(locations)
    return out


def validate(raw: dict[str, Any], check_devices: bool = True) -> dict[str, Any]:
    """Type-check a composed recipe against the registries and fill every default.

    Returns the resolved recipe as plain containers.
    """
    import_plugins((raw.get("run") or {}).get("plugins"))  # before the registry keys are checked
    known = {*GROUPS, "kernels", "run", "scale"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(
            f"recipe: unknown top-level key(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}"
            f"{closest_hint(unknown[0], known)}"
        )
    out: dict[str, Any] = {}
    for group in GROUPS:
        node = raw.get(group)
        if node is None:
            continue
        if not isinstance(node, dict) or "name" not in node:
            raise ConfigError(f"recipe group '{group}' must be a mapping with a 'name' (a registry key), got {node!r}")
        node = dict(node)
        name = node.pop("name")
        if name == NONE_KEY:
            if node:
                raise ConfigError(
                    f"{group} 'none': selects no {group} and takes no fields, got {', '.join(map(repr, sorted(node)))}"
                )
            out[group] = {"name": NONE_KEY}
            continue
        cls = REGISTRIES[group].config_class(str(name))
        cfg = make_config(cls, node, where=f"{group} '{name}'")
        out[group] = {"name": name, **config_dict(cfg)}
    out["kernels"] = config_dict(make_config(KernelsConfig, raw.get("kernels") or {}, where="kernels"))
    if out["kernels"]["backend"] not in KERNEL_BACKENDS:
        raise ConfigError(
            f"kernels: field 'backend': unknown kernel backend '{out['kernels']['backend']}'; "
            f"choose one of {', '.join(KERNEL_BACKENDS)}"
        )
    run_node = dict(raw.get("run") or {})
    for key in ("plugins", "loggers"):  # run.plugins=my_module, run.loggers=csv: one name
        if isinstance(run_node.get(key), str):
            run_node[key] = [run_node[key]]
    out["run"] = config_dict(make_config(RunConfig, run_node, where="run"))
    if raw.get("scale"):  # only when given: recipes without it keep their identity
        from .scale import scale_settings

        out["scale"] = scale_settings(raw["scale"])
    from .recipe_checks import check_loggers, check_recipe

    if out["run"]["loggers"] or out["run"]["tracking"]:
        check_loggers(out["run"])
    check_recipe(out, GROUPS, devices=check_devices)  # paths (run.name), devices (encoder.device)
    return out


def parse_override(text: str):
    """One Hydra override parsed by Hydra's grammar (an ``Override``); bad syntax is an
    :class:`InputError` naming the override."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        (o,) = OverridesParser.create().parse_overrides([text])
    except HydraException as e:
        raise InputError(
            f"override '{text}': {str(e).splitlines()[0]} (syntax: group=option, group.field=value, "
            f"+experiment=NAME; sweeps with -m: a,b,c or range(start,stop,step))"
        ) from None
    if not o.key_or_group:
        raise InputError(f"override '{text}': no key before '='")
    return o


def recipe_groups(dirs: Sequence[str | os.PathLike]) -> set[str]:
    """Names of the recipe groups (sub-folders) of the recipe folders ``dirs``."""
    return {p.name for d in dirs if Path(d).is_dir() for p in Path(d).iterdir() if p.is_dir()}


def project_overrides(overrides: Sequence[str], groups: set[str]) -> list[str]:
    """The overrides as Hydra should apply them so that the project checks them.

    A field override (``method.lam=0.3``, ``run.speed=1``, a mistyped group ``methd=xr``) is
    force-added (``++``): :func:`validate` then rejects an unknown field with the valid fields
    and the closest match, instead of Hydra's struct-mode hint to add ``+``; the keys of open
    mappings (``run.imports.perceive=FILE``, ``run.prices.llm.per_call=1``, ``encoder.text.name=X``)
    are added or replaced alike. ``experiment=X``
    applies the bundle (``+experiment=X``). A sweep value is refused (it needs ``-m``).
    """
    from hydra.core.override_parser.types import OverrideType

    out = []
    for text in overrides:
        o = parse_override(text)
        if o.is_sweep_override():
            raise InputError(
                f"override '{text}' sweeps over several values; run the sweep with "
                f"`agentcir run -m {text}` (--multirun), write a list as key=[a,b], "
                f"or quote a string holding commas: key='a,b'"
            )
        key = o.key_or_group
        if o.type == OverrideType.CHANGE and o.package is None and not key.startswith("hydra."):
            if key == "experiment":
                text = "+" + text
            elif "." in key or key not in groups:
                text = "++" + text
        out.append(text)
    return out


def compose(
    overrides: Sequence[str] = (),
    *,
    config_name: str = "config",
    recipes_dir: str | os.PathLike | None = None,
    extra_dirs: Sequence[str] = (),
    check_devices: bool = True,
) -> dict[str, Any]:
    """Compose ``recipes/<config_name>.yaml`` with Hydra ``overrides`` and validate it.

    ``extra_dirs`` are user recipe folders searched too (same group layout). ``check_devices``
    false skips the devices' availability (a recipe printed or planned here, run elsewhere).
    """
    from omegaconf import OmegaConf

    cfg = _hydra_compose(overrides, config_name, Path(recipes_dir or RECIPES_DIR), extra_dirs)
    raw = OmegaConf.to_container(cfg, resolve=True)
    raw.pop("hydra", None)
    return validate(raw, check_devices=check_devices)


class ComponentPool:
    """Builds the components of a resolved recipe on first use, injecting what each one
    ``requires`` (and its ``optional`` kinds, when the recipe names them)."""

    def __init__(self, recipe: dict[str, Any], *, prebuilt: dict[str, Any] | None = None):
        self.recipe = recipe
        if "run" in recipe:  # the decoder's pixel limit, before any component reads an image
            from .images import set_max_pixels

            import_plugins(recipe["run"].get("plugins"))  # a recipe resolved in another process
            set_max_pixels(recipe["run"].get("max_image_pixels", 0))
        self._built: dict[str, Any] = dict(prebuilt or {})
        self._building: list[str] = []

    def has(self, kind: str) -> bool:
        """Whether the recipe selects a component of ``kind`` (not ``none``) or one was built."""
        node = self.recipe.get(kind)
        return kind in self._built or (node is not None and node.get("name") != NONE_KEY)

    def get(self, kind: str) -> Any:
        """The component of ``kind``, built on first use with its dependencies injected."""
        if kind in self._built:
            return self._built[kind]
        if kind not in REGISTRIES:
            raise InputError(f"unknown component kind '{kind}'; kinds: {', '.join(REGISTRIES)}")
        if not self.has(kind):
            raise InputError(f"the recipe selects no {kind} (group '{kind}' is missing or 'none'), but one is needed")
        if kind in self._building:
            raise InputError(f"component dependency cycle: {' -> '.join([*self._building, kind])}")
        node = dict(self.recipe[kind])
        name = node.pop("name")
        reg = REGISTRIES[kind]
        cls = reg.get(name).obj
        self._building.append(kind)
        try:
            deps = self._deps(cls)
            deps.update(self._memories(cls, node))
        finally:
            self._building.pop()
        self._built[kind] = reg.build(name, node, **deps)
        return self._built[kind]

    def _deps(self, cls: type) -> dict[str, Any]:
        """What ``cls`` ``requires``, and its ``optional`` kinds the recipe names, from this pool."""
        deps = {k: self.get(k) for k in getattr(cls, "requires", ())}
        deps.update({k: self.get(k) for k in getattr(cls, "optional", ()) if self.has(k)})
        return deps

    def _memories(self, cls: type, node: dict[str, Any]) -> dict[str, Any]:
        """The memory components a method names in ``memories`` (dependency -> memory registry key),
        each built with ``cls.memory_config(dependency, node)`` and its own dependencies from this pool."""
        out = {}
        reg = REGISTRIES["memory"]
        for dep, key in getattr(cls, "memories", {}).items():
            out[dep] = reg.build(key, cls.memory_config(dep, node), **self._deps(reg.get(key).obj))
        return out

    def built(self) -> dict[str, Any]:
        """The components built so far, by kind."""
        return dict(self._built)

    def close(self) -> None:
        """Close every built component that holds resources (clients, pools)."""
        for comp in self._built.values():
            close = getattr(comp, "close", None)
            if callable(close):
                close()
