"""The public Python API of agentcir, re-exported by the package: ``import agentcir as ac``.

A few lines each, as with the ``agentcir`` command::

    import agentcir as ac

    recipe = ac.compose("method=xr", "dataset=demo")       # a recipe, checked against the registries
    result = ac.run(recipe)                                # metrics, rankings, the run directory
    ac.index("photos/", out="gallery/")                    # a gallery of a folder (photo metadata too)
    hits = ac.Retriever("gallery/").search(text="a red dress", k=5).hits

    @ac.register("encoder", "mine")                        # a component from a notebook:
    class Mine(ac.Encoder): ...                            # selectable as encoder=mine, no recipe file

Each name is the code path of its command (``agentcir run``, ``index``, ``search``, ``list``):
the same recipe gives the same run directory, gallery and hits. Importing the package stays
light; this module is loaded on the first use of one of its names, and it loads Hydra,
the models and the gallery only when a function needs them.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, TypeVar

from .framework.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    from .framework.indexing import IndexReport
    from .framework.search import SearchResult
    from .framework.state import RunResult as _FrameworkResult

__all__ = ["Retriever", "RunResult", "compose", "index", "list_components", "load_recipe", "register", "run"]

#: a resolved recipe: plain mappings, one per group (``encoder``, ``method``, ``run``, ...)
Recipe = dict[str, Any]
T = TypeVar("T")
PathLike = str | os.PathLike


def _overrides(overrides: Iterable[Any]) -> list[str]:
    """Overrides given as strings, or as one list of strings."""
    out: list[str] = []
    for o in overrides:
        if isinstance(o, (builtins.list, tuple)):
            out.extend(_overrides(o))
        elif isinstance(o, str):
            out.append(o)
        else:
            raise InputError(f"an override is a string such as 'method=xr' or 'method.top_k=50', got {o!r}")
    return out


def _dirs(recipes: PathLike | Iterable[PathLike] | None) -> list[str]:
    if recipes is None:
        return []
    if isinstance(recipes, (str, os.PathLike)):
        recipes = [recipes]
    out = [str(d) for d in recipes]
    for d in out:
        if not Path(d).is_dir():
            raise InputError(f"recipe folder '{d}' is not a folder")
    return out


def compose(
    *overrides: str | Iterable[str],
    recipes: PathLike | Iterable[PathLike] | None = None,
    config: str = "config",
    check_devices: bool = True,
) -> Recipe:
    """A resolved recipe: ``recipes/<config>.yaml`` with Hydra ``overrides``, type-checked.

    The same overrides as ``agentcir run``: ``group=option`` picks a component (a recipe file,
    or a key registered with :func:`register`, whose ``Config`` defaults then fill the recipe),
    ``group.field=value`` sets a field, ``+experiment=NAME`` applies a bundle. ``recipes``: your
    recipe folders (same layout: ``encoder/mine.yaml``, ...), searched after the project's.
    A wrong field or type is an error naming it.

    Example:
        >>> import agentcir as ac
        >>> recipe = ac.compose("method=xr", "method.top_k=50", "llm=rules")
        >>> recipe["method"]["name"], recipe["method"]["top_k"], recipe["encoder"]["name"]
        ('xr', 50, 'catalog')
        >>> ac.compose("method.top_k=many")
        Traceback (most recent call last):
        ...
        agentcir.registry.config.ConfigError: method 'octopus': field 'top_k': Value 'many' of type 'str' could not be converted to Integer
    """
    from .framework.recipe import compose as _compose

    return _compose(_overrides(overrides), config_name=config, extra_dirs=_dirs(recipes), check_devices=check_devices)


def load_recipe(
    path: PathLike, *overrides: str | Iterable[str], recipes: PathLike | Iterable[PathLike] | None = None
) -> Recipe:
    """A recipe from a YAML file, or the recipe of a run directory.

    - A file with a ``defaults:`` list (a top-level recipe like the project's ``config.yaml``)
      is composed with ``overrides``; the groups it names come from the project's recipes,
      from ``recipes`` and from the file's own folder.
    - A resolved recipe (a run directory's ``recipe.yaml``, what :func:`compose` returns, saved)
      is type-checked again; ``overrides`` may set fields (``method.top_k=20``).
    - A run directory: its ``recipe.yaml``.

    Example:
        >>> import agentcir as ac, yaml
        >>> _ = open("mine.yaml", "w").write(yaml.safe_dump(ac.compose("method=image_text_sum")))
        >>> ac.load_recipe("mine.yaml", "method.top_k=20")["method"]
        {'name': 'image_text_sum', 'top_k': 20, 'image_weight': 0.5}
    """
    import yaml

    p = Path(path)
    if p.is_dir():
        p = p / "recipe.yaml"
    if not p.is_file():
        raise InputError(
            f"recipe '{path}' not found" + (" (a run directory holds recipe.yaml)" if Path(path).is_dir() else "")
        )
    try:
        raw = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise InputError(f"recipe '{p}' is not valid YAML: {' '.join(str(e).split())}") from None
    if not isinstance(raw, dict):
        raise InputError(f"recipe '{p}' must be a mapping of groups (encoder:, method:, ...), got {type(raw).__name__}")
    extra = [*_dirs(recipes), str(p.parent)]
    if "defaults" in raw:
        import shutil
        import tempfile

        from .framework.recipe import RECIPES_DIR
        from .framework.recipe import compose as _compose

        with tempfile.TemporaryDirectory(prefix="agentcir-recipe-") as d:  # the file alone: never the project's config
            shutil.copyfile(p, Path(d) / "recipe.yaml")
            return _compose(
                _overrides(overrides), config_name="recipe", recipes_dir=d, extra_dirs=[str(RECIPES_DIR), *extra]
            )
    from omegaconf import OmegaConf

    from .framework.recipe import parse_override, validate

    dotlist = []
    for text in _overrides(overrides):
        o = parse_override(text)
        if "." not in o.key_or_group or o.is_sweep_override():
            raise InputError(
                f"override '{text}': a resolved recipe takes field overrides (group.field=value); "
                f"pick another component with ac.compose(...)"
            )
        dotlist.append(f"{o.key_or_group}={o.value()}" if isinstance(o.value(), str) else text)
    merged = OmegaConf.merge(OmegaConf.create(raw), OmegaConf.from_dotlist(dotlist)) if dotlist else raw
    if dotlist:
        merged = OmegaConf.to_container(merged, resolve=True)
    return validate(merged)


@dataclass(frozen=True)
class RunResult:
    """What :func:`run` returns: the metrics, the rankings and where the files are.

    Attributes:
        dir: the run directory (rerunning the same recipe resumes it).
        metrics: the final ranking's metrics (``mAP@5``, ``R@10``, ... as the dataset defines).
        stage_metrics: the metrics of each stage's ranking, by stage name.
        rankings: ranked gallery ids per query id (as in ``rankings.jsonl``).
        scores: the scores of those rankings, per query id.
        num_queries: queries evaluated.
        gallery_size: items in the gallery.
        recipe: the resolved recipe that ran.
        result: the runner's full result (queries, gallery, candidates, per-stage call counts).

    Example:
        >>> import agentcir as ac
        >>> result = ac.run(ac.compose("method=image_text_sum", "dataset=composed", f"dataset.root={bench}"))
        >>> result.num_queries, sorted(result.rankings)
        (3, ['q00000', 'q00001', 'q00002'])
        >>> result.report.name, result.metrics_file.name, ac.load_recipe(result.dir) == result.recipe
        ('report.md', 'metrics.json', True)
    """

    dir: Path
    metrics: dict[str, Any]
    stage_metrics: dict[str, dict[str, Any]]
    rankings: dict[str, builtins.list[str]] = field(repr=False)
    scores: dict[str, builtins.list[float]] = field(repr=False)
    num_queries: int
    gallery_size: int
    recipe: Recipe = field(repr=False)
    result: _FrameworkResult = field(repr=False)

    @property
    def report(self) -> Path:
        """``report.md``: the recipe, the metrics per stage, model calls and timings."""
        return self.dir / "report.md"

    @property
    def metrics_file(self) -> Path:
        """``metrics.json``."""
        return self.dir / "metrics.json"

    @property
    def rankings_file(self) -> Path:
        """``rankings.jsonl``: one ``{"query", "ids", "scores"}`` per line."""
        return self.dir / "rankings.jsonl"

    @property
    def recipe_file(self) -> Path:
        """``recipe.yaml``: the resolved recipe (:func:`load_recipe` reads it back)."""
        return self.dir / "recipe.yaml"


def run(recipe: Recipe | PathLike, *, progress: bool | None = None, wait: bool = False) -> RunResult:
    """Run a recipe end to end, as ``agentcir run`` does, and return its :class:`RunResult`.

    ``recipe``: what :func:`compose` or :func:`load_recipe` returns, or a recipe file / run
    directory. Rerunning the same recipe resumes its run directory (under ``run.root``) and
    reuses every finished stage and cached model call. ``progress``: progress bars on stderr
    (default: the recipe's ``run.progress``). ``wait``: wait for another process working in the
    same run directory instead of failing.

    Example (``bench``: a benchmark folder in the agentcir format, here 3 queries of the demo):
        >>> import agentcir as ac
        >>> recipe = ac.compose("method=image_text_sum", "dataset=composed", f"dataset.root={bench}")
        >>> result = ac.run(recipe)
        >>> result.num_queries, sorted(result.metrics)
        (3, ['R@1', 'R@10', 'R@5', 'R@50', 'mAP@10', 'mAP@25', 'mAP@5', 'mAP@50'])
        >>> result.dir.parent.name, result.rankings_file.name, len(result.rankings["q00000"]) > 0
        ('runs', 'rankings.jsonl', True)
    """
    from .framework.report import ranking_rows
    from .framework.runner import run_recipe

    if not isinstance(recipe, Mapping):
        recipe = load_recipe(recipe)
    r = run_recipe(dict(recipe), progress=progress, wait=wait)
    rows = ranking_rows(r, k=r.candidates.k)
    return RunResult(
        dir=Path(r.dir),
        metrics=dict(r.metrics["final"]),
        stage_metrics=dict(r.metrics.get("stages", {})),
        rankings={row["query"]: row["ids"] for row in rows},
        scores={row["query"]: row["scores"] for row in rows},
        num_queries=int(r.metrics["num_queries"]),
        gallery_size=int(r.metrics["gallery_size"]),
        recipe=r.recipe,
        result=r,
    )


def _recipe(overrides: tuple, recipe: Recipe | None, recipes, what: str) -> Recipe:
    if recipe is not None:
        if overrides:
            raise InputError(f"{what}: give a recipe or overrides, not both (compose the overrides into the recipe)")
        if not isinstance(recipe, Mapping):
            raise InputError(
                f"{what}: recipe must be a resolved recipe (ac.compose / ac.load_recipe), got {type(recipe).__name__}"
            )
        return dict(recipe)
    return compose(*overrides, recipes=recipes)


def index(
    folder: PathLike,
    *overrides: str | Iterable[str],
    out: PathLike,
    recipe: Recipe | None = None,
    recipes: PathLike | Iterable[PathLike] | None = None,
    user: str | None = None,
    metadata: bool = True,
    dtype: str = "float32",
    shards: int | None = None,
    engine: str | None = None,
    address: str | None = None,
    progress: bool = False,
) -> IndexReport:
    """Embed every image under ``folder`` into the gallery directory ``out``, as ``agentcir index``.

    The recipe's encoder embeds the images (``overrides`` such as ``encoder=open_clip``, or a
    ``recipe``); each photo's EXIF/XMP metadata (date, GPS and place, camera, album = folder,
    people, keywords; ``metadata=False`` skips it) and ``user`` go into its item's ``meta``.
    Unreadable images and non-image files are skipped and counted. Indexing again resumes an
    unfinished build and refreshes the metadata. ``shards`` / ``engine`` / ``address``: a
    sharded gallery (``docs/scale.md``). Returns an :class:`~agentcir.framework.indexing.IndexReport`.

    Example (``photos``: 12 photos, two of them in the folder ``Trip 2019`` with EXIF dates and GPS):
        >>> import agentcir as ac
        >>> report = ac.index(photos, out="gallery")
        >>> report.indexed, report.encoder, report.gallery.dim
        (12, 'catalog', 384)
        >>> print(report.metadata)
        metadata of 12 photo(s): 2 with a date, 2 with GPS, 0 with named people; 0 partial record(s) (unreadable or malformed metadata)
        >>> meta = report.gallery.items[report.gallery.index_of("Trip 2019/rome")].meta
        >>> meta["album"], meta["taken_time"], meta["city"]
        ('Trip 2019', '2019-05-03 10:00:00', 'Rome')
    """
    from .framework.indexing import index_folder, scale_for

    r = _recipe(overrides, recipe, recipes, "index")
    return index_folder(
        r,
        folder,
        out,
        dtype=dtype,
        user=user,
        metadata=metadata,
        progress=progress,
        scale=scale_for(r, engine=engine, address=address, shards=shards),
    )


class Retriever:
    """Search an indexed gallery with a recipe's method, one query at a time.

    ``gallery``: a directory made by :func:`index` (or ``agentcir index``) with the recipe's
    encoder. The recipe comes from ``overrides`` (``method=xr``, ``llm=openai``, ...) or a
    ``recipe``; components are built once, and every model call goes through the call cache.

    Example:
        >>> import agentcir as ac
        >>> _ = ac.index(photos, out="gallery")
        >>> retriever = ac.Retriever("gallery", "method=image_text_sum")
        >>> result = retriever.search(image=f"{photos}/10007.jpg", text="in blue", k=3)
        >>> [h.rank for h in result.hits], sorted(result.to_json())
        ([1, 2, 3], ['hits', 'trace'])
        >>> retriever.search(text="a black watch", k=2).trace["search"]["mode"]
        'text'
    """

    def __init__(
        self,
        gallery: PathLike,
        *overrides: str | Iterable[str],
        recipe: Recipe | None = None,
        recipes: PathLike | Iterable[PathLike] | None = None,
        progress: bool = False,
    ):
        from .framework.search import Searcher

        if not Path(gallery).is_dir():
            raise InputError(f"gallery '{gallery}' is not a folder; make one with ac.index(FOLDER, out=...)")
        self._searcher = Searcher(_recipe(overrides, recipe, recipes, "Retriever"), gallery, progress=progress)

    @property
    def recipe(self) -> Recipe:
        """The resolved recipe."""
        return self._searcher.recipe

    @property
    def gallery(self):
        """The opened gallery (``ids``, ``paths``, ``items`` with their ``meta``, ``image_emb``)."""
        return self._searcher.gallery

    def search(self, *, image: PathLike | None = None, text: str = "", k: int = 10) -> SearchResult:
        """Rank the gallery for a reference ``image`` and/or a ``text``: the top ``k`` hits.

        Returns a :class:`~agentcir.framework.search.SearchResult`: ``hits`` (``rank``, ``id``,
        ``score``, ``path``, ``row``, ``meta``, ``verified``) and ``trace`` (what each stage
        recorded, and ``search``: the mode, excluded hits, model calls per stage);
        ``.to_json()`` is the object ``agentcir search --json`` prints. A text without an
        image works with any method (text retrieval when the method needs a reference).

        Example:
            >>> import agentcir as ac
            >>> _ = ac.index(photos, out="gallery")
            >>> hits = ac.Retriever("gallery", "method=text_only").search(text="a red top", k=2).hits
            >>> len(hits), hits[0].rank, type(hits[0].score).__name__
            (2, 1, 'float')
        """
        return self._searcher.search(image=image, text=text, k=k)

    def close(self) -> None:
        """Release the components (endpoint clients, models)."""
        self._searcher.pool.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Retriever(gallery='{self.gallery.root}', method='{self._searcher.method_name}', items={len(self.gallery)})"


def _registry(kind: str):
    from .registry import REGISTRIES

    if kind not in REGISTRIES:
        raise InputError(f"unknown component kind '{kind}'; kinds: {', '.join(REGISTRIES)}")
    return REGISTRIES[kind]


def register(kind: str, name: str, *, config: type | None = None) -> Callable[[T], T]:
    """Class decorator: register a component of ``kind`` under ``name``.

    The class takes its ``Config`` dataclass (or ``config``) and the components it ``requires``;
    ``kind`` is one of ``encoder``, ``llm``, ``captioner``, ``generator``, ``editor``, ``detector``,
    ``verifier``, ``memory``, ``method``, ``dataset``. The name is then selectable in any
    recipe (``encoder=mine``, ``encoder.dim=8``) with no recipe file: its ``Config`` defaults
    are the recipe. Registering the same class again (a notebook cell run twice) is allowed;
    another class under a taken name is an error.

    Example:
        >>> import agentcir as ac, numpy as np
        >>> from dataclasses import dataclass
        >>> @ac.register("encoder", "doc_bits")
        ... class Bits(ac.Encoder):
        ...     @dataclass
        ...     class Config:
        ...         dim: int = 8
        ...     @property
        ...     def dim(self):
        ...         return self.cfg.dim
        ...     def _embed_images(self, images):
        ...         return np.stack([np.resize(np.asarray(im.resize((4, 4)), np.float32).ravel(), self.dim) for im in images])
        ...     def _embed_texts(self, texts):
        ...         return np.stack([np.resize(np.frombuffer(t.encode().ljust(8), np.uint8).astype(np.float32), self.dim)
        ...                          for t in texts])
        >>> ac.compose("encoder=doc_bits", "encoder.dim=16")["encoder"]
        {'name': 'doc_bits', 'dim': 16}
        >>> ac.index(photos, "encoder=doc_bits", out="bits").gallery.dim
        8
    """
    return _registry(kind).register(name, config=config)


def list_components(kind: str | None = None) -> dict[str, builtins.list[str]] | builtins.list[str]:
    """The registered names (built in, plugins, registered from Python): ``ac.list(kind)``.

    With a ``kind`` its names; without, every kind's, by kind.

    Example:
        >>> import agentcir as ac
        >>> "xr" in ac.list("method"), "catalog" in ac.list()["encoder"]
        (True, True)
        >>> ac.list("encoders")
        Traceback (most recent call last):
        ...
        agentcir.errors.InputError: unknown component kind 'encoders'; kinds: encoder, llm, captioner, generator, editor, detector, verifier, memory, method, dataset
    """
    from .registry import REGISTRIES

    if kind is not None:
        return _registry(kind).keys()
    return {k: reg.keys() for k, reg in REGISTRIES.items()}
